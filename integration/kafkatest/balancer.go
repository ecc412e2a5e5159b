package kafkatest

import (
	"sync/atomic"

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
