package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
	"github.com/sluice-dev/sluice/integration/kafkatest"
)

// TestStaticRestartAssignsOrphanedPartitions is a kill -9 between the two rounds of a
// cooperative rebalance, on the real broker. The killed member had revoked partitions for
// another member and not yet rejoined, so nobody owns them; its restart replaces it without a
// rebalance (KIP-345, the group being stable) and gets back only what it kept. A CI run's
// TestCountDistinctKill9 hung that way until its deadline. Here the group's leader is a client
// whose first plan with instance i0 gives it partition 0 of 4 and nobody the rest; a client
// with instance id i0 and sluice's protocol takes it and stops without leaving, as after kill
// -9; sluice then starts as i0 and must process every partition.
func TestStaticRestartAssignsOrphanedPartitions(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	const parts = 4
	spec := workload.Spec{Records: 20_000, Keys: 1_000, Partitions: parts, Seed: 37}
	p := newPipeline(t, brokers, pipelineOpts{partitions: parts, keys: spec.Keys, enterLag: 5000, exitLag: 500})
	if err := p.produce(ctx, spec); err != nil {
		t.Fatal(err)
	}
	// sluice's balancer for a pipeline without joins.
	_, leaderAssigned := kafkatest.Member(t, brokers, p.group, p.topic, "", kafkatest.Withholding(kgo.CooperativeStickyBalancer(), "i0"))
	kafkatest.AwaitAssigned(t, "the leader", leaderAssigned, map[string][]int32{}, 30*time.Second)
	pred, predAssigned := kafkatest.Member(t, brokers, p.group, p.topic, "i0", kgo.CooperativeStickyBalancer())
	kafkatest.AwaitAssigned(t, "the predecessor", predAssigned, map[string][]int32{p.topic: {0}}, 30*time.Second)
	pred.Close() // a static member that owes no rejoin does not leave: the group keeps it

	in := p.newInstance("i0", true)
	in.start()
	p.waitCaughtUp(ctx, 90*time.Second, in)
	if n := len(in.logLines(1, "rejoining the group once after the session's first assignment, so that no partition is left without an owner")); n != 1 {
		t.Errorf("%d \"rejoining the group once\" lines, want 1", n)
	}
	in.term()
	p.verify(ctx, p.expected(spec), in.id)
}
