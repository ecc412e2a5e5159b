package kafkatest

import (
	"context"
	"maps"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Withholding returns a group balancer for a test's group leader: it assigns every partition to
// the member whose instance id is owner and nothing to the others, except in its first plan
// with that member, which gives it partition 0 of each topic and nobody the rest — the state a
// cooperative rebalance is in between its two rounds, when a member has revoked partitions and
// not yet rejoined. Its protocol and join metadata are b's, so it can lead a group of members
// that use b.
func Withholding(b kgo.GroupBalancer, owner string) kgo.GroupBalancer {
	return &withholding{GroupBalancer: b, owner: owner}
}

type withholding struct {
	kgo.GroupBalancer
	owner    string
	withheld atomic.Bool
}

func (w *withholding) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	b, err := kgo.NewConsumerBalancer(w, members)
	if err != nil {
		return nil, nil, err
	}
	return b, b.MemberTopics(), nil
}

func (w *withholding) Balance(b *kgo.ConsumerBalancer, topics map[string]int32) kgo.IntoSyncAssignment {
	plan := b.NewPlan()
	for i := range len(b.Members()) {
		member, _ := b.MemberAt(i)
		if member.InstanceID == nil || *member.InstanceID != w.owner {
			continue
		}
		first := !w.withheld.Swap(true)
		for topic, n := range topics {
			for p := range n {
				if !first || p == 0 {
					plan.AddPartition(member, topic, p)
				}
			}
		}
	}
	return plan
}

// Member starts a client of group that consumes topic with balancer b, as the static member
// instance unless it is "", and returns it with the assignments it is given, in order. The
// client is closed at cleanup (Close it sooner to stop it as a static member stops: without
// leaving the group).
func Member(t testing.TB, brokers, group, topic, instance string, b kgo.GroupBalancer) (*kgo.Client, <-chan map[string][]int32) {
	t.Helper()
	assigned := make(chan map[string][]int32, 8)
	opts := []kgo.Opt{kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.Balancers(b),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) { assigned <- a })}
	if instance != "" {
		opts = append(opts, kgo.InstanceID(instance))
	}
	return Client(t, brokers, opts...), assigned
}

// AwaitAssigned fails t unless who's next assignment, within d, is want.
func AwaitAssigned(t testing.TB, who string, assigned <-chan map[string][]int32, want map[string][]int32, d time.Duration) {
	t.Helper()
	select {
	case a := <-assigned:
		if !maps.EqualFunc(a, want, slices.Equal) {
			t.Fatalf("%s was assigned %v, want %v", who, a, want)
		}
	case <-time.After(d):
		t.Fatalf("%s was not assigned within %v", who, d)
	}
}
