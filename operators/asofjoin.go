package operators

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/operators/internal/jsonstr"
)

// AsOfJoin is the stream-table join as of event time (configs.Join with as_of: event_time): a
// stream record at t joins the version of its key's table row that was valid at t, the last one
// with a time at or before t (a tombstone version: no row).
//
// It is a Keyed operator of two inputs, the stream (input 0) and the table's topic read as a
// stream of versions (input 1). A stream record is held until the operator's watermark (the
// smaller of the two inputs') has passed t, then emitted; a table version at ts is late when
// the table's watermark had already passed ts when it arrived. So every version a stream record
// can see has arrived before the record is emitted, whatever the interleaving of the inputs, and
// the answer is the same in both modes. Versions older than the watermark minus versions are
// dropped, except the last of them (still valid after it); a stream record older than the
// stream's watermark minus versions is late.
//
// State per key: the versions in time order (time, then value) and the held stream records in
// time order; the key's timer is the earliest held record's time + 1. An AsOfJoin belongs to one
// task and is not safe for concurrent use; Layout, ValidState and IsLate are.
type AsOfJoin struct {
	name, table string
	left        bool
	keep        int64 // versions: ms kept behind the watermark
	field       []byte
	sel         *PairSelect

	vers []asofVersion
	held []asofRecord
	st   []byte
	out  []byte
}

type asofVersion struct {
	ts    int64
	tomb  bool
	value []byte
}

type asofRecord struct {
	ts    int64
	value []byte
}

// AsOf inputs.
const (
	asofStream = 0
	asofTable  = 1
)

// NewAsOfJoin compiles a stream-table join as of event time; versions is how long the table
// keeps superseded versions behind the watermark.
func NewAsOfJoin(name string, cfg configs.Join, versions int64) (*AsOfJoin, error) {
	sel, err := NewPairSelect(name, cfg.Columns(), "")
	if err != nil {
		return nil, err
	}
	j := &AsOfJoin{name: name, table: cfg.Table, keep: versions, field: jsonstr.AppendString(nil, cfg.Table), sel: sel}
	switch cfg.Type {
	case "", configs.JoinInner:
	case configs.JoinLeft:
		j.left = true
	default:
		return nil, fmt.Errorf("operators: join %s: type %q of a stream-table join", name, cfg.Type)
	}
	return j, nil
}

// Name returns the operator name.
func (j *AsOfJoin) Name() string { return j.name }

// Attributes: sorted in backlog; emits as records become final.
func (j *AsOfJoin) Attributes() Attributes {
	return Attributes{InternalSorter: true, OutputOnCheckpoint: true}
}

// Layout: the kind and the table (versions only bounds what is kept).
func (j *AsOfJoin) Layout() Layout {
	return Layout{Kind: "asof-join", Version: 1, Parts: []string{LayoutPart("table", "name", j.table)}}
}

// Project appends the input kind and the value; a table record without a value (a tombstone)
// is a version that deletes the row. A stream record must be a JSON object (it was decoded).
func (j *AsOfJoin) Project(input int, r *Record, dst []byte) ([]byte, error) {
	if r.Key == nil {
		return dst, &Error{Operator: j.name, Reason: reasonNoKey}
	}
	switch input {
	case asofStream, asofTable:
	default:
		return dst, fmt.Errorf("operators: join %s: input %d", j.name, input)
	}
	dst = append(dst, byte(input))
	return append(dst, r.Value...), nil
}

// IsLate: a table version is late when the table's watermark had passed its time; a stream
// record when the stream's watermark had passed its time + versions (the versions it would
// need may be gone).
func (j *AsOfJoin) IsLate(input int, ts, wm int64) bool {
	if input == asofTable {
		return wm > ts
	}
	return wm > satAdd(ts, j.keep)
}

// Process applies a table version, or holds (or, if the watermark has passed it, emits) a
// stream record.
func (j *AsOfJoin) Process(ctx Context, key []byte, ts int64, in []byte) error {
	if len(in) < 1 || in[0] > asofTable {
		return fmt.Errorf("operators: join %s: bad input", j.name)
	}
	if !j.decode(ctx.State()) {
		return fmt.Errorf("operators: join %s: key %q: corrupt state", j.name, key)
	}
	wm := ctx.Watermark()
	if in[0] == asofTable {
		// After the versions of the same time: the table's log order decides among them.
		v := asofVersion{ts: ts, tomb: len(in) == 1, value: in[1:]}
		i, _ := slices.BinarySearchFunc(j.vers, ts+1, func(a asofVersion, t int64) int {
			if a.ts < t {
				return -1
			}
			return 1
		})
		if ts == math.MaxInt64 {
			i = len(j.vers)
		}
		j.vers = slices.Insert(j.vers, i, v)
	} else if wm > ts {
		if err := j.emit(ctx, key, ts, in[1:]); err != nil {
			return err
		}
	} else {
		r := asofRecord{ts: ts, value: in[1:]}
		i, _ := slices.BinarySearchFunc(j.held, r, compareHeld)
		j.held = slices.Insert(j.held, i, r)
	}
	j.store(ctx, wm)
	return nil
}

// OnTimer emits the held records the watermark has passed.
func (j *AsOfJoin) OnTimer(ctx Context, key []byte, at int64) error {
	if !j.decode(ctx.State()) {
		return fmt.Errorf("operators: join %s: key %q: corrupt state", j.name, key)
	}
	wm := ctx.Watermark()
	n := 0
	for _, r := range j.held {
		if wm > r.ts {
			if err := j.emit(ctx, key, r.ts, r.value); err != nil {
				return err
			}
			n++
		}
	}
	j.held = j.held[n:]
	j.store(ctx, wm)
	return nil
}

// emit writes a stream record joined with the version valid at ts (its select's columns, with
// one).
func (j *AsOfJoin) emit(ctx Context, key []byte, ts int64, value []byte) error {
	var row []byte
	i, _ := slices.BinarySearchFunc(j.vers, asofVersion{ts: ts, value: nil}, func(a, b asofVersion) int {
		if a.ts <= b.ts {
			return -1
		}
		return 1
	})
	if i > 0 && !j.vers[i-1].tomb {
		row = j.vers[i-1].value
	}
	if row == nil && !j.left {
		return nil
	}
	out := append(j.out[:0], '{')
	var r Record
	r.Value = value
	idx, err := r.index()
	if err != nil {
		return fmt.Errorf("operators: join %s: held record: %w", j.name, err) // decoded before
	}
	for _, m := range idx {
		if nameEquals(value[m.ks:m.ke], m.esc, j.table) {
			continue
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, value[m.ks-1:m.ke+1]...)
		out = append(out, ':')
		out = append(out, value[m.vs:m.ve]...)
	}
	if len(out) > 1 {
		out = append(out, ',')
	}
	out = append(out, j.field...)
	out = append(out, ':')
	if row == nil {
		out = append(out, "null"...)
	} else {
		out = append(out, row...)
	}
	j.out = append(out, '}')
	return emitJoined(ctx, j.sel, key, j.out)
}

// store prunes old versions, writes the state and sets the timer (the earliest held record).
func (j *AsOfJoin) store(ctx Context, wm int64) {
	if wm != math.MinInt64 && j.keep >= 0 {
		bound := wm - j.keep
		// Keep the last version at or before the bound (valid after it) and every later one;
		// held records older than the bound still need theirs, so the bound is at most theirs.
		if len(j.held) > 0 {
			bound = min(bound, j.held[0].ts)
		}
		drop := 0
		for drop+1 < len(j.vers) && j.vers[drop+1].ts <= bound {
			drop++
		}
		j.vers = j.vers[drop:]
	}
	if len(j.vers) == 0 && len(j.held) == 0 {
		ctx.Delete()
		return
	}
	st := binary.BigEndian.AppendUint32(j.st[:0], uint32(len(j.vers)))
	for _, v := range j.vers {
		flag := byte(0)
		if v.tomb {
			flag = 1
		}
		st = append(st, flag)
		st = binary.BigEndian.AppendUint64(st, uint64(v.ts))
		st = binary.BigEndian.AppendUint32(st, uint32(len(v.value)))
		st = append(st, v.value...)
	}
	st = binary.BigEndian.AppendUint32(st, uint32(len(j.held)))
	for _, r := range j.held {
		st = binary.BigEndian.AppendUint64(st, uint64(r.ts))
		st = binary.BigEndian.AppendUint32(st, uint32(len(r.value)))
		st = append(st, r.value...)
	}
	j.st = st
	ctx.Put(st)
	if len(j.held) > 0 {
		ctx.SetTimer(satAdd(j.held[0].ts, 1))
	} else {
		ctx.ClearTimer()
	}
}

func (j *AsOfJoin) decode(st []byte) bool {
	j.vers, j.held = j.vers[:0], j.held[:0]
	if len(st) == 0 {
		return true
	}
	p := st
	if len(p) < 4 {
		return false
	}
	n := int(binary.BigEndian.Uint32(p))
	p = p[4:]
	for range n {
		if len(p) < 13 || p[0] > 1 {
			return false
		}
		v := asofVersion{tomb: p[0] == 1, ts: int64(binary.BigEndian.Uint64(p[1:]))}
		l := int(binary.BigEndian.Uint32(p[9:]))
		if len(p) < 13+l {
			return false
		}
		v.value = p[13 : 13+l]
		p = p[13+l:]
		j.vers = append(j.vers, v)
	}
	if len(p) < 4 {
		return false
	}
	n = int(binary.BigEndian.Uint32(p))
	p = p[4:]
	for range n {
		if len(p) < 12 {
			return false
		}
		r := asofRecord{ts: int64(binary.BigEndian.Uint64(p))}
		l := int(binary.BigEndian.Uint32(p[8:]))
		if len(p) < 12+l {
			return false
		}
		r.value = p[12 : 12+l]
		p = p[12+l:]
		j.held = append(j.held, r)
	}
	return len(p) == 0
}

// ValidState reports whether b is a state of this join.
func (j *AsOfJoin) ValidState(b []byte) bool {
	var c AsOfJoin
	return c.decode(b) && (len(b) == 0 || len(c.vers)+len(c.held) > 0) &&
		slices.IsSortedFunc(c.vers, func(a, b asofVersion) int { return cmp.Compare(a.ts, b.ts) }) && slices.IsSortedFunc(c.held, compareHeld)
}

func compareHeld(a, b asofRecord) int {
	switch {
	case a.ts < b.ts:
		return -1
	case a.ts > b.ts:
		return 1
	}
	return bytes.Compare(a.value, b.value)
}
