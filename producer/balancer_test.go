package producer

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// assignment is member => topic => partitions.
type assignment map[string]map[string][]int32

// balanceSim simulates a classic group with a cooperative balancer: every round, every member
// joins with its owned partitions and generation (JoinGroupMetadata, encoded), the leader
// balances (MemberBalancer, BalanceOrError, IntoSyncAssignment) and every member takes what
// ParseSyncAssignment decodes. A member that lost partitions revokes them and rejoins, which
// starts another round.
type balanceSim struct {
	t       *testing.T
	bal     kgo.GroupBalancer
	groups  [][]string
	topics  map[string]int32
	members map[string]*simMember // by instance id
	gen     int32
}

type simMember struct {
	instance string
	subs     []string
	owned    map[string][]int32
	gen      int32
}

func newSim(t *testing.T, groups [][]string, topics map[string]int32) *balanceSim {
	return &balanceSim{t: t, bal: CoPartitioned(groups), groups: groups, topics: topics, members: map[string]*simMember{}}
}

// join adds members subscribed to subs (every topic if nil); they own nothing yet.
func (s *balanceSim) join(subs []string, instances ...string) {
	if subs == nil {
		subs = slices.Sorted(maps.Keys(s.topics))
	}
	for _, id := range instances {
		s.members[id] = &simMember{instance: id, subs: subs, owned: map[string][]int32{}, gen: -1}
	}
}

func (s *balanceSim) leave(instances ...string) {
	for _, id := range instances {
		delete(s.members, id)
	}
}

func (s *balanceSim) current() assignment {
	a := assignment{}
	for id, m := range s.members {
		a[id] = maps.Clone(m.owned)
	}
	return a
}

// round runs one join and sync; it reports the assignment and whether any member lost
// partitions (and so rejoins). It fails the test if a partition is given to a member while
// another member still owns it, or twice, or if a member gets part of a unit it did not own.
func (s *balanceSim) round() (assignment, bool) {
	s.t.Helper()
	ids := slices.Sorted(maps.Keys(s.members)) // the client sorts by instance id
	joins := make([]kmsg.JoinGroupResponseMember, 0, len(ids))
	for _, id := range ids {
		m := s.members[id]
		instance := m.instance
		joins = append(joins, kmsg.JoinGroupResponseMember{
			MemberID:         "m-" + id,
			InstanceID:       &instance,
			ProtocolMetadata: s.bal.JoinGroupMetadata(m.subs, maps.Clone(m.owned), m.gen),
		})
	}
	got := balance(s.t, s.bal, joins, s.topics)
	s.gen++

	// Who owns a partition before the round: the claimants at the highest generation (a lower
	// claim is stale: its member missed the rebalances since, and was fenced).
	type claims struct {
		gen int32
		ids []string
	}
	before := map[topicPartition]claims{}
	for _, id := range ids {
		m := s.members[id]
		for t, ps := range m.owned {
			for _, p := range ps {
				tp := topicPartition{t, p}
				switch c, ok := before[tp]; {
				case !ok || m.gen > c.gen:
					before[tp] = claims{m.gen, []string{id}}
				case m.gen == c.gen:
					before[tp] = claims{m.gen, append(c.ids, id)}
				}
			}
		}
	}
	after := assignment{}
	seen := map[topicPartition]string{}
	var lost bool
	for _, id := range ids {
		a := got["m-"+id]
		for t, ps := range a {
			for _, p := range ps {
				tp := topicPartition{t, p}
				if other, ok := seen[tp]; ok {
					s.t.Fatalf("round %d: %s/%d assigned to %s and %s", s.gen, t, p, other, id)
				}
				seen[tp] = id
				if c, ok := before[tp]; ok && !slices.Contains(c.ids, id) {
					s.t.Fatalf("round %d: %s/%d assigned to %s while %v still owns it", s.gen, t, p, id, c.ids)
				}
			}
		}
		m := s.members[id]
		for t, ps := range m.owned {
			for _, p := range ps {
				if !slices.Contains(a[t], p) {
					lost = true
				}
			}
		}
		m.owned, m.gen = a, s.gen
		after[id] = a
	}
	checkColocated(s.t, s.effectiveGroups(), s.topics, after)
	return after, lost
}

// settle runs rounds until no member lost partitions; it fails past limit rounds.
func (s *balanceSim) settle(limit int) []assignment {
	s.t.Helper()
	var rounds []assignment
	for {
		a, lost := s.round()
		rounds = append(rounds, a)
		if !lost {
			return rounds
		}
		if len(rounds) >= limit {
			s.t.Fatalf("not settled after %d rounds: %v", limit, rounds)
		}
	}
}

// balance runs the real encode/decode path of a leader's balance, twice: the plan must be
// deterministic.
func balance(t *testing.T, bal kgo.GroupBalancer, members []kmsg.JoinGroupResponseMember, topics map[string]int32) assignment {
	t.Helper()
	mb, _, err := bal.MemberBalancer(members)
	if err != nil {
		t.Fatal(err)
	}
	be, ok := mb.(kgo.GroupMemberBalancerOrError)
	if !ok {
		t.Fatalf("%T is not a GroupMemberBalancerOrError", mb)
	}
	into, err := be.BalanceOrError(topics)
	if err != nil {
		t.Fatal(err)
	}
	plan := into.IntoSyncAssignment()
	again, _, _ := bal.MemberBalancer(members)
	into, _ = again.(kgo.GroupMemberBalancerOrError).BalanceOrError(topics)
	if !reflect.DeepEqual(into.IntoSyncAssignment(), plan) {
		t.Fatal("the same join balances differently")
	}
	out := assignment{}
	for _, sa := range plan {
		a, err := bal.ParseSyncAssignment(sa.MemberAssignment)
		if err != nil {
			t.Fatal(err)
		}
		out[sa.MemberID] = a
	}
	return out
}

// checkColocated: no member holds partition p of one topic of a group without partition p of
// every other topic of the group that has it. groups are the effective groups (see
// effectiveGroups).
func checkColocated(t *testing.T, groups [][]string, topics map[string]int32, a assignment) {
	t.Helper()
	for id, ts := range a {
		for _, g := range groups {
			for _, topic := range g {
				for _, p := range ts[topic] {
					for _, other := range g {
						if p < topics[other] && !slices.Contains(ts[other], p) {
							t.Fatalf("%s holds %s/%d without %s/%d: %v", id, topic, p, other, p, ts)
						}
					}
				}
			}
		}
	}
}

// unitsOf returns, per member, the partition numbers it holds of the group's first topic.
func unitsOf(a assignment, topic string) map[string][]int32 {
	u := map[string][]int32{}
	for id, ts := range a {
		u[id] = slices.Sorted(slices.Values(ts[topic]))
	}
	return u
}

// ownerOf returns partition => member of a topic.
func ownerOf(a assignment, topic string) map[int32]string {
	o := map[int32]string{}
	for id, ts := range a {
		for _, p := range ts[topic] {
			o[p] = id
		}
	}
	return o
}

func TestCoPartitionedBalancer(t *testing.T) {
	groups := [][]string{{"orders", "customers"}}
	topics := map[string]int32{"orders": 6, "customers": 6, "events": 4}
	type tcase struct {
		name       string
		prep       func(s *balanceSim) // the state before the rounds checked
		change     func(s *balanceSim)
		wantRounds int
		check      func(t *testing.T, before assignment, rounds []assignment)
	}
	settled := func(ids ...string) func(s *balanceSim) {
		return func(s *balanceSim) { s.join(nil, ids...); s.settle(2) }
	}
	cases := []tcase{
		{
			name:       "three members",
			prep:       func(*balanceSim) {},
			change:     func(s *balanceSim) { s.join(nil, "a", "b", "c") },
			wantRounds: 1,
			check: func(t *testing.T, _ assignment, rounds []assignment) {
				for id, ps := range unitsOf(rounds[0], "orders") {
					if len(ps) != 2 {
						t.Errorf("%s has orders %v, want 2 units", id, ps)
					}
				}
				var n []int
				for _, ps := range unitsOf(rounds[0], "events") {
					n = append(n, len(ps))
				}
				if slices.Sort(n); !slices.Equal(n, []int{1, 1, 2}) {
					t.Errorf("events spread %v, want 1, 1, 2", n)
				}
			},
		},
		{
			name:       "a fourth member joins",
			prep:       settled("a", "b", "c"),
			change:     func(s *balanceSim) { s.join(nil, "d") },
			wantRounds: 2,
			check: func(t *testing.T, before assignment, rounds []assignment) {
				old, r1, r2 := ownerOf(before, "orders"), ownerOf(rounds[0], "orders"), ownerOf(rounds[1], "orders")
				var moved []int32
				for p := range int32(6) {
					if r2[p] != old[p] {
						moved = append(moved, p)
					}
				}
				if len(moved) != 1 {
					t.Fatalf("units moved %v (before %v, after %v), want exactly one", moved, old, r2)
				}
				p := moved[0]
				if owner, ok := r1[p]; ok {
					t.Errorf("round 1 assigns moving unit %d to %s; it must wait for the revoke", p, owner)
				}
				if r2[p] != "d" {
					t.Errorf("round 2 assigns unit %d to %s, want d", p, r2[p])
				}
				for q, o := range r1 {
					if r2[q] != o {
						t.Errorf("unit %d moved in round 2 from %s to %s", q, o, r2[q])
					}
				}
				// events: 4 partitions over 4 members, a had 2: one moves, to d.
				oldE, newE := ownerOf(before, "events"), ownerOf(rounds[1], "events")
				var movedE []int32
				for p := range int32(4) {
					if oldE[p] != newE[p] {
						movedE = append(movedE, p)
					}
				}
				if len(movedE) != 1 || newE[movedE[0]] != "d" {
					t.Errorf("events moved %v -> %v, want one partition to d", oldE, newE)
				}
			},
		},
		{
			name:       "a member leaves",
			prep:       settled("a", "b", "c", "d"),
			change:     func(s *balanceSim) { s.leave("c") },
			wantRounds: 1,
			check: func(t *testing.T, before assignment, rounds []assignment) {
				for id, ts := range rounds[0] {
					for topic, ps := range before[id] {
						for _, p := range ps {
							if !slices.Contains(ts[topic], p) {
								t.Errorf("%s lost %s/%d", id, topic, p)
							}
						}
					}
				}
				for id, ps := range unitsOf(rounds[0], "orders") {
					if len(ps) != 2 {
						t.Errorf("%s has orders %v, want 2 units", id, ps)
					}
				}
				if len(ownerOf(rounds[0], "events")) != 4 {
					t.Errorf("events not all assigned: %v", rounds[0])
				}
			},
		},
		{
			name: "the higher generation's claim wins",
			prep: func(s *balanceSim) {
				s.join(nil, "a", "b")
				s.members["a"].owned = map[string][]int32{"orders": {0, 1, 2}, "customers": {0, 1, 2}}
				s.members["a"].gen = 3
				s.members["b"].owned = map[string][]int32{"orders": {0, 3, 4, 5}, "customers": {0, 3, 4, 5}}
				s.members["b"].gen = 5
			},
			change:     func(*balanceSim) {},
			wantRounds: 2, // a loses unit 0 (never its own), b loses one unit to a
			check: func(t *testing.T, _ assignment, rounds []assignment) {
				r1 := ownerOf(rounds[0], "orders")
				if r1[0] != "b" {
					t.Errorf("unit 0 went to %q, want b (generation 5 over 3)", r1[0])
				}
				for id, ps := range unitsOf(rounds[1], "orders") {
					if len(ps) != 3 {
						t.Errorf("%s has orders %v after round 2, want 3", id, ps)
					}
				}
			},
		},
		{
			name: "a split unit is withheld whole until revoked",
			prep: func(s *balanceSim) {
				s.join(nil, "a", "b")
				s.members["a"].owned = map[string][]int32{"orders": {0, 1, 2}, "customers": {1, 2}}
				s.members["a"].gen = 5
				s.members["b"].owned = map[string][]int32{"orders": {3, 4, 5}, "customers": {0, 3, 4, 5}}
				s.members["b"].gen = 5
			},
			change:     func(*balanceSim) {},
			wantRounds: 2,
			check: func(t *testing.T, _ assignment, rounds []assignment) {
				// Unit 0 is a's (a tie of one partition each goes to member order), b
				// revokes customers/0 and a must not keep orders/0 alone meanwhile.
				if o, ok := ownerOf(rounds[0], "orders")[0]; ok {
					t.Errorf("round 1 leaves orders/0 with %s without customers/0", o)
				}
				if o := ownerOf(rounds[1], "orders")[0]; o != "a" {
					t.Errorf("round 2 gives unit 0 to %q, want a", o)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newSim(t, groups, topics)
			tc.prep(s)
			before := s.current()
			tc.change(s)
			rounds := s.settle(3)
			if len(rounds) != tc.wantRounds {
				t.Fatalf("settled in %d rounds, want %d: %v", len(rounds), tc.wantRounds, rounds)
			}
			checkBalanced(t, s)
			tc.check(t, before, rounds)
		})
	}
}

// checkBalanced: every partition a member subscribes to is assigned; per group, the members
// subscribed to all of it hold units differing by at most one, the others none (a group no
// member can take whole is balanced per topic).
func checkBalanced(t *testing.T, s *balanceSim) {
	t.Helper()
	a := s.current()
	owner := map[topicPartition]string{}
	for id, ts := range a {
		for topic, ps := range ts {
			for _, p := range ps {
				owner[topicPartition{topic, p}] = id
			}
		}
	}
	for _, g := range s.effectiveGroups() {
		for _, topic := range g {
			for p := range s.topics[topic] {
				if _, ok := owner[topicPartition{topic, p}]; !ok {
					t.Fatalf("%s/%d unassigned: %v", topic, p, a)
				}
			}
		}
	}
	for _, g := range s.effectiveGroups() {
		eligible := eligibleOf(s, g)
		count := map[string]int{}
		for _, id := range eligible {
			count[id] = 0
		}
		var n int32
		for _, topic := range g {
			n = max(n, s.topics[topic])
		}
		for p := range n {
			for _, topic := range g {
				if p < s.topics[topic] {
					id := owner[topicPartition{topic, p}]
					if !slices.Contains(eligible, id) {
						t.Fatalf("%s/%d is with %s, not subscribed to all of %v", topic, p, id, g)
					}
					count[id]++
					break
				}
			}
		}
		lo, hi := int(n), 0
		for _, c := range count {
			lo, hi = min(lo, c), max(hi, c)
		}
		if hi-lo > 1 {
			t.Fatalf("group %v unbalanced: %v", g, count)
		}
	}
}

// effectiveGroups returns the groups the balancer balances: each configured group restricted to
// the topics some member subscribes to, split into its topics if no member subscribes to all of
// them, and every other subscribed topic alone.
func (s *balanceSim) effectiveGroups() [][]string {
	present := map[string]bool{}
	for _, m := range s.members {
		for _, topic := range m.subs {
			present[topic] = true
		}
	}
	grouped := map[string]bool{}
	var groups [][]string
	for _, g := range s.groups {
		var eff []string
		for _, topic := range g {
			grouped[topic] = true
			if present[topic] {
				eff = append(eff, topic)
			}
		}
		if len(eff) > 1 && len(eligibleOf(s, eff)) == 0 {
			for _, topic := range eff {
				groups = append(groups, []string{topic})
			}
		} else if len(eff) > 0 {
			groups = append(groups, eff)
		}
	}
	for topic := range present {
		if !grouped[topic] {
			groups = append(groups, []string{topic})
		}
	}
	return groups
}

func eligibleOf(s *balanceSim, g []string) []string {
	var e []string
	for id, m := range s.members {
		ok := true
		for _, topic := range g {
			ok = ok && slices.Contains(m.subs, topic)
		}
		if ok {
			e = append(e, id)
		}
	}
	sort.Strings(e)
	return e
}

// TestCoPartitionedBalancerRandom: members join and leave at random over several changes; every
// change settles in at most two rounds, no partition is ever given to a member while another
// owns it, every group stays co-located in every round, and the settled group is balanced.
func TestCoPartitionedBalancerRandom(t *testing.T) {
	for iter := range 200 {
		rng := rand.New(rand.NewPCG(uint64(iter), 42))
		groups := [][]string{{"a", "b"}, {"c", "d", "e"}}
		n1, n2 := rng.Int32N(8)+1, rng.Int32N(8)+1
		topics := map[string]int32{"a": n1, "b": n1, "c": n2, "d": n2, "e": n2, "x": rng.Int32N(5) + 1, "y": rng.Int32N(3) + 1}
		if rng.IntN(4) == 0 { // not co-partitioned: assign by number anyway
			topics["e"] = max(1, n2-1)
		}
		all := slices.Sorted(maps.Keys(topics))
		subs := func() []string {
			if rng.IntN(6) > 0 {
				return all
			}
			var s []string
			for _, topic := range all {
				if rng.IntN(2) == 0 {
					s = append(s, topic)
				}
			}
			if len(s) == 0 {
				s = []string{"x"}
			}
			return s
		}
		t.Run(fmt.Sprint(iter), func(t *testing.T) {
			s := newSim(t, groups, topics)
			next := 0
			newID := func() string { next++; return fmt.Sprintf("i-%03d-%d", rng.IntN(1000), next) } // joins in any order
			for range rng.IntN(4) + 1 {
				s.join(subs(), newID())
			}
			for range 6 {
				s.settle(2)
				checkBalanced(t, s)
				ids := slices.Sorted(maps.Keys(s.members))
				switch rng.IntN(3) {
				case 0:
					for range rng.IntN(2) + 1 {
						s.join(subs(), newID())
					}
				case 1:
					if len(ids) > 1 {
						s.leave(ids[rng.IntN(len(ids))])
					}
				case 2:
					if len(ids) > 1 {
						s.leave(ids[rng.IntN(len(ids))])
					}
					s.join(subs(), newID())
				}
			}
			s.settle(2)
			checkBalanced(t, s)
		})
	}
}

// TestCoPartitionedBalancerMetadata: the join metadata is deterministic (the broker compares it)
// and carries the owned partitions and generation.
func TestCoPartitionedBalancerMetadata(t *testing.T) {
	bal := CoPartitioned([][]string{{"a", "b"}})
	if !bal.IsCooperative() || bal.ProtocolName() != "sluice-copartitioned" {
		t.Fatalf("cooperative %v, protocol %q", bal.IsCooperative(), bal.ProtocolName())
	}
	owned := map[string][]int32{"b": {3, 1}, "a": {1, 3}, "c": {0}, "d": {}}
	first := bal.JoinGroupMetadata([]string{"c", "a", "b"}, maps.Clone(owned), 7)
	for range 20 {
		if got := bal.JoinGroupMetadata([]string{"c", "a", "b"}, maps.Clone(owned), 7); !bytes.Equal(got, first) {
			t.Fatal("JoinGroupMetadata is not deterministic")
		}
	}
	var meta kmsg.ConsumerMemberMetadata
	if err := meta.ReadFrom(first); err != nil {
		t.Fatal(err)
	}
	if meta.Generation != 7 || !slices.Equal(meta.Topics, []string{"a", "b", "c"}) || len(meta.OwnedPartitions) != 3 {
		t.Fatalf("metadata %+v", meta)
	}
	for i, want := range []string{"a", "b", "c"} {
		if o := meta.OwnedPartitions[i]; o.Topic != want || !slices.IsSorted(o.Partitions) {
			t.Fatalf("owned %d: %+v, want topic %s, sorted", i, o, want)
		}
	}
}

// TestCoPartitionedBalancerKfake: real clients over kfake, two then three static members of one
// group; each ends with the same partition numbers of a and b, and no partition is ever assigned
// to a client while another still holds it.
func TestCoPartitionedBalancerKfake(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "a", "b"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	var (
		mu        sync.Mutex
		held      = map[string]map[topicPartition]bool{} // client => partitions
		violation error
	)
	start := func(ctx context.Context, id string) *kgo.Client {
		mu.Lock()
		held[id] = map[topicPartition]bool{}
		mu.Unlock()
		lost := func(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
			mu.Lock()
			defer mu.Unlock()
			for topic, parts := range ps {
				for _, p := range parts {
					delete(held[id], topicPartition{topic, p})
				}
			}
		}
		cl, err := kgo.NewClient(
			kgo.SeedBrokers(c.ListenAddrs()...),
			kgo.ConsumerGroup("g"),
			kgo.ConsumeTopics("a", "b"),
			kgo.InstanceID(id),
			kgo.Balancers(CoPartitioned([][]string{{"a", "b"}})),
			kgo.DisableAutoCommit(),
			kgo.HeartbeatInterval(100*time.Millisecond),
			kgo.RebalanceTimeout(3*time.Second), // a broken rebalance fails the test fast
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
				mu.Lock()
				defer mu.Unlock()
				for topic, parts := range ps {
					for _, p := range parts {
						tp := topicPartition{topic, p}
						for other, h := range held {
							if other != id && h[tp] && violation == nil {
								violation = fmt.Errorf("%s/%d assigned to %s while %s holds it", topic, p, id, other)
							}
						}
						held[id][tp] = true
					}
				}
			}),
			// A revoke takes a while (sluice checkpoints there): a balancer that hands a
			// partition on before its owner revoked it is caught by the check above.
			kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, ps map[string][]int32) {
				time.Sleep(100 * time.Millisecond)
				lost(ctx, cl, ps)
			}),
			kgo.OnPartitionsLost(lost),
		)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for ctx.Err() == nil && !cl.PollFetches(ctx).IsClientClosed() {
			}
		}()
		return cl
	}
	// settledOn reports whether the clients hold every partition once, with the same numbers
	// of a and b, balanced.
	settledOn := func(ids []string) (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		total := 0
		lo, hi := 8, 0
		for _, id := range ids {
			var pa, pb []int32
			for tp := range held[id] {
				if tp.topic == "a" {
					pa = append(pa, tp.partition)
				} else {
					pb = append(pb, tp.partition)
				}
			}
			slices.Sort(pa)
			slices.Sort(pb)
			if !slices.Equal(pa, pb) {
				return false, fmt.Sprintf("%s holds a%v b%v", id, pa, pb)
			}
			total += len(pa)
			lo, hi = min(lo, len(pa)), max(hi, len(pa))
		}
		return total == 4 && hi-lo <= 1, fmt.Sprint(held)
	}
	waitSettled := func(ids []string) {
		t.Helper()
		deadline := time.Now().Add(8 * time.Second)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			ok, state := settledOn(ids)
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("assignment not settled: %s", state)
			}
			<-tick.C
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var clients []*kgo.Client
	defer func() {
		for _, cl := range clients {
			cl.Close()
		}
	}()
	clients = append(clients, start(ctx, "i-0"), start(ctx, "i-1"))
	waitSettled([]string{"i-0", "i-1"})
	clients = append(clients, start(ctx, "i-2"))
	waitSettled([]string{"i-0", "i-1", "i-2"})
	mu.Lock()
	defer mu.Unlock()
	if violation != nil {
		t.Fatal(violation)
	}
}
