package sorter

import (
	"sync/atomic"
	"unsafe"
)

// chunkAllocs counts chunk memory allocations (tests check that spills reuse it).
var chunkAllocs atomic.Int64

// chunk is one slotted page of memory: records from the front, index slots from the back.
type chunk struct {
	ents     []entry // the chunk's memory as slots; the slots in use are ents[slot:]
	buf      []byte  // the same memory as bytes; the records in use are buf[:used]
	used     int
	slot     int
	reserved bool // counted in the Budget (otherwise private)
	sorted   bool // ents[slot:] is in merge order
}

// newChunk makes a chunk of size bytes (a multiple of entrySize) over mem, or over new memory
// if mem is nil. Its memory holds no pointers, so viewing it both as slots and as bytes is safe.
func newChunk(size int, reserved bool, mem []entry) *chunk {
	ents := mem
	if len(ents) != size/entrySize {
		ents = make([]entry, size/entrySize)
		chunkAllocs.Add(1)
	}
	buf := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(ents))), len(ents)*entrySize)
	return &chunk{ents: ents, buf: buf, slot: len(ents), reserved: reserved}
}

func (c *chunk) size() int64    { return int64(len(c.buf)) }
func (c *chunk) room() int      { return c.slot*entrySize - c.used }
func (c *chunk) len() int       { return len(c.ents) - c.slot }
func (c *chunk) slots() []entry { return c.ents[c.slot:] }

func (c *chunk) reset() {
	c.used, c.slot, c.sorted = 0, len(c.ents), false
}

func (c *chunk) sort(radix bool) {
	if !c.sorted {
		sortSlots(c.buf, c.slots(), radix)
		c.sorted = true
	}
}

// permuteInto copies c's records into the empty chunk dst (of the same size) in sorted
// order, with their slots, so that a merge reads dst sequentially. c must be sorted.
func (c *chunk) permuteInto(dst *chunk) {
	src := c.slots()
	dst.slot = len(dst.ents) - len(src)
	out := dst.ents[dst.slot:]
	w := 0
	for i, e := range src {
		p := int(e.pos)
		kl, pl, hdr := lengths(c.buf[p:])
		n := hdr + kl + pl
		copy(dst.buf[w:w+n], c.buf[p:p+n])
		e.pos = uint64(w)
		out[i] = e
		w += n
	}
	dst.used = w
	dst.sorted = true
}
