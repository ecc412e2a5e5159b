package task

// latest is a backlog's table of each key's latest record, for a keyed operator whose result
// depends on a key's last record alone (operators.LastWins: dedup keep last). A record of a key
// the table holds replaces the key's record in place and is never sorted; a record of a new key
// takes the oldest key's place once the table is full, and that key's record goes to the sorter
// (FIFO). At the fold the table's records go to the sorter too, each with the watermark and
// arrival it was taken with, so the sorter replays exactly the records a sort of every record
// would have replayed last for each key, and the records the table dropped are ones a later
// record of the same key follows, which change nothing (LastWins).
//
// A key's duplicates tend to arrive close together (Nexmark q18: every duplicate (bidder,
// auction) pair of 9.2M bids arrives within 500 bids of the pair's previous one), so a small
// table removes them all: 4096 keys and 1 MiB of keys and records (latestLimits) per operator and
// task, outside the sort budget. Once full, it watches its hit rate as partials does: below a
// quarter over a window it moves its records into the sorter and is bypassed until reset. Not
// safe for concurrent use.
type latest struct {
	idx   map[string]int32 // key -> position in ring
	ring  []latestSlot     // positions head, head+1, ... (mod cap) hold the live slots, oldest first
	head  int
	n     int
	bytes int64 // keys and records held
	limit int
	max   int64 // bytes

	window     int64
	seen, hits int64
	bypass     bool
}

type latestSlot struct {
	key, rec []byte
	ts, seq  int64
}

// latestSlotCap is the largest buffer a slot keeps for its next keys: the table's memory is at
// most latestKeys times this beside the latestBytes of records it holds.
const latestSlotCap = 2 << 10

// latestLimits are a new table's bounds: keys, bytes of keys and records, and the hit-rate
// window once full (variables for the tests, which shrink them).
var latestLimits = struct {
	keys          int
	bytes, window int64
}{4096, 1 << 20, defaultWindow}

func newLatest() *latest {
	l := latestLimits
	return &latest{idx: map[string]int32{}, ring: make([]latestSlot, l.keys), limit: l.keys, max: l.bytes, window: l.window}
}

// add takes a record of key (sorter time ts and sequence seq, entry rec) and reports whether
// it holds it; when it returns false the caller sorts the record itself. Records it evicts go
// to spill, which must copy them.
func (l *latest) add(key []byte, ts, seq int64, rec []byte, spill func(key []byte, ts, seq int64, rec []byte) error) (bool, error) {
	if l.bypass {
		return false, nil
	}
	pos, hit := l.idx[string(key)]
	if l.n == l.limit {
		l.seen++
		if hit {
			l.hits++
		}
		if l.seen >= l.window {
			l.seen, l.hits, l.bypass = 0, 0, l.hits*4 < l.seen
			if l.bypass {
				return false, l.drain(spill)
			}
		}
	}
	if hit {
		s := &l.ring[pos]
		l.bytes += int64(len(rec) - len(s.rec))
		s.rec = append(s.rec[:0], rec...)
		s.ts, s.seq = ts, seq
	} else {
		if l.n == l.limit {
			if err := l.evict(spill); err != nil {
				return false, err
			}
		}
		pos = int32((l.head + l.n) % l.limit)
		s := &l.ring[pos]
		s.key = append(s.key[:0], key...)
		s.rec = append(s.rec[:0], rec...)
		s.ts, s.seq = ts, seq
		l.idx[string(s.key)] = pos
		l.n++
		l.bytes += int64(len(key) + len(rec))
	}
	for l.bytes > l.max && l.n > 1 {
		if err := l.evict(spill); err != nil {
			return false, err
		}
	}
	return true, nil
}

// evict sends the oldest key's record to spill.
func (l *latest) evict(spill func(key []byte, ts, seq int64, rec []byte) error) error {
	s := &l.ring[l.head]
	if err := spill(s.key, s.ts, s.seq, s.rec); err != nil {
		return err
	}
	delete(l.idx, string(s.key))
	l.bytes -= int64(len(s.key) + len(s.rec))
	if cap(s.rec) > latestSlotCap {
		s.rec = nil // a large record's buffer is not kept for the slot's next keys
	}
	l.head = (l.head + 1) % l.limit
	l.n--
	return nil
}

// drain sends every record held to spill and empties the table (its bypass stays as it is).
func (l *latest) drain(spill func(key []byte, ts, seq int64, rec []byte) error) error {
	for l.n > 0 {
		if err := l.evict(spill); err != nil {
			return err
		}
	}
	l.head = 0
	return nil
}

// len is the number of keys held.
func (l *latest) len() int { return l.n }

// memBytes is the table's memory: its slots' buffers and the index.
func (l *latest) memBytes() int64 {
	var b int64
	for i := range l.ring {
		b += int64(cap(l.ring[i].key) + cap(l.ring[i].rec))
	}
	return b + 64*int64(l.limit) + 32*int64(len(l.idx))
}

// reset empties the table, keeping its buffers for the next backlog.
func (l *latest) reset() {
	clear(l.idx)
	l.head, l.n, l.bytes = 0, 0, 0
	l.seen, l.hits, l.bypass = 0, 0, false
}
