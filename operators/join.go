package operators

import (
	"bytes"
	"fmt"

	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/operators/internal/jsonstr"
)

// Rows is a table partition as a join sees it: the latest row (a JSON object) of a key.
// operators/task serves it from the state store.
type Rows interface {
	// Row appends key's row to dst and returns it, or ok=false if the table has no row for key.
	// An error is a failure of the store, not of the record.
	Row(key, dst []byte) (row []byte, ok bool, err error)
}

// join is the stream-table join of a chain (as_of processing): the record gets its key's
// latest row under the table's name.
type join struct {
	name, table string
	left        bool
	rows        Rows
	row         []byte // scratch
	field       []byte // "<table>": the member name, JSON-quoted
}

// NewJoin returns the stage that joins each record with its key's row in rows, as the join
// operator name configures it. The stage is not safe for concurrent use (one per task).
//
// The record's value gets the row under the table's name, as its last member ({...,
// "customers": {...}}); a member of that name already in the record is replaced. An inner join
// drops a record whose key has no row; a left join sets the member to null. Errors of rows are
// returned as they are (a task failure); a record whose value cannot be rewritten is an *Error.
func NewJoin(name string, cfg configs.Join, rows Rows) (Stage, error) {
	switch cfg.Type {
	case "", configs.JoinInner, configs.JoinLeft:
	default:
		return nil, fmt.Errorf("operators: join %s: unknown type %q", name, cfg.Type)
	}
	if cfg.AsOf != "" && cfg.AsOf != "processing" {
		return nil, fmt.Errorf("operators: join %s: as_of %q is not supported", name, cfg.AsOf)
	}
	return &join{name: name, table: cfg.Table, left: cfg.Type == configs.JoinLeft, rows: rows,
		field: jsonstr.AppendString(nil, cfg.Table)}, nil
}

func (j *join) Name() string { return j.name }

func (j *join) Apply(r *Record) (bool, error) {
	row, ok, err := j.rows.Row(r.Key, j.row[:0])
	if err != nil {
		return false, fmt.Errorf("operators: join %s: table %s: %w", j.name, j.table, err)
	}
	j.row = row
	if !ok {
		if !j.left {
			return false, nil
		}
		row = append(row[:0], "null"...)
	}
	idx, err := r.index()
	if err != nil {
		return false, &Error{Operator: j.name, Reason: err.Error()}
	}
	val := r.Value
	out := append(r.scratchValue(), '{')
	for _, m := range idx {
		if nameEquals(val[m.ks:m.ke], m.esc, j.table) {
			continue // replaced by the row
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, val[m.ks-1:m.ke+1]...)
		out = append(out, ':')
		out = append(out, val[m.vs:m.ve]...)
	}
	if len(out) > 1 {
		out = append(out, ',')
	}
	out = append(out, j.field...)
	out = append(out, ':')
	out = append(out, row...)
	out = append(out, '}')
	if err := r.setValue(out); err != nil {
		return false, &Error{Operator: j.name, Reason: fmt.Sprintf("joined value: %v", err)}
	}
	return true, nil
}

// pairNames is the side names of a join's pairs as appendPair writes them, each a JSON string
// and its colon, made again only when the names change (a join's are its own for ever).
type pairNames struct {
	left, right string
	enc         [2][]byte
	esc         [2]bool // the name has a backslash escape
}

// of returns n encoding left and right.
func (n *pairNames) of(left, right string) *pairNames {
	if n.enc[0] == nil || left != n.left || right != n.right {
		n.left, n.right = left, right
		for side, name := range [2]string{left, right} {
			n.enc[side] = append(jsonstr.AppendString(n.enc[side][:0], name), ':')
			n.esc[side] = bytes.IndexByte(n.enc[side], '\\') >= 0
		}
	}
	return n
}

// appendPair appends the joined record {left: l, right: r} of a stream-stream join to dst (a
// nil side is null) and returns it with idx, the index of its two members; names caches the
// side names' encoding.
func appendPair(dst []byte, idx []member, names *pairNames, left string, l []byte, right string, r []byte) ([]byte, []member) {
	idx = idx[:0]
	names = names.of(left, right)
	out := append(dst, '{')
	for side, enc := range names.enc {
		v := l
		if side == 1 {
			out, v = append(out, ','), r
		}
		m := member{ks: int32(len(out) + 1), ke: int32(len(out) + len(enc) - 2), esc: names.esc[side]}
		out = append(out, enc...)
		m.vs = int32(len(out))
		if v == nil {
			out = append(out, "null"...)
		} else {
			out = append(out, v...)
		}
		m.ve = int32(len(out))
		idx = append(idx, m)
	}
	return append(out, '}'), idx
}

// emitPair emits the pair {left: l, right: r} as emitJoined does, building the joined record in
// *buf; with sel, its index comes with it, so the where and the columns read it without parsing
// it again. It reports whether it emitted it: false when sel's where does not hold for the pair.
//
// anyOK: the caller does not read the result (see PairSelect.pair).
func emitPair(ctx Context, sel *PairSelect, buf *[]byte, names *pairNames, key []byte, left string, l []byte, right string, r []byte, anyOK bool) (bool, error) {
	if sel == nil {
		*buf, _ = appendPair((*buf)[:0], nil, names, left, l, right, r)
		ctx.Emit(*buf)
		return true, nil
	}
	f, _ := ctx.(ResultFilter)
	row, ok, err := sel.pair(f, key, left, l, right, r, anyOK)
	if err != nil {
		return false, fmt.Errorf("operators: join: joined record: %w", err)
	}
	if row != nil {
		ctx.Emit(row)
	}
	return ok, nil
}

// emitJoined emits a join's joined record, or with sel, its columns (a column that fails is
// null, so a record's pairs are emitted all or none: they are made from the join's state, and
// a dead letter of the record would leave those emitted before the failing one). An error is
// a joined record that is not a JSON object, a bug of the join: the task fails and its
// transaction, with the pairs emitted so far, aborts.
func emitJoined(ctx Context, sel *PairSelect, key, joined []byte) error {
	if sel == nil {
		ctx.Emit(joined)
		return nil
	}
	row, err := sel.Row(key, joined)
	if err != nil {
		return fmt.Errorf("operators: join: joined record: %w", err)
	}
	ctx.Emit(row)
	return nil
}
