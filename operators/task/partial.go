package task

import "slices"

// partials is a backlog chain's hash pre-aggregation: one partial aggregate state per key, for
// at most limit keys (processing.cache_keys, the bound the real-time cache has too). While a
// backlog's keys fit, its records are folded here in memory and never sorted; records of keys
// beyond the limit go to the sorter. At the fold, a key's partial is merged into its stored
// state (Aggregate.Merge) together with its sorted records: the aggregate's state depends only
// on the multiset of inputs, so the split changes no byte of the result.
//
// Once the table is full, it watches its hit rate: when fewer than a quarter of the records of
// a window hit it (far more keys than the table holds), it stops being consulted until the
// backlog ends: its partial states move into the sorter (Task.spillPartials), its memory is
// freed, and every record goes to the sorter.
//
// States live in one arena of slots of the empty state's size; the index maps a key to its
// slot. A state that grows past its slot (an aggregate's strings) lives in over instead. Keys of up to
// 15 bytes (most ids) are held inline in the index's slots, so a lookup compares 16 bytes where
// it would otherwise chase a string to a cache miss (lookups were over a quarter of a backlog's
// CPU with 100k keys; inline keys cut the run's CPU by ~10%). Not safe for concurrent use.
type partials struct {
	size  int
	limit int
	short map[shortKey]int32
	long  map[string]int32
	arena []byte
	over  map[int32][]byte // states grown past their slot
	ob    int64            // bytes of over's states
	kb    int64            // bytes of the keys held

	window     int64 // records per hit-rate window once full
	seen, hits int64 // in the current window
	bypass     bool  // the table is not consulted (until reset)
}

// defaultWindow is the hit-rate window of a full table.
const defaultWindow = 1 << 16

// shortKey is a key of up to 15 bytes, zero-padded, with its length in the last byte.
type shortKey [16]byte

func toShort(key []byte) (k shortKey, ok bool) {
	if len(key) > 15 {
		return k, false
	}
	copy(k[:], key)
	k[15] = byte(len(key))
	return k, true
}

func (k *shortKey) bytes() []byte { return k[:k[15]] }

func newPartials(stateSize, limit int) *partials {
	return &partials{size: stateSize, limit: limit, short: map[shortKey]int32{}, long: map[string]int32{}, over: map[int32][]byte{}, window: defaultWindow}
}

func (p *partials) lookup(key []byte) (int32, bool) {
	if sk, ok := toShort(key); ok {
		i, ok := p.short[sk]
		return i, ok
	}
	i, ok := p.long[string(key)]
	return i, ok
}

// state returns slot i's state.
func (p *partials) state(i int32) []byte {
	if st, ok := p.over[i]; ok {
		return st
	}
	off := int(i) * p.size
	return p.arena[off : off+p.size : off+p.size]
}

// set records st, what a fold of old (slot i's state) returned: when it is not old (it grew),
// slot i's state is st from now on.
func (p *partials) set(i int32, old, st []byte) {
	if len(st) == len(old) && (len(st) == 0 || &st[0] == &old[0]) {
		return
	}
	p.ob += int64(cap(st)) - int64(cap(p.over[i]))
	p.over[i] = st
}

// each calls fn with every key and its partial state, in no order.
func (p *partials) each(fn func(key, st []byte) error) error {
	for k, i := range p.short {
		if err := fn(k.bytes(), p.state(i)); err != nil {
			return err
		}
	}
	for k, i := range p.long {
		if err := fn([]byte(k), p.state(i)); err != nil {
			return err
		}
	}
	return nil
}

// slot returns key's partial state and its index (for set), creating it with init when the key
// is new and the table has room; ok is false when the key is absent and the table is full.
func (p *partials) slot(key []byte, init func([]byte)) (i int32, st []byte, ok bool) {
	if p.bypass {
		return 0, nil, false
	}
	i, hit := p.lookup(key)
	if full := p.len() >= p.limit; full {
		p.seen++
		if hit {
			p.hits++
		}
		if p.seen >= p.window {
			p.bypass = p.hits*4 < p.seen
			p.seen, p.hits = 0, 0
		}
		if !hit {
			return 0, nil, false
		}
	}
	if hit {
		return i, p.state(i), true
	}
	off := len(p.arena)
	p.arena = slices.Grow(p.arena, p.size)[:off+p.size]
	st = p.arena[off : off+p.size : off+p.size]
	init(st)
	n := int32(p.len())
	if sk, ok := toShort(key); ok {
		p.short[sk] = n
	} else {
		p.long[string(key)] = n
	}
	p.kb += int64(len(key))
	return n, st, true
}

// get returns key's partial state, if any.
func (p *partials) get(key []byte) ([]byte, bool) {
	i, ok := p.lookup(key)
	if !ok {
		return nil, false
	}
	return p.state(i), true
}

// len is the number of keys held.
func (p *partials) len() int { return len(p.short) + len(p.long) }

// sortedKeys returns the keys in byte order (the order of the sorter and the store).
func (p *partials) sortedKeys() []string {
	keys := make([]string, 0, p.len())
	for k := range p.short {
		keys = append(keys, string(k.bytes()))
	}
	for k := range p.long {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// memBytes estimates the table's memory: the arena, the keys and the index's buckets.
func (p *partials) memBytes() int64 {
	return int64(cap(p.arena)) + 32*int64(len(p.short)) + p.kb + 48*int64(len(p.long)) + p.ob + 32*int64(len(p.over)) // slots; long: bytes, header, slot
}

// drop empties the table and frees its memory, leaving it bypassed until reset.
func (p *partials) drop() {
	p.short, p.long, p.over = map[shortKey]int32{}, map[string]int32{}, map[int32][]byte{}
	p.arena = nil
	p.kb, p.ob = 0, 0
}

// reset empties the table, keeping the arena's memory for the next backlog.
func (p *partials) reset() {
	clear(p.short)
	clear(p.long)
	clear(p.over)
	p.arena = p.arena[:0]
	p.kb, p.ob = 0, 0
	p.seen, p.hits, p.bypass = 0, 0, false
}
