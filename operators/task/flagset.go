package task

import (
	"encoding/binary"
	"hash/maphash"
)

// slotSet is a combining writer's memory per key (combine.go): a slot of a fixed number of
// bytes for each key it has seen. Its keys (composite group keys, a JSON object each: longer
// than partials' inline keys) and its slots live in two arenas, and its index maps a key's hash
// to its entries, so that it holds no pointer: a million keys cost the garbage collector
// nothing to scan, where a map[string]uint64 of them cost q16 a tenth of its CPU. Exact: a
// lookup compares the key's bytes. Not safe for concurrent use.
type slotSet struct {
	seed  maphash.Seed
	width int              // the size of a slot
	index map[uint64]int32 // hash -> its latest entry
	ents  []slotEnt
	arena []byte
	slots []byte // entry i's slot: slots[i*width : (i+1)*width]
}

type slotEnt struct {
	off, n uint32 // the key: arena[off : off+n]
	next   int32  // the previous entry of the same hash, or -1
}

func newSlotSet(width int) *slotSet {
	return &slotSet{seed: maphash.MakeSeed(), width: width, index: map[uint64]int32{}}
}

// find returns the index of key's entry, or -1, and its hash.
func (s *slotSet) find(key []byte) (int32, uint64) {
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

// slot returns key's slot, or nil when it has none. It is valid until the next add or reset.
func (s *slotSet) slot(key []byte) []byte {
	if i, _ := s.find(key); i >= 0 {
		return s.slots[int(i)*s.width : int(i+1)*s.width]
	}
	return nil
}

// add returns key's slot, a new one of zeros if it has none. It is valid until the next add or
// reset.
func (s *slotSet) add(key []byte) []byte {
	i, h := s.find(key)
	if i < 0 {
		next, ok := s.index[h]
		if !ok {
			next = -1
		}
		i = int32(len(s.ents))
		s.index[h] = i
		s.ents = append(s.ents, slotEnt{off: uint32(len(s.arena)), n: uint32(len(key)), next: next})
		s.arena = append(s.arena, key...)
		s.slots = append(s.slots, make([]byte, s.width)...)
	}
	return s.slots[int(i)*s.width : int(i+1)*s.width]
}

// len is the number of keys held.
func (s *slotSet) len() int { return len(s.ents) }

// maxSlotSetBytes bounds a slotSet's memory besides its writer's limit in keys: a task has a
// set per filtering writer and a process a task per partition, all within the allowance of the
// memory limit (cmd/sluice). q16 at 10M events, 8 partitions: 100,000 keys of about 60 bytes
// held 184 MB, heap above the limit, a fifth of the CPU in the collector.
const maxSlotSetBytes = 2 << 20

// entryBytes is what a key costs beyond its bytes and its slot: its entry and its share of the
// index.
const entryBytes = 12 + 32

// full reports whether s holds limit keys or maxSlotSetBytes: its writer then resets it (a
// filter that forgets lets more records through, never fewer).
func (s *slotSet) full(limit int) bool {
	return len(s.ents) >= limit || len(s.arena)+len(s.slots)+len(s.ents)*entryBytes >= maxSlotSetBytes
}

// reset forgets every key, keeping the memory.
func (s *slotSet) reset() {
	clear(s.index)
	s.ents, s.arena, s.slots = s.ents[:0], s.arena[:0], s.slots[:0]
}

// flagSet is a slotSet of a distinct's flags (a uint64 mask per key).
type flagSet struct{ slotSet }

func newFlagSet() *flagSet { return &flagSet{*newSlotSet(8)} }

// mask returns the flags passed on for key (0: none).
func (s *flagSet) mask(key []byte) uint64 {
	if b := s.slot(key); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

// add adds the flags m to key's.
func (s *flagSet) add(key []byte, m uint64) {
	b := s.slotSet.add(key)
	binary.LittleEndian.PutUint64(b, binary.LittleEndian.Uint64(b)|m)
}
