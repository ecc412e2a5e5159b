package producer

import (
	"slices"
	"sort"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// coPartitionedProtocol is the group protocol name of the CoPartitioned balancer. Every member of
// a group must offer it: the broker refuses a member that shares no protocol with the group.
const coPartitionedProtocol = "sluice-copartitioned"

// CoPartitioned returns a cooperative group balancer (protocol name "sluice-copartitioned") that
// assigns partition p of every topic in one group of `groups` to the same member. Topics of the
// subscription that are in no group are balanced as groups of one. Groups that share a topic are
// merged; a topic no member subscribes to is left out of its group.
//
// The unit of assignment is (group, partition number); a group has as many units as its largest
// topic has partitions, and a topic with fewer partitions has nothing to assign at the numbers
// it lacks (the balancer does not check co-partitioning: the application does). A unit is
// assigned only to a member subscribed to every topic of its group; if no member is, the group
// is balanced as groups of one, since co-location is impossible and the partitions must still be
// consumed.
//
// Per group the units are balanced across the eligible members (counts differ by at most one;
// the members that keep one more are those that already own more than the floor, then the least
// loaded over the groups balanced before, then the first in member order). A unit stays with its
// owner — the member owning most of its partitions, where a partition claimed by two members
// belongs to the higher generation's claim and ties go to member order — while the owner is
// eligible and under its count; the other units go to the eligible member with the fewest units
// of the group, then the least loaded, then the first in member order. Members come sorted by
// instance id then member id, so static members keep their units across restarts.
//
// The plan is cooperative (KIP-429): a unit that changes owner is left out of the plan until its
// old owner has revoked it and rejoined, so a partition is never consumed by two members at once.
// Every topic of a unit moves together; a unit that was owned only in part or split across
// members (a topic or partitions added, or a group formed by another balancer) is withheld
// whole from its new owner until nobody else claims any of it: a member never holds partition p
// of one topic of a group without partition p of the others, except when it held it before.
//
// The balancer is immutable and safe for concurrent use.
func CoPartitioned(groups [][]string) kgo.GroupBalancer {
	// Merge groups that share a topic (union-find over topics).
	parent := make(map[string]string)
	var find func(string) string
	find = func(t string) string {
		p, ok := parent[t]
		if !ok {
			parent[t] = t
			return t
		}
		if p == t {
			return t
		}
		r := find(p)
		parent[t] = r
		return r
	}
	for _, g := range groups {
		for _, t := range g {
			find(t)
			if rt, r0 := find(t), find(g[0]); rt != r0 {
				parent[rt] = r0
			}
		}
	}
	byRoot := make(map[string][]string)
	for t := range parent {
		r := find(t)
		byRoot[r] = append(byRoot[r], t)
	}
	b := &coPartitioned{groupOf: make(map[string]int, len(parent))}
	for _, g := range byRoot {
		slices.Sort(g)
		b.groups = append(b.groups, g)
	}
	sort.Slice(b.groups, func(i, j int) bool { return b.groups[i][0] < b.groups[j][0] })
	for i, g := range b.groups {
		for _, t := range g {
			b.groupOf[t] = i
		}
	}
	return b
}

type coPartitioned struct {
	groups  [][]string     // disjoint, each sorted, ordered by first topic
	groupOf map[string]int // topic => index in groups
}

var _ kgo.ConsumerBalancerBalance = (*coPartitioned)(nil)

func (*coPartitioned) ProtocolName() string { return coPartitionedProtocol }
func (*coPartitioned) IsCooperative() bool  { return true }

// JoinGroupMetadata encodes the subscription, the partitions owned (KIP-429) and the generation
// they were assigned in, sorted: the broker compares metadata to decide whether a rejoin changes
// anything.
func (*coPartitioned) JoinGroupMetadata(interests []string, current map[string][]int32, generation int32) []byte {
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Version = 3
	meta.Topics = slices.Sorted(slices.Values(interests))
	meta.Generation = generation
	for topic, partitions := range current {
		if len(partitions) == 0 {
			continue
		}
		owned := kmsg.NewConsumerMemberMetadataOwnedPartition()
		owned.Topic = topic
		owned.Partitions = slices.Sorted(slices.Values(partitions))
		meta.OwnedPartitions = append(meta.OwnedPartitions, owned)
	}
	sort.Slice(meta.OwnedPartitions, func(i, j int) bool {
		return meta.OwnedPartitions[i].Topic < meta.OwnedPartitions[j].Topic
	})
	return meta.AppendTo(nil)
}

func (*coPartitioned) ParseSyncAssignment(assignment []byte) (map[string][]int32, error) {
	return kgo.ParseConsumerSyncAssignment(assignment)
}

func (c *coPartitioned) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	b, err := kgo.NewConsumerBalancer(c, members)
	return b, b.MemberTopics(), err
}

type topicPartition struct {
	topic     string
	partition int32
}

// Balance implements kgo.ConsumerBalancerBalance; see CoPartitioned.
func (c *coPartitioned) Balance(b *kgo.ConsumerBalancer, topics map[string]int32) kgo.IntoSyncAssignment {
	nmembers := len(b.Members())
	subscribed := make([]map[string]bool, nmembers)
	present := make(map[string]bool) // topics some member subscribes to, with a known count
	// claim is who owns a partition: the highest generation's claim, the first member on a tie.
	type claim struct {
		member int
		gen    int32
	}
	claims := make(map[topicPartition]claim)
	for i := range nmembers {
		_, meta := b.MemberAt(i)
		subscribed[i] = make(map[string]bool, len(meta.Topics))
		for _, t := range meta.Topics {
			subscribed[i][t] = true
			if _, ok := topics[t]; ok {
				present[t] = true
			}
		}
		for _, owned := range meta.OwnedPartitions {
			for _, p := range owned.Partitions {
				tp := topicPartition{owned.Topic, p}
				if cl, ok := claims[tp]; !ok || meta.Generation > cl.gen {
					claims[tp] = claim{i, meta.Generation}
				}
			}
		}
	}

	eligible := func(group []string) []int {
		var e []int
	members:
		for i := range nmembers {
			for _, t := range group {
				if !subscribed[i][t] {
					continue members
				}
			}
			e = append(e, i)
		}
		return e
	}

	// The groups to balance: configured groups restricted to present topics, and the other
	// present topics alone. A group no member can take whole falls apart into its topics.
	var groups [][]string
	for _, g := range c.groups {
		var eff []string
		for _, t := range g {
			if present[t] {
				eff = append(eff, t)
			}
		}
		if len(eff) > 1 && len(eligible(eff)) == 0 {
			for _, t := range eff {
				groups = append(groups, []string{t})
			}
		} else if len(eff) > 0 {
			groups = append(groups, eff)
		}
	}
	for t := range present {
		if _, ok := c.groupOf[t]; !ok {
			groups = append(groups, []string{t})
		}
	}
	sort.Slice(groups, func(i, j int) bool { return groups[i][0] < groups[j][0] })

	load := make([]int, nmembers) // units assigned over the groups balanced so far
	plan := b.NewPlan()
	type unit struct {
		group     []string
		partition int32
		member    int
	}
	var units []unit
	for _, group := range groups {
		members := eligible(group)
		var nunits int32
		for _, t := range group {
			nunits = max(nunits, topics[t])
		}
		if nunits <= 0 || len(members) == 0 {
			continue
		}

		// The owner of each unit: the member owning most of its partitions, the first on a tie.
		owner := make([]int, nunits)
		votes := make([]int, nmembers)
		for p := range nunits {
			clear(votes)
			owner[p] = -1
			for _, t := range group {
				if p >= topics[t] {
					continue
				}
				if cl, ok := claims[topicPartition{t, p}]; ok {
					votes[cl.member]++
					if owner[p] < 0 || votes[cl.member] > votes[owner[p]] ||
						votes[cl.member] == votes[owner[p]] && cl.member < owner[p] {
						owner[p] = cl.member
					}
				}
			}
		}

		// Quotas: floor for all, one more for rem members, chosen first among those owning more
		// than the floor (each keeps a unit that would otherwise move), then the least loaded.
		isEligible := make(map[int]bool, len(members))
		for _, m := range members {
			isEligible[m] = true
		}
		owns := make(map[int]int, len(members))
		for _, o := range owner {
			if o >= 0 && isEligible[o] {
				owns[o]++
			}
		}
		floor, rem := int(nunits)/len(members), int(nunits)%len(members)
		order := slices.Clone(members)
		sort.SliceStable(order, func(i, j int) bool {
			x, y := order[i], order[j]
			if mx, my := owns[x] > floor, owns[y] > floor; mx != my {
				return mx
			}
			return load[x] < load[y] // stable: member order on a tie
		})
		quota := make(map[int]int, len(members))
		for k, m := range order {
			quota[m] = floor
			if k < rem {
				quota[m]++
			}
		}

		assigned := make(map[int]int, len(members))
		to := make([]int, nunits)
		for p := range nunits { // sticky: an owner keeps its units up to its quota
			to[p] = -1
			if o := owner[p]; o >= 0 && isEligible[o] && assigned[o] < quota[o] {
				to[p] = o
				assigned[o]++
			}
		}
		for p := range nunits { // the rest: fewest units of the group, least loaded, member order
			if to[p] >= 0 {
				continue
			}
			best := -1
			for _, m := range members {
				if assigned[m] >= quota[m] {
					continue
				}
				if best < 0 || assigned[m] < assigned[best] ||
					assigned[m] == assigned[best] && load[m] < load[best] {
					best = m
				}
			}
			to[p] = best
			assigned[best]++
		}
		for m, n := range assigned {
			load[m] += n
		}
		for p := range nunits {
			member, _ := b.MemberAt(to[p])
			for _, t := range group {
				if p < topics[t] {
					plan.AddPartition(member, t, p)
				}
			}
			units = append(units, unit{group, p, to[p]})
		}
	}

	// Moving partitions leave the plan until revoked (two-round cooperative protocol).
	plan.AdjustCooperative(b)

	// AdjustCooperative works per partition. The partitions of a unit that moves whole leave the
	// plan together; those of a unit owned in part (or by several members) might not: withhold
	// the whole unit until every partition of it can be assigned.
	pm := plan.AsMemberIDMap()
	kept := make(map[string]map[topicPartition]bool, len(pm))
	for member, ts := range pm {
		set := make(map[topicPartition]bool)
		for t, ps := range ts {
			for _, p := range ps {
				set[topicPartition{t, p}] = true
			}
		}
		kept[member] = set
	}
	withheld := make(map[string]map[topicPartition]bool)
	for _, u := range units {
		member, _ := b.MemberAt(u.member)
		whole := true
		for _, t := range u.group {
			if u.partition < topics[t] && !kept[member.MemberID][topicPartition{t, u.partition}] {
				whole = false
				break
			}
		}
		if whole {
			continue
		}
		if withheld[member.MemberID] == nil {
			withheld[member.MemberID] = make(map[topicPartition]bool)
		}
		for _, t := range u.group {
			withheld[member.MemberID][topicPartition{t, u.partition}] = true
		}
	}
	for member, w := range withheld {
		ts := pm[member]
		for t, ps := range ts {
			ps = slices.DeleteFunc(ps, func(p int32) bool { return w[topicPartition{t, p}] })
			if len(ps) == 0 {
				delete(ts, t)
			} else {
				ts[t] = ps
			}
		}
	}
	return plan
}
