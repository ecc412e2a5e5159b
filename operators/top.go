package operators

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/operators/internal/jsonstr"
)

// Top keeps, per key, the n records with the largest (order: desc) or smallest (asc) value of a
// numeric field, ranked 1 to n; records of equal value rank in arrival order (the earlier one
// first), as Flink's ROW_NUMBER() OVER (PARTITION BY key ORDER BY by DESC) <= n with arrival as
// the tie-break. Its output is an upsert stream of rows: each rank of a key is one Kafka key,
// {"key":"<key>","<rank>":r} (or, for a composite group_by key, its columns and the rank), whose
// latest value is the record at that rank with the rank column added (omit_rank: the record
// alone). A record entering the top moves the ranks below it down, so those rows change too; the
// input only grows, so a rank once filled stays filled and no row is ever deleted.
//
// It is a Keyed operator and an Updater: Process ranks the record into the key's state and
// marks the ranks that changed; Flush writes them at the checkpoint, at most once per rank per
// commit. Backlog mode replays each key's records in arrival order, so both modes give the same
// rows. State: a version byte, the first changed rank (0-based; n when none), the number of
// rows, then per row its value as a decimal (16 bytes) and its record (4-byte length, bytes).
// Not safe for concurrent use; Layout, ValidState, GatherRow and IsLate are.
type Top struct {
	name string
	n    int
	by   path
	desc bool
	rank string // the rank column's name
	// omitRank: rows are the records without the rank column (configs.Top.OmitRank).
	omitRank bool
	// outputLog: its rows are its changelog (configs.Top.Changelog output; GatherRow).
	outputLog bool

	rows []topRow // decoded state, scratch
	st   []byte
	out  []byte
	key  []byte
}

type topRow struct {
	v   dec
	rec []byte
}

const topVersion = 1

// NewTop compiles a top-N operator; cfg must have been validated.
func NewTop(name string, cfg configs.Top) (*Top, error) {
	if cfg.N < 1 || cfg.N > 1<<15 {
		return nil, fmt.Errorf("operators: top %s: n must be 1 to %d", name, 1<<15)
	}
	by, err := checkedPath(cfg.By)
	if err != nil {
		return nil, fmt.Errorf("operators: top %s: by: %w", name, err)
	}
	t := &Top{name: name, n: cfg.N, by: by, desc: cfg.Order != configs.OrderAsc, rank: cfg.Rank, omitRank: cfg.OmitRank, outputLog: cfg.OutputChangelog()}
	if t.rank == "" {
		t.rank = "rank"
	}
	return t, nil
}

// Name returns the operator name.
func (t *Top) Name() string { return t.name }

// Attributes: the operator sorts its input in backlog (by key) and writes at checkpoints.
func (t *Top) Attributes() Attributes {
	return Attributes{InternalSorter: true, OutputOnCheckpoint: true}
}

// Layout: the kind, n and the order.
func (t *Top) Layout() Layout {
	order := configs.OrderAsc
	if t.desc {
		order = configs.OrderDesc
	}
	l := Layout{Kind: "top", Version: topVersion, Parts: []string{
		LayoutPart("n", "count", strconv.Itoa(t.n)),
		LayoutPart("by", order, t.by.text),
	}}
	if t.outputLog {
		// The stored offsets are the output topic's; a restore reads rows, not states.
		if t.omitRank {
			l.Parts = append(l.Parts, LayoutPart("changelog", "output"))
		} else {
			l.Parts = append(l.Parts, LayoutPart("changelog", "output", t.rank))
		}
	}
	return l
}

// OutputChangelog reports whether its rows are its changelog (configs.Top.Changelog output),
// which a restore gathers back into states with GatherRow.
func (t *Top) OutputChangelog() bool { return t.outputLog }

// Project appends the record's value of the by field (16 bytes) and its JSON; a record without
// a key, or whose field is missing or not a number, is an *Error.
func (t *Top) Project(_ int, r *Record, dst []byte) ([]byte, error) {
	if r.Key == nil {
		return dst, &Error{Operator: t.name, Reason: reasonNoKey}
	}
	raw, ok, err := r.lookup(t.by)
	switch {
	case err != nil:
		return dst, &Error{Operator: t.name, Reason: err.Error()}
	case !ok:
		return dst, &Error{Operator: t.name, Reason: fmt.Sprintf("field %q missing", t.by.text)}
	case raw[0] != '-' && (raw[0] < '0' || raw[0] > '9'):
		return dst, &Error{Operator: t.name, Reason: fmt.Sprintf("field %q is %s, want a number", t.by.text, kindOf(raw[0]))}
	}
	v, err := parseDecimal(raw)
	if err != nil {
		return dst, &Error{Operator: t.name, Reason: fmt.Sprintf("field %q: %s: %s", t.by.text, raw, reason(err))}
	}
	dst = binary.LittleEndian.AppendUint64(dst, v.lo)
	dst = binary.LittleEndian.AppendUint64(dst, v.hi)
	return append(dst, r.Value...), nil
}

// IsLate: never (the operator does not use event time).
func (t *Top) IsLate(int, int64, int64) bool { return false }

// Process ranks one record into the key's rows.
func (t *Top) Process(ctx Context, key []byte, _ int64, in []byte) error {
	if len(in) < 2*8 {
		return fmt.Errorf("operators: %s: projected input of %d bytes", t.name, len(in))
	}
	changed, ok := t.decode(ctx.State())
	if !ok {
		return fmt.Errorf("operators: %s: key %q: stored state is not a top state", t.name, key)
	}
	v := loadDec(in)
	// The first row the record beats: equal values keep their arrival order.
	at := len(t.rows)
	for i, r := range t.rows {
		if c := v.cmp(r.v); t.desc && c > 0 || !t.desc && c < 0 {
			at = i
			break
		}
	}
	if at >= t.n {
		return nil // below the top
	}
	t.rows = append(t.rows, topRow{})
	copy(t.rows[at+1:], t.rows[at:])
	t.rows[at] = topRow{v: v, rec: in[16:]}
	if len(t.rows) > t.n {
		t.rows = t.rows[:t.n]
	}
	ctx.Put(t.encode(min(changed, at)))
	return nil
}

// OnTimer is never called (the operator sets no timer).
func (t *Top) OnTimer(Context, []byte, int64) error { return nil }

// Updates reports that the operator writes updates.
func (t *Top) Updates() bool { return true }

// Flush writes the rows whose rank changed since the last Flush.
func (t *Top) Flush(ctx Context, key []byte) error {
	changed, ok := t.decode(ctx.State())
	if !ok {
		return fmt.Errorf("operators: %s: key %q: stored state is not a top state", t.name, key)
	}
	if changed >= len(t.rows) {
		return nil
	}
	for i := changed; i < len(t.rows); i++ {
		t.key = t.rowKey(t.key[:0], key, i+1)
		t.out = t.rowValue(t.out[:0], t.rows[i].rec, i+1)
		ctx.EmitKey(t.key, t.out)
	}
	ctx.Put(t.encode(t.n))
	return nil
}

// rowKey appends the Kafka key of rank r of key: a composite key's columns and the rank, or
// {"key":"<key>","<rank>":r}.
func (t *Top) rowKey(dst, key []byte, r int) []byte {
	if len(key) > 2 && key[0] == '{' && key[len(key)-1] == '}' {
		dst = append(dst, key[:len(key)-1]...)
	} else {
		dst = jsonstr.AppendBytes(append(dst, `{"key":`...), key)
	}
	dst = jsonstr.AppendString(append(dst, ','), t.rank)
	return append(strconv.AppendInt(append(dst, ':'), int64(r), 10), '}')
}

// rowValue appends the record with the rank column added (the record is a JSON object), or
// the record alone with omitRank.
func (t *Top) rowValue(dst, rec []byte, r int) []byte {
	if t.omitRank {
		return append(dst, rec...)
	}
	body := bytes.TrimRight(rec, " \t\r\n")
	if len(body) < 2 || body[len(body)-1] != '}' {
		return append(dst, rec...) // not an object: the source decodes only objects
	}
	dst = append(dst, body[:len(body)-1]...)
	if len(bytes.TrimSpace(body[1:len(body)-1])) > 0 {
		dst = append(dst, ',')
	}
	dst = jsonstr.AppendString(dst, t.rank)
	return append(strconv.AppendInt(append(dst, ':'), int64(r), 10), '}')
}

// ValidState reports whether b is a state of this operator (one a restore is gathering, with
// ranks still missing, too).
func (t *Top) ValidState(b []byte) bool {
	_, ok := t.decodeInto(b, nil)
	return ok
}

// decode loads a state into t.rows (empty for none) and returns its first changed rank. A state
// with a rank missing (a restore from rows that did not give every rank back) is not ok.
func (t *Top) decode(b []byte) (changed int, ok bool) {
	t.rows = t.rows[:0]
	if len(b) == 0 {
		return t.n, true
	}
	if changed, ok = t.decodeInto(b, &t.rows); !ok {
		return 0, false
	}
	for _, r := range t.rows {
		if len(r.rec) == 0 {
			return 0, false
		}
	}
	return changed, true
}

// GatherRow appends to dst the state old (a state of key, or empty for none) with the row
// (rowKey, row) that Flush wrote for key put back at its rank: the inverse of Flush, for a
// restore from the output topic (changelog: output), which applies each key's latest row per
// rank in any order. Ranks not gathered yet are missing (a record of length 0, which decode
// refuses). The record is row without the rank column; a row that Flush would not have written
// for key is an error.
func (t *Top) GatherRow(key, rowKey, row, old, dst []byte) ([]byte, error) {
	// The rank: rowKey ends with ,"<rank>":r}.
	end := len(rowKey) - 1
	colon := bytes.LastIndexByte(rowKey, ':')
	if end < 0 || rowKey[end] != '}' || colon < 0 {
		return dst, fmt.Errorf("key %q is not a row key of top %s", rowKey, t.name)
	}
	r, err := strconv.Atoi(string(rowKey[colon+1 : end]))
	if err != nil || r < 1 || r > t.n || !bytes.Equal(t.rowKey(nil, key, r), rowKey) {
		return dst, fmt.Errorf("key %q is not a row key of top %s for key %q (ranks 1 to %d)", rowKey, t.name, key, t.n)
	}
	// The record: row without its last column, the rank (with omitRank, row itself).
	rec := row
	if !t.omitRank {
		suffix := strconv.AppendInt(append(jsonstr.AppendString(nil, t.rank), ':'), int64(r), 10)
		suffix = append(suffix, '}')
		body, ok := bytes.CutSuffix(row, suffix)
		if !ok || len(body) == 0 || body[0] != '{' {
			return dst, fmt.Errorf("row %q of key %q does not end with its rank column %s", row, rowKey, suffix)
		}
		body = bytes.TrimSuffix(body, []byte{','})
		rec = append(append(make([]byte, 0, len(body)+1), body...), '}')
	} else if len(row) == 0 || row[0] != '{' {
		return dst, fmt.Errorf("row %q of key %q is not a JSON object", row, rowKey)
	}
	if !bytes.Equal(t.rowValue(nil, rec, r), row) {
		return dst, fmt.Errorf("row %q of key %q is not one this config writes", row, rowKey)
	}
	in, err := t.Project(0, &Record{Key: key, Value: rec}, nil)
	if err != nil {
		return dst, fmt.Errorf("row %q of key %q: %w", row, rowKey, err)
	}
	var rows []topRow
	if len(old) > 0 {
		if _, ok := t.decodeInto(old, &rows); !ok {
			return dst, fmt.Errorf("key %q: stored state is not a top state", key)
		}
	}
	for len(rows) < r {
		rows = append(rows, topRow{})
	}
	rows[r-1] = topRow{v: loadDec(in), rec: in[16:]}
	return appendTopState(dst, rows, t.n), nil // nothing of it is due: the rows are written
}

func (t *Top) decodeInto(b []byte, rows *[]topRow) (int, bool) {
	if len(b) < 5 || b[0] != topVersion {
		return 0, false
	}
	changed, n := int(binary.LittleEndian.Uint16(b[1:])), int(binary.LittleEndian.Uint16(b[3:]))
	if changed > t.n || n > t.n {
		return 0, false
	}
	b = b[5:]
	for range n {
		if len(b) < 20 {
			return 0, false
		}
		v := loadDec(b)
		l := int(binary.LittleEndian.Uint32(b[16:]))
		if l > len(b)-20 {
			return 0, false
		}
		if rows != nil {
			*rows = append(*rows, topRow{v: v, rec: b[20 : 20+l]})
		}
		b = b[20+l:]
	}
	return changed, len(b) == 0
}

// encode writes t.rows with the first changed rank into a new state (t.st, reused).
func (t *Top) encode(changed int) []byte {
	t.st = appendTopState(t.st[:0], t.rows, changed)
	return t.st
}

// appendTopState appends the state of rows with the first changed rank to dst.
func appendTopState(dst []byte, rows []topRow, changed int) []byte {
	st := append(dst, topVersion)
	st = binary.LittleEndian.AppendUint16(st, uint16(changed))
	st = binary.LittleEndian.AppendUint16(st, uint16(len(rows)))
	for _, r := range rows {
		st = binary.LittleEndian.AppendUint64(st, r.v.lo)
		st = binary.LittleEndian.AppendUint64(st, r.v.hi)
		st = binary.LittleEndian.AppendUint32(st, uint32(len(r.rec)))
		st = append(st, r.rec...)
	}
	return st
}
