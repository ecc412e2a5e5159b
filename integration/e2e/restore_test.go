package e2e

import (
	"os"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
	"github.com/sluice-dev/sluice/integration/kafkatest"
)

// TestRestoreFromChangelog runs one instance to completion, stops it cleanly, deletes its state
// dir, produces more, and runs it again: the second run must restore every key from the
// changelog (a "state restored" line with full=true) and the totals must still be exact.
func TestRestoreFromChangelog(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	ctx := t.Context()
	const parts = 8
	first := workload.Spec{Records: 60_000, Keys: 3_000, Partitions: parts, Seed: 11}
	second := workload.Spec{Records: 20_000, Keys: 3_000, Partitions: parts, Seed: 12}
	p := newPipeline(t, brokers, pipelineOpts{partitions: parts, keys: first.Keys, enterLag: 5000, exitLag: 500})
	in := p.newInstance("r0", true)

	if err := p.produce(ctx, first); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	in.start()
	p.waitCaughtUp(ctx, 90*time.Second, in)
	in.term()
	t.Logf("run 1: %d records processed in %v", first.Records, time.Since(start).Round(time.Millisecond))

	if err := os.RemoveAll(in.stateDir); err != nil {
		t.Fatal(err)
	}
	if err := p.produce(ctx, second); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	in.start()
	p.waitCaughtUp(ctx, 90*time.Second, in)
	in.term()
	t.Logf("run 2: restore + %d records in %v", second.Records, time.Since(start).Round(time.Millisecond))

	var full, restored float64
	lines := in.logLines(2, "state restored")
	for _, l := range lines {
		if l["full"] == true {
			full++
		}
		if n, ok := l["records"].(float64); ok {
			restored += n
		}
	}
	if full == 0 {
		t.Errorf("run 2 after deleting the state dir logged no \"state restored\" line with full=true; lines: %v", lines)
	}
	if keys := float64(len(first.Expected())); restored < keys {
		t.Errorf("run 2 restored %v changelog records, want at least one per key of run 1 (%v)", restored, keys)
	}
	t.Logf("run 2: %d \"state restored\" lines, %v with full=true, %v changelog records", len(lines), full, restored)
	p.verify(ctx, p.expected(first, second), in.id)
}
