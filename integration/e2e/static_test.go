package e2e

import (
	"context"
	"maps"
	"slices"
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
	member := func(instance string, b kgo.GroupBalancer) (*kgo.Client, chan map[string][]int32) {
		assigned := make(chan map[string][]int32, 8)
		opts := []kgo.Opt{kgo.ConsumerGroup(p.group), kgo.ConsumeTopics(p.topic), kgo.Balancers(b),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) { assigned <- a })}
		if instance != "" {
			opts = append(opts, kgo.InstanceID(instance))
		}
		return kafkatest.Client(t, brokers, opts...), assigned
	}
	await := func(who string, assigned chan map[string][]int32, want map[string][]int32) {
		t.Helper()
		select {
		case a := <-assigned:
			if !maps.EqualFunc(a, want, slices.Equal) {
				t.Fatalf("%s was assigned %v, want %v", who, a, want)
			}
		case <-ctx.Done():
			t.Fatalf("%s was not assigned: %v", who, ctx.Err())
		}
	}
	// sluice's balancer for a pipeline without joins.
	_, leaderAssigned := member("", kafkatest.Withholding(kgo.CooperativeStickyBalancer(), "i0"))
	await("the leader", leaderAssigned, map[string][]int32{})
	pred, predAssigned := member("i0", kgo.CooperativeStickyBalancer())
	await("the predecessor", predAssigned, map[string][]int32{p.topic: {0}})
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
