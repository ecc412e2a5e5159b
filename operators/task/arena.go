package task

import (
	"github.com/twmb/franz-go/pkg/kgo"
)

// outArena gives the records a task produces (outputs, repartitioned records, changelog
// records) their kgo.Record and their key and value bytes from blocks, instead of three
// allocations each: the producer holds a record until the broker acknowledges it, so each
// needs memory of its own, but not a heap object of its own. A block stays alive until the
// last record carved from it is done with; its memory is never reused or written again, so a
// record's bytes are as immutable as a clone's. Owned by the task goroutine.
type outArena struct {
	buf  []byte
	recs []kgo.Record
	hdrs []kgo.RecordHeader
}

const (
	arenaBlock   = 64 << 10        // bytes per block
	arenaLargest = arenaBlock / 16 // a larger slice gets an allocation of its own
	arenaRecords = 256             // records per block
	arenaHeaders = 1024            // headers per block
)

// alloc returns an empty slice with room for n bytes (and no more: an append beyond makes a
// new array).
func (a *outArena) alloc(n int) []byte {
	if n == 0 {
		return []byte{} // not nil, even before the first block: a nil value is a tombstone, a nil key none
	}
	if n > arenaLargest {
		return make([]byte, 0, n)
	}
	if cap(a.buf)-len(a.buf) < n {
		a.buf = make([]byte, 0, arenaBlock)
	}
	l := len(a.buf)
	a.buf = a.buf[:l+n]
	return a.buf[l : l : l+n]
}

// clone returns a copy of b (nil for nil, as bytes.Clone).
func (a *outArena) clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(a.alloc(len(b)), b...)
}

// out returns a record of topic and partition with copies of key and value.
func (a *outArena) out(topic string, partition int32, key, value []byte) *kgo.Record {
	r := a.record()
	r.Topic, r.Partition, r.Key, r.Value = topic, partition, a.clone(key), a.clone(value)
	return r
}

// record returns a zero record.
func (a *outArena) record() *kgo.Record {
	if len(a.recs) == 0 {
		a.recs = make([]kgo.Record, arenaRecords)
	}
	r := &a.recs[0]
	a.recs = a.recs[1:]
	return r
}

// headers returns hs followed by the header key: value (a copy), from a block.
func (a *outArena) headers(hs []kgo.RecordHeader, key string, value []byte) []kgo.RecordHeader {
	n := len(hs) + 1
	if n > arenaHeaders/16 {
		return append(append(make([]kgo.RecordHeader, 0, n), hs...), kgo.RecordHeader{Key: key, Value: a.clone(value)})
	}
	if len(a.hdrs) < n {
		a.hdrs = make([]kgo.RecordHeader, arenaHeaders)
	}
	out := a.hdrs[:n:n]
	a.hdrs = a.hdrs[n:]
	copy(out, hs)
	out[n-1] = kgo.RecordHeader{Key: key, Value: a.clone(value)}
	return out
}
