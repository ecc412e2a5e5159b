package operators

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/sluice-dev/sluice/configs"
)

// RegularJoin is the unbounded (regular) inner stream-stream join (configs.Join with left and
// right and no within): per key, every pair of a left and a right record is emitted exactly
// once, as {"<left>": {...}, "<right>": {...}}, whenever its two records arrived, as Flink's
// regular INNER JOIN on append-only inputs. The pairs depend only on which records arrived, not
// on how the two inputs interleave, so both modes give the same answer.
//
// State: every record of the key, of both sides, for ever. With unique (left or right), that
// side has at most one record per key (an entity: an auction, a person): its first record of a
// key is the one, a later one of the key is ignored, and a record of the other side that arrives
// after it is emitted with it and not kept, so the key's state stays one record; records of the
// other side that arrived before it wait in the state until it comes.
//
// A record costs what it pairs with, not what its key holds: Process appends it to the key's
// state (Context.Append) and reads only the other side's records, found from the state's end
// through links that each record carries. So a hot key (a bidder's thousands of bids waiting
// for the auctions the bidder sells) takes each of its records in time of its pairs.
//
// State layout (version 2): the key's records in arrival order, each its bytes followed by a
// trailer of 13 bytes: its side (1 byte), its length, and two links (4 bytes each, big-endian):
// the end of the key's previous record of its own side and the end of the key's last record of
// the other side when it came, as offsets in the state just past their trailers (0: none). The
// last record's trailer thus leads to the last record of each side, and each record to the one
// of its side before it. With a unique side, once its record came, the state is that record
// alone. Not safe for concurrent use; Layout, ValidState and IsLate are.
type RegularJoin struct {
	name        string
	left, right string // the input names: the output's member names
	unique      int    // sideLeft, sideRight, or -1 (none)
	sel         *PairSelect
	// keep: per side, the members of its records the select reads (PairSelect.Reads), which
	// are all the join keeps of them (Project), in its state and in a backlog's sorted runs;
	// nil: the whole record.
	keep [2][]string

	ends  []uint32 // scratch: the other side's records, by their ends, last first
	out   []byte
	names pairNames
	st    []byte
}

// rjTrailer is the size of a record's trailer in the state: side, length, two links.
const rjTrailer = 1 + 4 + 4 + 4

// rjEntry is one record's trailer, decoded.
type rjEntry struct {
	side      byte
	start     uint32 // where its bytes start
	prevSame  uint32 // the end of its side's previous record (0: none)
	lastOther uint32 // the end of the other side's last record before it (0: none)
}

// NewRegularJoin compiles a regular inner join; cfg must have been validated.
func NewRegularJoin(name string, cfg configs.Join) (*RegularJoin, error) {
	if cfg.Left == "" || cfg.Right == "" || cfg.Within != 0 {
		return nil, fmt.Errorf("operators: join %s: a regular join needs left and right and no within", name)
	}
	if cfg.Type != "" && cfg.Type != configs.JoinInner {
		return nil, fmt.Errorf("operators: join %s: a regular join is inner (left and outer joins need within)", name)
	}
	sel, err := NewPairSelect(name, cfg.Columns(), cfg.Where)
	if err != nil {
		return nil, err
	}
	j := &RegularJoin{name: name, left: cfg.Left, right: cfg.Right, unique: -1, sel: sel}
	if sel != nil && cfg.Left != cfg.Right {
		j.keep = [2][]string{sel.Reads(cfg.Left), sel.Reads(cfg.Right)}
	}
	switch cfg.Unique {
	case "":
	case configs.SideLeft:
		j.unique = sideLeft
	case configs.SideRight:
		j.unique = sideRight
	default:
		return nil, fmt.Errorf("operators: join %s: unknown unique %q", name, cfg.Unique)
	}
	return j, nil
}

// Name returns the operator name.
func (j *RegularJoin) Name() string { return j.name }

// SameUnderKey reports whether every row the join emits under one key has the same value of
// each of members (top-level members of its rows): each is a column that copies the unique
// side, or a member path of it, whose first record of a key is in every pair of the key (a
// filter that asks of a row before it is written may take the re-keyed key of an earlier row
// of the key: combine.go dropsBeatenMember).
func (j *RegularJoin) SameUnderKey(members []string) bool {
	if j.unique < 0 || j.left == j.right || j.sel == nil || j.sel.s == nil || len(members) == 0 {
		return false
	}
	side := j.left
	if j.unique == sideRight {
		side = j.right
	}
	for _, m := range members {
		i := slices.IndexFunc(j.sel.s.cols, func(c selectCol) bool { return c.name == m })
		if i < 0 {
			return false
		}
		c := j.sel.s.cols[i]
		if c.prog != nil || c.path.parts == nil && c.field != side || c.path.parts != nil && c.path.parts[0] != side {
			return false
		}
	}
	return true
}

// JoinJudge asks, before a backlog sorts a record of a regular join's side that is not unique,
// whether its pair with the key's unique record would be written: what the join asks at the
// fold (RegularJoin.Process) of a filter of its results (ResultFilter) and of its where, for
// the pair it would emit once that record is the key's unique one. It reads of the unique
// record only the members the where and the filter's column read (Keep). Not safe for
// concurrent use: its join's.
type JoinJudge struct {
	j     *RegularJoin
	keep  []string
	out   []byte
	where bool     // JudgeWhere's: it asks the where alone
	idx   []member // scratch: Keep's index of u, then of its part
	uidx  []member // Pair's index of the unique record's part
	names pairNames
}

// Judge returns the join's JoinJudge for a filter of its results that ranks rows by the column
// member, or nil when it cannot judge before it writes a row: no unique side, no select, a
// column that is an expression's, a where or a column that reads the unique side whole. also
// names the columns, copies of the unique side's members (SameUnderKey), that UniqueRow must
// write too (the reader's re-key's).
func (j *RegularJoin) Judge(member string, also []string) *JoinJudge {
	if j.unique < 0 || j.left == j.right || j.sel == nil || member == "" {
		return nil
	}
	side := j.left
	if j.unique == sideRight {
		side = j.right
	}
	if len(also) > 0 && !j.SameUnderKey(also) {
		return nil
	}
	keep, ok := j.sel.judgeMembers(side, member, also)
	if !ok {
		return nil
	}
	return &JoinJudge{j: j, keep: keep}
}

// JudgeWhere returns the join's JoinJudge for its where alone, for a join whose results no
// filter ranks: a record of the side that is not unique whose pair with the key's unique record
// fails the where gives no row, and the join does not keep it (Process keeps nothing beside a
// unique record), so a backlog need not sort it (Nexmark q20: the bids of auctions of other
// categories). nil: no unique side or no where, or a where that reads the unique side whole.
func (j *RegularJoin) JudgeWhere() *JoinJudge {
	if j.unique < 0 || j.left == j.right || j.sel == nil || j.sel.where == nil {
		return nil
	}
	side := j.left
	if j.unique == sideRight {
		side = j.right
	}
	keep, whole := sideMembers(j.sel.where.vm.Node(), side, []string{})
	if whole {
		return nil
	}
	return &JoinJudge{j: j, keep: keep, where: true}
}

// UniqueRow returns the row the join writes of a pair of the unique record u (Keep's part of it)
// with an empty record of the other side: the columns that copy the unique side's members
// (those Judge was given among them) as in every row of the key; valid until the next call.
func (jj *JoinJudge) UniqueRow(key, u []byte) ([]byte, error) {
	j := jj.j
	l, r := []byte("{}"), u
	if j.unique == sideLeft {
		l, r = u, []byte("{}")
	}
	jj.out, _ = appendPair(jj.out[:0], nil, &jj.names, j.left, l, j.right, r)
	return j.sel.Row(key, jj.out)
}

// Stored reports what the join's state st of a key holds of the unique side: its record (as
// Project gave it, after the tag and the side byte), or none yet (the key has no state, or only
// the other side's records, which wait for it). ok false: st is not a state the judge can read.
func (jj *JoinJudge) Stored(st []byte) (u []byte, none, ok bool) {
	if len(st) == 0 {
		return nil, true, true
	}
	e, valid := rjRead(st, uint32(len(st)))
	if !valid {
		return nil, false, false
	}
	if int(e.side) != jj.j.unique {
		return nil, true, true // the other side's records wait for it
	}
	if e.start != 0 || e.prevSame != 0 || e.lastOther != 0 {
		return nil, false, false // the unique record stays alone
	}
	return st[:uint32(len(st))-rjTrailer], false, true
}

// UniqueSide is the side byte (Project's, after its tag) of the unique side's records.
func (jj *JoinJudge) UniqueSide() byte { return byte(jj.j.unique) }

// Keep appends to dst what Pair reads of the unique record u (Project's, after its tag and
// side byte): its members that the judge reads, as an object (Kept's part), then that object's
// index, which Pair takes rather than make it at each pair, and the object's length.
func (jj *JoinJudge) Keep(dst, u []byte) []byte {
	at := len(dst)
	var err error
	if jj.idx, err = indexObject(u, jj.idx[:0]); err != nil {
		dst = append(dst, u...) // not an object: the fold pairs it as it is too (no index)
		return binary.LittleEndian.AppendUint32(dst, uint32(len(u)))
	}
	dst = appendMembers(dst, u, jj.idx, jj.keep)
	n := len(dst) - at
	if jj.idx, err = indexObject(dst[at:], jj.idx[:0]); err == nil {
		for _, m := range jj.idx {
			ks := uint32(m.ks)
			if m.esc {
				ks |= 1 << 31 // an offset is below 2^31 (indexObject refuses longer values)
			}
			dst = binary.LittleEndian.AppendUint32(dst, ks)
			dst = binary.LittleEndian.AppendUint32(dst, uint32(m.ke))
			dst = binary.LittleEndian.AppendUint32(dst, uint32(m.vs))
			dst = binary.LittleEndian.AppendUint32(dst, uint32(m.ve))
		}
	}
	return binary.LittleEndian.AppendUint32(dst, uint32(n))
}

// Kept returns the unique record's part of what Keep wrote (kept): the object Pair pairs.
func (jj *JoinJudge) Kept(kept []byte) []byte {
	return kept[:binary.LittleEndian.Uint32(kept[len(kept)-4:])]
}

// keptIndexed returns the object of what Keep wrote and its index (nil: none).
func (jj *JoinJudge) keptIndexed(kept []byte) ([]byte, []member) {
	u := jj.Kept(kept)
	enc := kept[len(u) : len(kept)-4]
	if len(enc) == 0 {
		return u, nil
	}
	jj.uidx = jj.uidx[:0]
	for ; len(enc) >= 16; enc = enc[16:] {
		ks := binary.LittleEndian.Uint32(enc)
		jj.uidx = append(jj.uidx, member{ks: int32(ks &^ (1 << 31)), ke: int32(binary.LittleEndian.Uint32(enc[4:])),
			vs: int32(binary.LittleEndian.Uint32(enc[8:])), ve: int32(binary.LittleEndian.Uint32(enc[12:])), esc: ks>>31 == 1})
	}
	return u, jj.uidx
}

// Pair reports whether the pair of in (Project's input of the other side, after its tag: its
// side byte, then the record projected from rec, the decoded record) and the key's unique
// record, of which kept is what Keep wrote and ulen the whole record's length, would not be written at
// the fold: f drops its row, or the where does not hold (JudgeWhere's judge asks the where
// alone, not f). judged false: it cannot tell. It
// pairs rec as it is, with its index, where the fold pairs in: the where and the columns read
// only members that Project keeps, as they are.
func (jj *JoinJudge) Pair(f ResultFilter, key, in []byte, rec *Record, kept []byte, ulen int) (drop, judged bool) {
	j := jj.j
	if len(in) < 1 || int(in[0]) == j.unique || in[0] > sideRight {
		return false, false
	}
	v, vlen := in[1:], len(in)-1
	idx, err := rec.index()
	if err == nil {
		v = rec.Value
	} else {
		idx = nil
	}
	u, uidx := jj.keptIndexed(kept)
	if jj.where {
		if j.unique == sideLeft {
			return j.sel.fails(key, j.left, u, uidx, j.right, v, idx), true
		}
		return j.sel.fails(key, j.left, v, idx, j.right, u, uidx), true
	}
	if j.unique == sideLeft {
		return j.sel.judge(f, key, j.left, u, ulen, uidx, j.right, v, vlen, idx)
	}
	return j.sel.judge(f, key, j.left, v, vlen, idx, j.right, u, ulen, uidx)
}

// Attributes: the join sorts its input in backlog (by key) and emits as pairs complete.
func (j *RegularJoin) Attributes() Attributes {
	return Attributes{InternalSorter: true, OutputOnCheckpoint: true}
}

// Layout: the kind, the sides and which is unique. Version 2 is the state with a trailer of
// links per record (version 1 had a header of side and length: each record rewrote the key's
// whole state).
func (j *RegularJoin) Layout() Layout {
	unique := "none"
	switch j.unique {
	case sideLeft:
		unique = j.left
	case sideRight:
		unique = j.right
	}
	l := Layout{Kind: "regular-join", Version: 2, Parts: []string{
		LayoutPart("sides", "list", j.left, j.right),
		LayoutPart("unique", "side", unique),
	}}
	if j.keep[sideLeft] == nil && j.keep[sideRight] == nil {
		return l
	}
	// Its records keep only the members the select reads: a state of whole records (a join
	// without this part) reads the same; one that kept other members does not.
	var kept []string
	for side, name := range [2]string{j.left, j.right} {
		if j.keep[side] == nil {
			kept = append(kept, name) // whole
		}
		for _, m := range j.keep[side] {
			kept = append(kept, name+"."+m)
		}
	}
	slices.Sort(kept)
	whole := l
	l.Parts = append(slices.Clip(l.Parts), LayoutPart("kept", "members", kept...))
	l.Accepts = []Layout{whole}
	return l
}

// Project appends the side of input (0 left, 1 right) and the record's value.
func (j *RegularJoin) Project(input int, r *Record, dst []byte) ([]byte, error) {
	if r.Key == nil {
		return dst, &Error{Operator: j.name, Reason: reasonNoKey}
	}
	if input != sideLeft && input != sideRight {
		return dst, fmt.Errorf("operators: join %s: input %d", j.name, input)
	}
	dst = append(dst, byte(input))
	if keep := j.keep[input]; keep != nil {
		if idx, err := r.index(); err == nil {
			return appendMembers(dst, r.Value, idx, keep), nil
		}
	}
	return append(dst, r.Value...), nil
}

// IndexRow gives r the index of its Value when that is the row the join's select wrote last
// (PairSelect.IndexRow), and reports whether it did.
func (j *RegularJoin) IndexRow(r *Record) bool { return j.sel != nil && j.sel.IndexRow(r) }

// appendMembers appends to dst the object v (whose members idx indexes) with only the members
// named in names, as v writes them and in its order.
func appendMembers(dst, v []byte, idx []member, names []string) []byte {
	dst = append(dst, '{')
	first := true
	for _, m := range idx {
		if !keptName(v[m.ks:m.ke], m.esc, names) {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, '"')
		dst = append(dst, v[m.ks:m.ke]...)
		dst = append(dst, '"', ':')
		dst = append(dst, v[m.vs:m.ve]...)
	}
	return append(dst, '}')
}

// keptName reports whether the member name raw (escaped if esc) is one of names. It is asked of
// every member of every record a join keeps in part: a plain name is compared as it is, its
// length first.
func keptName(raw []byte, esc bool, names []string) bool {
	if esc {
		return slices.ContainsFunc(names, func(n string) bool { return nameEquals(raw, true, n) })
	}
	for _, n := range names {
		if len(n) == len(raw) && string(raw) == n {
			return true
		}
	}
	return false
}

// IsLate: never (a regular join does not use event time).
func (j *RegularJoin) IsLate(int, int64, int64) bool { return false }

// Process emits the record's pairs with the key's records of the other side and keeps it (or,
// with a unique side, keeps only what may still pair). It reads the trailers of the state's
// last record and of the other side's records, and appends the record's bytes.
func (j *RegularJoin) Process(ctx Context, key []byte, _ int64, in []byte) error {
	if len(in) < 1 || in[0] > sideRight {
		return fmt.Errorf("operators: join %s: bad input", j.name)
	}
	side, value := in[0], in[1:]
	st := ctx.State()
	if uint64(len(st))+uint64(len(value))+rjTrailer > 1<<32-1 {
		return fmt.Errorf("operators: join %s: key %q: state over 4 GiB", j.name, key)
	}
	var last [2]uint32 // the end of each side's last record (0: none)
	if len(st) > 0 {
		e, ok := rjRead(st, uint32(len(st)))
		if !ok {
			return fmt.Errorf("operators: join %s: key %q: corrupt state", j.name, key)
		}
		last[e.side], last[1-e.side] = uint32(len(st)), e.lastOther
	}
	have := j.unique >= 0 && last[j.unique] != 0
	if int(side) == j.unique && have {
		return nil // the unique side's record of the key came already
	}
	// The other side's records, last first, then emitted in arrival order.
	j.ends = j.ends[:0]
	for end := last[1-side]; end != 0; {
		e, ok := rjRead(st, end)
		if !ok || e.side != 1-side || e.prevSame >= end {
			return fmt.Errorf("operators: join %s: key %q: corrupt state", j.name, key)
		}
		j.ends = append(j.ends, end)
		end = e.prevSame
	}
	for i := len(j.ends) - 1; i >= 0; i-- {
		end := j.ends[i]
		l := binary.BigEndian.Uint32(st[end-rjTrailer+1:])
		if err := j.emit(ctx, key, side, value, st[end-rjTrailer-l:end-rjTrailer]); err != nil {
			return err
		}
	}
	switch {
	case int(side) == j.unique:
		// The unique record joined the waiting ones; it alone stays.
		ctx.Put(j.entry(side, value, 0, 0))
	case have:
		// Joined the unique record; nothing else can pair with it.
	default:
		ctx.Append(j.entry(side, value, last[side], last[1-side]))
	}
	return nil
}

// entry returns a record's bytes and trailer (in j.st, until the next call).
func (j *RegularJoin) entry(side byte, value []byte, prevSame, lastOther uint32) []byte {
	st := append(j.st[:0], value...)
	st = append(st, side)
	st = binary.BigEndian.AppendUint32(st, uint32(len(value)))
	st = binary.BigEndian.AppendUint32(st, prevSame)
	j.st = binary.BigEndian.AppendUint32(st, lastOther)
	return j.st
}

// rjRead reads the trailer of the record of st that ends at end; false if it does not fit in
// st or names no side.
func rjRead(st []byte, end uint32) (rjEntry, bool) {
	if end < rjTrailer || uint64(end) > uint64(len(st)) {
		return rjEntry{}, false
	}
	t := st[end-rjTrailer : end]
	l := binary.BigEndian.Uint32(t[1:])
	if t[0] > sideRight || l > end-rjTrailer {
		return rjEntry{}, false
	}
	return rjEntry{side: t[0], start: end - rjTrailer - l, prevSame: binary.BigEndian.Uint32(t[5:]),
		lastOther: binary.BigEndian.Uint32(t[9:])}, true
}

// emit emits the pair of a record of side and a record of the other side (its select's
// columns, with one).
func (j *RegularJoin) emit(ctx Context, key []byte, side byte, value, other []byte) error {
	l, r := value, other
	if side == sideRight {
		l, r = other, value
	}
	_, err := emitPair(ctx, j.sel, &j.out, &j.names, key, j.left, l, j.right, r, true)
	return err
}

// OnTimer is never called (the operator sets no timer).
func (j *RegularJoin) OnTimer(Context, []byte, int64) error { return nil }

// ValidState reports whether b is a state of this join: records that tile it from its start,
// each trailer's links naming the records Process would have linked (its side's previous record
// and the other side's last), and with a unique side, either that side's one record alone or
// only the other side's records.
func (j *RegularJoin) ValidState(b []byte) bool {
	if len(b) == 0 || uint64(len(b)) > 1<<32-1 {
		return false
	}
	// The records, last first, by their ends.
	var ends []uint32
	for end := uint32(len(b)); end > 0; {
		e, ok := rjRead(b, end)
		if !ok {
			return false
		}
		ends = append(ends, end)
		end = e.start
	}
	var last [2]uint32
	uniques := 0
	for i := len(ends) - 1; i >= 0; i-- {
		e, _ := rjRead(b, ends[i])
		if e.prevSame != last[e.side] || e.lastOther != last[1-e.side] {
			return false
		}
		last[e.side] = ends[i]
		if int(e.side) == j.unique {
			uniques++
		}
	}
	return j.unique < 0 || uniques == 0 || uniques == 1 && len(ends) == 1
}
