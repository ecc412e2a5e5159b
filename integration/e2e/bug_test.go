package e2e

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
	"github.com/sluice-dev/sluice/integration/kafkatest"
)

// TestBacklogExitsWhenInputStops: a task that entered backlog mode while catching up with a
// finished input leaves it and commits its outputs and offsets with no more input.
//
// It was a bug (fixed in 33230ab, "observe the lag after each batch too"): a task's lag was
// measured only when a fetch returned records for its partition, as "end offset − first offset
// of the batch". The last batch of a backlog is usually larger than exit_lag, so the detector's
// last observation stayed ≥ exit_lag: no switch, no checkpoint, committed offset stuck at 0.
// DESIGN.md defines lag as end minus the next offset to process, which is 0 once the batch is
// processed, and the engine now observes it after each batch.
//
// This test never nudges (pipeline.waitCommitted with nudge false).
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
