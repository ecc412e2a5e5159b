package task

import "slices"

// partials is a backlog chain's hash pre-aggregation: one partial aggregate state per key, for
// at most limit keys (processing.cache_keys, the bound the real-time cache has too). While a
// backlog's keys fit, its records are folded here in memory and never sorted; records of keys
// beyond the limit go to the sorter. At the fold, a key's partial is merged into its stored
// state (Aggregate.Merge) together with its sorted records: the aggregate's state depends only
// on the multiset of inputs, so the split changes no byte of the result.
//
// States live in one arena of fixed-size slots; the index maps a key to its slot. Not safe for
// concurrent use.
type partials struct {
	size  int
	limit int
	idx   map[string]int32
	arena []byte
	kb    int64 // bytes of the keys held
}

func newPartials(stateSize, limit int) *partials {
	return &partials{size: stateSize, limit: limit, idx: make(map[string]int32)}
}

// slot returns key's partial state, creating it with init when the key is new and the table
// has room; ok is false when the key is absent and the table is full.
func (p *partials) slot(key []byte, init func([]byte)) (st []byte, ok bool) {
	if i, ok := p.idx[string(key)]; ok {
		off := int(i) * p.size
		return p.arena[off : off+p.size : off+p.size], true
	}
	if len(p.idx) >= p.limit {
		return nil, false
	}
	off := len(p.arena)
	p.arena = slices.Grow(p.arena, p.size)[:off+p.size]
	st = p.arena[off : off+p.size : off+p.size]
	init(st)
	p.idx[string(key)] = int32(len(p.idx))
	p.kb += int64(len(key))
	return st, true
}

// get returns key's partial state, if any.
func (p *partials) get(key []byte) ([]byte, bool) {
	i, ok := p.idx[string(key)]
	if !ok {
		return nil, false
	}
	off := int(i) * p.size
	return p.arena[off : off+p.size : off+p.size], true
}

// len is the number of keys held.
func (p *partials) len() int { return len(p.idx) }

// sortedKeys returns the keys in byte order (the order of the sorter and the store).
func (p *partials) sortedKeys() []string {
	keys := make([]string, 0, len(p.idx))
	for k := range p.idx {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// memBytes estimates the table's memory: the arena, the keys and the index's buckets.
func (p *partials) memBytes() int64 {
	return int64(cap(p.arena)) + p.kb + 48*int64(len(p.idx)) // string header, bucket slot, value
}

// reset empties the table, keeping the arena's memory for the next backlog.
func (p *partials) reset() {
	clear(p.idx)
	p.arena = p.arena[:0]
	p.kb = 0
}
