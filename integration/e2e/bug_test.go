package e2e

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
	"github.com/sluice-dev/sluice/integration/kafkatest"
)

// TestBacklogExitsWhenInputStops shows a sluice bug: a task that entered backlog mode while
// catching up with a finished input never leaves it, so it never commits its outputs or offsets,
// until more input arrives.
//
// Cause (consumer/consumer.go, Engine.dispatch): a task's lag is measured only when a fetch
// returns records for its partition, as "end offset − first offset of the batch" (the batch
// counts as lag). The last batch of a backlog is usually larger than exit_lag (a fetch carries
// thousands of orders), so the detector's last observation stays ≥ exit_lag: no switch, no
// checkpoint, committed offset stuck at 0 while /status shows next_offset = end offset and
// lag = the size of the last batch. DESIGN.md defines lag as end minus the next offset to
// process, which is 0 once the batch is processed.
//
// The other tests work around it by nudging stuck partitions with one extra order
// (pipeline.waitCaughtUp); this one does not nudge.
func TestBacklogExitsWhenInputStops(t *testing.T) {
	ctx := t.Context()
	brokers := kafkatest.Fake(t, 8)
	s := workload.Spec{Records: 20_000, Keys: 500, Partitions: 8, Seed: 41}
	p := newPipeline(t, brokers, pipelineOpts{partitions: 8, keys: s.Keys, enterLag: 1000, exitLag: 100})
	if err := p.produce(ctx, s); err != nil {
		t.Fatal(err)
	}
	in := p.newInstance("b0", true)
	in.start()
	// 20k orders take well under a second to process on kfake; 30s is generous.
	p.waitCommitted(ctx, 30*time.Second, false, in)
	in.term()
	p.verify(ctx, p.expected(s), in.id)
}
