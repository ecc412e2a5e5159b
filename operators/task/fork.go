package task

import (
	"math"
	"slices"

	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/operators"
)

// A fork (plan.ChainPlan.Fork) reads the records an earlier chain of its source reads and
// repeats that chain's decoding and first SharedStages stages (several operators read one
// input: Nexmark q15 and q16 count bids and two distinct values of them, three chains of one
// source and one select). The earlier chain, its provider, keeps for the batch what came of
// each record after that many stages (a snapshot), and the fork starts from there: it decodes
// and selects each record once where it did so once per chain, a fifth of q16's CPU.
//
// A snapshot holds a batch (Process call) at a time; an entry the provider did not take (a
// record it had done already, an attribute, a tombstone) leaves the fork to do it itself.

// snapshot is what came of each record of a batch after depth stages of its provider.
type snapshot struct {
	depth int
	batch uint64 // the Task's batch it holds; 0: none
	ents  []snapEnt
	arena []byte
	idx   operators.Members // the values' indexes, where the provider had them (snapEnt.moff)
	used  int64             // records a fork took from it (the tests)
}

// snapEnt is a record's entry in a snapshot.
type snapEnt struct {
	state        uint8
	srcTime      int64 // the decoded record's time, before any stage (observeTime)
	time         int64
	koff, klen   uint32
	voff, vlen   uint32
	kNil, valNil bool
	indexed      bool   // idx[moff : moff+mlen] indexes the value's members
	moff, mlen   uint32 // in snapshot.idx
}

const (
	snapNone    = iota // not taken: the fork decodes the record itself
	snapBad            // it could not be decoded (the provider dead-lettered it)
	snapDropped        // a stage before depth dropped it or dead-lettered it
	snapKept           // it left the depth-th stage: time, key and value
)

// maxSnapArena is the arena a snapshot keeps between batches (a larger one is let go).
const maxSnapArena = 16 << 20

// forkSnapshots: forks start from their providers' snapshots (a variable for the tests).
var forkSnapshots = true

// linkFork links the fork c to its provider: the first chain before it of its source whose
// first SharedStages stages are c's.
func (t *Task) linkFork(c *chain) {
	if !c.plan.Fork || !forkSnapshots {
		return
	}
	d := c.plan.SharedStages
	same := func(p *chain) bool {
		if p.plan.SourceName != c.plan.SourceName || len(p.plan.Stages) < d {
			return false
		}
		return slices.EqualFunc(p.plan.Stages[:d], c.plan.Stages[:d], func(a, b configs.Operator) bool { return a.Name == b.Name })
	}
	for _, p := range t.byTopic[c.plan.Source.Topic] {
		if p == c || !same(p) {
			continue
		}
		i := slices.IndexFunc(p.snaps, func(s *snapshot) bool { return s.depth == d })
		if i < 0 {
			p.snaps = append(p.snaps, &snapshot{depth: d})
			slices.SortFunc(p.snaps, func(a, b *snapshot) int { return a.depth - b.depth })
			i = slices.IndexFunc(p.snaps, func(s *snapshot) bool { return s.depth == d })
		}
		c.from = p.snaps[i]
		return
	}
}

// beginSnapshots readies the snapshots of provider c for a batch of n records.
func (c *chain) beginSnapshots(batch uint64, n int) {
	for _, s := range c.snaps {
		s.batch = batch
		s.ents = slices.Grow(s.ents[:0], n)[:n]
		clear(s.ents)
		if cap(s.arena) > maxSnapArena {
			s.arena = nil
		}
		s.arena = s.arena[:0]
		if cap(s.idx) > maxSnapArena/16 {
			s.idx = nil
		}
		s.idx = s.idx[:0]
	}
}

// snapMark marks record i, decoded at srcTime, in every snapshot of c deeper than depth, with
// state (snapBad, snapDropped).
func (c *chain) snapMark(i, depth int, state uint8, srcTime int64) {
	for _, s := range c.snaps {
		if s.depth > depth {
			s.ents[i].state, s.ents[i].srcTime = state, srcTime
		}
	}
}

// snapKeep takes record i, as c.rec holds it after depth stages, into c's snapshot of that
// depth, if it has one.
func (c *chain) snapKeep(i, depth int, srcTime int64) {
	for _, s := range c.snaps {
		if s.depth != depth {
			continue
		}
		if len(s.arena)+len(c.rec.Key)+len(c.rec.Value) > math.MaxUint32 {
			return // left to the fork
		}
		e := &s.ents[i]
		e.state, e.srcTime, e.time = snapKept, srcTime, c.rec.Time
		e.kNil, e.valNil = c.rec.Key == nil, c.rec.Value == nil
		e.koff, e.klen = uint32(len(s.arena)), uint32(len(c.rec.Key))
		s.arena = append(s.arena, c.rec.Key...)
		e.voff, e.vlen = uint32(len(s.arena)), uint32(len(c.rec.Value))
		s.arena = append(s.arena, c.rec.Value...)
		if idx, ok := c.rec.AppendMembers(s.idx); ok && len(idx) <= math.MaxUint32 {
			e.indexed, e.moff, e.mlen = true, uint32(len(s.idx)), uint32(len(idx)-len(s.idx))
			s.idx = idx
		} else {
			e.indexed = false
		}
		return
	}
}

// snapFor returns the entry of record i in the snapshot the fork c starts from, or nil when
// there is none (c is no fork, or its provider did not take the record).
func (c *chain) snapFor(batch uint64, i int) *snapEnt {
	s := c.from
	if s == nil || s.batch != batch || i >= len(s.ents) || s.ents[i].state == snapNone {
		return nil
	}
	s.used++
	return &s.ents[i]
}

// useSnap sets c.rec to the record e holds (snapKept), with its index when the provider had one.
func (c *chain) useSnap(e *snapEnt) {
	s := c.from
	var key, val []byte
	if !e.kNil {
		key = s.arena[e.koff : e.koff+e.klen : e.koff+e.klen]
	}
	if !e.valNil {
		val = s.arena[e.voff : e.voff+e.vlen : e.voff+e.vlen]
	}
	if e.indexed {
		c.rec.SetIndexed(key, e.time, val, s.idx[e.moff:e.moff+e.mlen])
		return
	}
	c.rec.Set(key, e.time, val)
}
