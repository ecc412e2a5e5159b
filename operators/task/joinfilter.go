package task

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"sync/atomic"

	"github.com/sluice-dev/sluice/changelog/codec"
	"github.com/sluice-dev/sluice/operators"
)

// A regular join with a unique side whose results are filtered for a top (Nexmark q9: each
// auction, unique per id, with its bids, for the highest bid per auction), or re-keyed by
// columns of the unique side alone for a max or a min (q4: the highest bid per auction and
// category), sorts every record of the other side in a backlog, and at the fold pairs each with
// the key's unique record and asks the filter of its results (combine.go) whether the row
// could still enter the top, or change the max: most cannot (a bid its auction's earlier bids
// beat). joinFilter asks that question before the sorter, of
// the records whose key's unique record came earlier in the same backlog, and drops those whose
// row would not be written: they are neither sorted, spilled nor replayed. A join with a unique
// side whose results no filter ranks has the same filter for its where alone (Nexmark q20: the
// bids of the auctions of other categories): a record whose pair with u fails the where gives
// no row at the fold, and the join keeps nothing beside its unique record.
//
// Why the answer is the fold's. The join keeps the first unique record of a key for ever (a
// later one is ignored), so once the key's state has one, u, or when it has none and u arrives
// in the backlog, every later record of the other side pairs with u at the fold, in arrival
// order (the order of this filter's questions). A record r is dropped here when its pair with u fails the
// where (the fold writes no row for it), or when the rows of records kept before it, which the
// where let through, leave its row no rank in the top (operators.TopBound over those rows'
// values). At the fold each of those rows reaches the top before r's, or is dropped there by the
// results' filter because rows that reached the top before it rank at least as high; either way
// the top holds rows that leave r's row no rank, so the top's rows, state and outputs do not
// depend on whether r's row reaches it. Re-keyed for a max or a min, every row of the key goes
// to one key of the aggregate (the one the unique record's columns make), which is order-free:
// a row that one of those kept equals or beats changes nothing there. A row that might be too
// large for the reader (boundedRecord, under the key it reaches the reader with) is neither
// dropped nor counted: at the fold it may become a dead letter; so is every row of a key whose
// re-key fails (a dead letter each).
//
// What it holds, for every key of the backlog (it reads the key's state once, at its first
// record): whether its unique record is known, and then the members of that record the where
// and the top's column read (operators.JoinJudge.Keep) and the n best values of the rows kept
// in this backlog, pointer-free (a slotSet and an arena), in memory it reserves from the sort
// budget (backlog.sort_memory), 1 MiB at a time; a key that comes when the sorters hold the
// whole budget is not judged (a Bloom filter of those keys, 256 KiB, keeps it so), nor is a key
// that the real-time cache holds. It starts empty with each backlog and
// after an abort that drops the sorted records (Aborted); an abort that keeps them keeps it too,
// as its records stay in the sorter. In real time it asks nothing: a record is processed at
// once.
type joinFilter struct {
	judge  *operators.JoinJudge
	unique byte
	bound  *operators.TopBound
	member string
	// rekey: the reader's re-key, when the rows go to a max or a min by it (Nexmark q4): every
	// row of a key re-keys alike (operators.RegularJoin.SameUnderKey), to the key that the
	// unique record gives; nil for a top of the results' key.
	rekey  *operators.Rekey
	rec    operators.Record // scratch: the row the re-key reads
	budget interface {
		Reserve(int64) bool
		Release(int64)
	}

	keys     *slotSet // per key: off, length, whole length (uint32 each), its keyState, then the slot
	arena    []byte   // the unique records' kept members
	reserved int64
	refused  bloom // keys it had no room for: their records are not judged, even once it has

	cur    []byte // the current key's slot (operators.TopBound's)
	keyLen int    // and the length of the key its rows reach the reader under
	raw    []byte // what DropsBeaten was asked of the current record: its rank member
	size   int
	asked  bool

	// The filter pays its way only when it drops many records: it counts the records of a
	// window (filterWindow) and those it dropped, and below a quarter it asks nothing for the
	// next skipWindows windows (records kept unjudged only make it drop less).
	looked, dropped, skip int64
}

// filterBeforeSorting lets a join have a joinFilter (a variable for the tests, which compare
// the results with and without it); joinFiltered counts the records the filters dropped (the
// tests', which check that it dropped some).
var (
	filterBeforeSorting = true
	joinFiltered        atomic.Int64
)

// keyState is what a joinFilter knows of a key's unique record.
const (
	keyUnjudged byte = iota // not known: its records are not judged
	keyHeld                 // held (off, length): the records of the other side are judged
	keyAwaited              // none yet: the first to come is the key's
)

const (
	joinSlotHead = 17      // off, length, whole length, keyState, the rows' key length
	joinReserve  = 1 << 20 // what the filter reserves of the sort budget at a time
)

// newJoinFilter returns the filter before the sorter of the join of chain c, or nil when there
// is none to ask: a regular join with a unique side and a select whose results are filtered
// (its results' filter comb), without stages, for a top without windows of the results' key,
// or through a re-key by columns of the unique side alone for an aggregate of each key's best
// value; otherwise a regular join with a unique side and a where that does not read that side
// whole, whose pairs that fail the where it drops (operators.RegularJoin.JudgeWhere).
func newJoinFilter(c *chain, d Deps) *joinFilter {
	j, ok := c.kop.(*operators.RegularJoin)
	if !ok || !filterBeforeSorting || d.Budget == nil || c.plan.Rekey != "" {
		return nil
	}
	if jf := newResultsJoinFilter(c, j, d); jf != nil {
		return jf
	}
	// No filter of the results to ask: the where alone (Nexmark q20).
	jj := j.JudgeWhere()
	if jj == nil {
		return nil
	}
	return &joinFilter{judge: jj, unique: jj.UniqueSide(), budget: d.Budget, keys: newSlotSet(joinSlotHead)}
}

// newResultsJoinFilter is newJoinFilter's filter that asks the filter of the join's results
// (and the where), or nil.
func newResultsJoinFilter(c *chain, j *operators.RegularJoin, d Deps) *joinFilter {
	cb := c.comb
	if cb == nil || cb.bound == nil || len(cb.stages) > 0 || cb.paths > 0 || cb.bound.Windowed() || cb.bound.Member() == "" {
		return nil
	}
	var also []string
	switch {
	case cb.early && !cb.underKey && cb.rekey == nil: // a top of the results' key
	case cb.underKey && cb.rekey != nil: // a max or a min re-keyed by the unique side's columns
		also = cb.rekey.Members()
	default:
		return nil
	}
	jj := j.Judge(cb.bound.Member(), also)
	if jj == nil {
		return nil
	}
	return &joinFilter{judge: jj, unique: jj.UniqueSide(), bound: cb.bound, member: cb.bound.Member(), rekey: cb.rekey,
		budget: d.Budget, keys: newSlotSet(joinSlotHead + cb.bound.SlotSize())}
}

// reset forgets every key and frees its memory, giving back what it reserved: a backlog starts
// or ends, or its sorted records were dropped.
func (jf *joinFilter) reset() {
	if jf.keys.len() > 0 || cap(jf.arena) > 0 {
		jf.keys, jf.arena = newSlotSet(jf.keys.width), nil
	}
	jf.budget.Release(jf.reserved)
	jf.refused.bits = nil
	jf.reserved, jf.cur = 0, nil
	jf.looked, jf.dropped, jf.skip = 0, 0, 0
}

// bytes is the memory the filter holds (a slice's growth may take it past what it reserved
// until its next key, which reserves for it or is refused).
func (jf *joinFilter) bytes() int64 {
	k := jf.keys
	return int64(cap(k.arena) + cap(k.slots) + cap(k.ents)*entryBytes + cap(jf.arena))
}

// joinDrops reports whether the join's record in (Project's input, after its tag) of key,
// about to be sorted in c's backlog, can be dropped; it takes a unique record's key in.
func (t *Task) joinDrops(c *chain, key, in []byte) (bool, error) {
	jf := c.jf
	if in[0] == jf.unique {
		return false, t.joinUnique(c, key, in[1:])
	}
	s, err := t.joinKey(c, key)
	if err != nil || s == nil || s[12] != keyHeld {
		return false, err
	}
	if jf.skip > 0 {
		jf.skip--
		return false, nil
	}
	off, n := binary.LittleEndian.Uint32(s), binary.LittleEndian.Uint32(s[4:])
	whole := int(binary.LittleEndian.Uint32(s[8:]))
	jf.cur, jf.keyLen, jf.asked = s[joinSlotHead:], int(binary.LittleEndian.Uint32(s[13:])), false
	defer func() { jf.cur = nil }()
	drop, judged := jf.judge.Pair(jf, key, in, &c.rec, jf.arena[off:off+n], whole)
	if !judged {
		return false, nil
	}
	jf.looked++
	if drop {
		jf.dropped++
		joinFiltered.Add(1)
	} else if jf.asked && jf.keyLen+jf.size <= boundedRecord {
		jf.bound.EnterMember(key, jf.raw, jf.slotOf, jf.slotOf)
	}
	if jf.looked == filterWindow {
		if jf.dropped*4 < jf.looked {
			jf.skip = skipWindows * filterWindow
		}
		jf.looked, jf.dropped = 0, 0
	}
	return drop, nil
}

// joinUnique takes the unique record u of key: the first of the key in this backlog is the one
// the fold pairs the later records with, when the key's state has none.
func (t *Task) joinUnique(c *chain, key, u []byte) error {
	jf := c.jf
	s, err := t.joinKey(c, key)
	if err != nil || s == nil || s[12] != keyAwaited {
		return err // not judged, or a later unique record of the key, which the join ignores
	}
	jf.hold(s, key, u)
	return nil
}

// joinKey returns key's slot, reading the key's state at its first record in the backlog; nil
// when the filter has no room for it, now or before in this backlog.
func (t *Task) joinKey(c *chain, key []byte) ([]byte, error) {
	jf := c.jf
	if s := jf.keys.slot(key); s != nil || jf.refused.has(key) {
		return s, nil
	}
	if !jf.room(len(key) + jf.keys.width + entryBytes) {
		jf.refused.add(key) // its unique record might come now, and be taken for the first later
		return nil, nil
	}
	if _, ok := c.cache[string(key)]; ok || c.hasPending {
		s := jf.keys.add(key) // the key may have a state the store does not show
		s[12] = keyUnjudged
		return s, nil
	}
	v, had, err := t.d.Store.Get(c.ns, key, nil)
	if err != nil {
		return nil, fmt.Errorf("task %d: state: %w", t.partition, err)
	}
	var u []byte
	none, ok := true, true
	if had {
		_, _, st, err := codec.ParseKeyed(v)
		if err != nil {
			ok = false
		} else {
			u, none, ok = jf.judge.Stored(st)
		}
	}
	s := jf.keys.add(key)
	switch {
	case !ok:
		s[12] = keyUnjudged
	case none:
		s[12] = keyAwaited
	default:
		jf.hold(s, key, u)
	}
	return s, nil
}

// hold keeps in slot s what the judge reads of the unique record u of key. With a re-key, a key
// whose rows it fails on is not judged: each of them is a dead letter of its own.
func (jf *joinFilter) hold(s, key, u []byte) {
	s[12] = keyUnjudged
	off := len(jf.arena)
	if !jf.room(len(u)) {
		return
	}
	jf.arena = jf.judge.Keep(jf.arena, u)
	if len(jf.arena) == off || len(jf.arena) > 1<<31 {
		jf.arena = jf.arena[:off]
		return
	}
	keyLen := len(key)
	if jf.rekey != nil {
		row, err := jf.judge.UniqueRow(key, jf.judge.Kept(jf.arena[off:]))
		if err != nil {
			jf.arena = jf.arena[:off]
			return
		}
		jf.rec.Set(key, 0, row)
		k, err := jf.rekey.Key(&jf.rec)
		jf.rec.Release()
		if err != nil {
			jf.arena = jf.arena[:off]
			return
		}
		keyLen = len(k)
	}
	binary.LittleEndian.PutUint32(s, uint32(off))
	binary.LittleEndian.PutUint32(s[4:], uint32(len(jf.arena)-off))
	binary.LittleEndian.PutUint32(s[8:], uint32(len(u)))
	binary.LittleEndian.PutUint32(s[13:], uint32(keyLen))
	s[12] = keyHeld
}

// room reports whether the filter may take n bytes more, reserving them from the sort budget
// as needed; false when the budget has none left now (the sorters hold it).
func (jf *joinFilter) room(n int) bool {
	for jf.bytes()+int64(n) > jf.reserved {
		if !jf.budget.Reserve(joinReserve) {
			return false
		}
		jf.reserved += joinReserve
	}
	return true
}

// slotOf is the current key's slot (operators.TopBound's slot and add).
func (jf *joinFilter) slotOf([]byte) []byte { return jf.cur }

// FilterMember is operators.ResultFilter's: the member the top ranks rows by.
func (jf *joinFilter) FilterMember() string { return jf.member }

// DropsBeaten is operators.ResultFilter's: whether the rows kept before it for the current key
// leave the row (of at most size bytes, whose member is raw) no rank; it notes raw and size for
// the row's count if it is kept. A row that might be too large for the output topic is never
// dropped: at the fold it may become a dead letter.
func (jf *joinFilter) DropsBeaten(raw []byte, size int) bool {
	jf.raw, jf.size, jf.asked = append(jf.raw[:0], raw...), size, true
	if jf.keyLen+size > boundedRecord {
		return false
	}
	return jf.bound.BeatenMember(nil, raw, jf.slotOf)
}

// bloom is a Bloom filter of keys: 4 probes in 2^21 bits (256 KiB, allocated at the first add):
// under 3% false positives up to 200,000 keys, more beyond.
type bloom struct {
	seed maphash.Seed
	bits []uint64
}

const bloomBits = 1 << 21

// probe returns the i-th bit of key's probes.
func (b *bloom) probe(h uint64, i uint32) (word int, mask uint64) {
	bit := (uint32(h) + i*(uint32(h>>32)|1)) % bloomBits
	return int(bit / 64), 1 << (bit % 64)
}

// add adds key.
func (b *bloom) add(key []byte) {
	if b.bits == nil {
		b.seed, b.bits = maphash.MakeSeed(), make([]uint64, bloomBits/64)
	}
	h := maphash.Bytes(b.seed, key)
	for i := range uint32(4) {
		w, m := b.probe(h, i)
		b.bits[w] |= m
	}
}

// has reports whether key may have been added.
func (b *bloom) has(key []byte) bool {
	if b.bits == nil {
		return false
	}
	h := maphash.Bytes(b.seed, key)
	for i := range uint32(4) {
		if w, m := b.probe(h, i); b.bits[w]&m == 0 {
			return false
		}
	}
	return true
}
