package task

import "hash/maphash"

// flagSet is a combining writer's memory of the flags it passed on per key, for a distinct
// (combine.go). Its keys (composite group keys, a JSON object each: longer than partials'
// inline keys) live in one arena, and its index maps a key's hash to its entries, so that it
// holds no pointer: a million keys cost the garbage collector nothing to scan, where a
// map[string]uint64 of them cost q16 a tenth of its CPU. Exact: a lookup compares the key's
// bytes. Not safe for concurrent use.
type flagSet struct {
	seed  maphash.Seed
	index map[uint64]int32 // hash -> its latest entry
	ents  []flagEnt
	arena []byte
}

type flagEnt struct {
	off, n uint32 // the key: arena[off : off+n]
	mask   uint64
	next   int32 // the previous entry of the same hash, or -1
}

func newFlagSet() *flagSet { return &flagSet{seed: maphash.MakeSeed(), index: map[uint64]int32{}} }

// find returns the index of key's entry, or -1, and its hash.
func (s *flagSet) find(key []byte) (int32, uint64) {
	h := maphash.Bytes(s.seed, key)
	i, ok := s.index[h]
	if !ok {
		return -1, h
	}
	for ; i >= 0; i = s.ents[i].next {
		e := &s.ents[i]
		if string(s.arena[e.off:e.off+e.n]) == string(key) {
			return i, h
		}
	}
	return -1, h
}

// mask returns the flags passed on for key (0: none).
func (s *flagSet) mask(key []byte) uint64 {
	if i, _ := s.find(key); i >= 0 {
		return s.ents[i].mask
	}
	return 0
}

// add adds the flags m to key's.
func (s *flagSet) add(key []byte, m uint64) {
	i, h := s.find(key)
	if i >= 0 {
		s.ents[i].mask |= m
		return
	}
	next, ok := s.index[h]
	if !ok {
		next = -1
	}
	s.index[h] = int32(len(s.ents))
	s.ents = append(s.ents, flagEnt{off: uint32(len(s.arena)), n: uint32(len(key)), mask: m, next: next})
	s.arena = append(s.arena, key...)
}

// len is the number of keys held.
func (s *flagSet) len() int { return len(s.ents) }

// reset forgets every key, keeping the memory.
func (s *flagSet) reset() {
	clear(s.index)
	s.ents, s.arena = s.ents[:0], s.arena[:0]
}
