package operators

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/sluice-dev/sluice/configs"
)

// Changes turns an upsert stream (the latest row per key wins, a tombstone deletes the key's
// row: an unwindowed aggregate's updates, a top's rows, a dedup's latest records, or a topic of
// rows) into its changes, as Flink's retraction messages and the Change<old, new> of Kafka
// Streams' KTable.groupBy do: when a key's row changes, it writes the row the key had, with
// "retract": true added, and then the new row; a tombstone writes only the retraction. A
// consumer that adds the rows and subtracts the retractions (an aggregate with retractions: true,
// re-keyed by another field) holds, at every commit, the aggregate of the rows the upsert stream
// holds then.
//
// It is a Keyed operator and an Updater: Process records a key's newest row (or tombstone) as
// pending; Flush, once per key per commit, writes the retraction of the published row and the
// pending one, unless they are equal bytes, and keeps the pending row as the published one. So
// a key changes at most once per commit, and backlog mode (which replays each key's records in
// arrival order) writes one change per key for the whole backlog: fewer intermediate changes
// than real time, the same rows in the end, which is all a consumer of retractions can see.
//
// State: a version byte, a flags byte (changesPublished, changesPending, changesTombstone), the
// published row's length (4 bytes, little-endian) and bytes, then the pending row's bytes. A
// row that was published stays in the state until a tombstone retracts it. Not safe for
// concurrent use; Layout, ValidState and IsLate are.
type Changes struct {
	name    string
	retract path
	st, out []byte
}

const changesVersion = 1

// Flags of a changes state.
const (
	changesPublished = 1 << iota // a published row follows the flags
	changesPending               // a change since the last Flush: the pending row (or a tombstone)
	changesTombstone             // with changesPending: the change is a tombstone
)

// Projected input: a kind byte, then the row's JSON.
const (
	changeRow       = 0
	changeTombstone = 1
)

// NewChanges compiles a changes operator; cfg must have been validated.
func NewChanges(name string, cfg configs.Changes) (*Changes, error) {
	if cfg.Input == "" {
		return nil, fmt.Errorf("operators: changes %s: no input", name)
	}
	return &Changes{name: name, retract: newPath(configs.RetractField)}, nil
}

// Name returns the operator name.
func (c *Changes) Name() string { return c.name }

// Attributes: the operator sorts its input in backlog (by key) and writes at checkpoints.
func (c *Changes) Attributes() Attributes {
	return Attributes{InternalSorter: true, OutputOnCheckpoint: true}
}

// Layout: the kind and what a state keeps.
func (c *Changes) Layout() Layout {
	return Layout{Kind: "changes", Version: changesVersion, Parts: []string{
		LayoutPart("keeps", "row", "published", "pending"),
	}}
}

// Project appends the record's row (a kind byte and its JSON), or a tombstone for a record
// without a value. A record without a key, or a row that has a retract field (the field marks
// the retractions this operator writes), is an *Error.
func (c *Changes) Project(_ int, r *Record, dst []byte) ([]byte, error) {
	if r.Key == nil {
		return dst, &Error{Operator: c.name, Reason: reasonNoKey}
	}
	if r.Value == nil {
		return append(dst, changeTombstone), nil
	}
	if _, ok, _ := r.lookup(c.retract); ok {
		return dst, &Error{Operator: c.name, Reason: fmt.Sprintf("field %q is reserved: it marks the retractions a changes operator writes", configs.RetractField)}
	}
	return append(append(dst, changeRow), r.Value...), nil
}

// IsLate: never (the operator does not use event time).
func (c *Changes) IsLate(int, int64, int64) bool { return false }

// Process records the key's newest row (or tombstone) as its pending change.
func (c *Changes) Process(ctx Context, key []byte, _ int64, in []byte) error {
	if len(in) == 0 || in[0] > changeTombstone {
		return fmt.Errorf("operators: %s: projected input of %d bytes", c.name, len(in))
	}
	st := ctx.State()
	pub, _, hasPub, ok := c.decode(st)
	if !ok {
		return fmt.Errorf("operators: %s: key %q: stored state is not a changes state", c.name, key)
	}
	row := in[1:]
	switch {
	case in[0] == changeTombstone && !hasPub:
		ctx.Delete() // no row to retract: nothing changed
		return nil
	case in[0] == changeRow && hasPub && bytes.Equal(pub, row):
		ctx.Put(c.encode(pub, true, nil, false, false)) // back to the published row
		return nil
	}
	ctx.Put(c.encode(pub, hasPub, row, true, in[0] == changeTombstone))
	return nil
}

// OnTimer is never called (the operator sets no timer).
func (c *Changes) OnTimer(Context, []byte, int64) error { return nil }

// Updates reports that the operator writes its changes at checkpoints.
func (c *Changes) Updates() bool { return true }

// Flush writes the key's change since the last Flush: the retraction of its published row, then
// its new row, which becomes the published one (a tombstone deletes the state).
func (c *Changes) Flush(ctx Context, key []byte) error {
	st := ctx.State()
	pub, pending, hasPub, ok := c.decode(st)
	if !ok {
		return fmt.Errorf("operators: %s: key %q: stored state is not a changes state", c.name, key)
	}
	if len(st) == 0 || st[1]&changesPending == 0 {
		return nil
	}
	if hasPub {
		c.out = retraction(c.out[:0], pub)
		ctx.Emit(c.out)
	}
	if st[1]&changesTombstone != 0 {
		ctx.Delete()
		return nil
	}
	ctx.Emit(pending)
	ctx.Put(c.encode(pending, true, nil, false, false))
	return nil
}

// retraction appends row (a JSON object) with "retract": true added.
func retraction(dst, row []byte) []byte {
	body := bytes.TrimRight(row, " \t\r\n")
	if len(body) < 2 || body[len(body)-1] != '}' {
		return append(dst, row...) // not an object: the source decodes only objects
	}
	dst = append(dst, body[:len(body)-1]...)
	if len(bytes.TrimSpace(body[1:len(body)-1])) > 0 {
		dst = append(dst, ',')
	}
	return append(dst, `"`+configs.RetractField+`":true}`...)
}

// ValidState reports whether b is a state of this operator.
func (c *Changes) ValidState(b []byte) bool {
	_, _, _, ok := c.decode(b)
	return ok && len(b) > 0
}

// decode splits a state (nil: none) into its published and pending rows.
func (c *Changes) decode(b []byte) (pub, pending []byte, hasPub, ok bool) {
	if len(b) == 0 {
		return nil, nil, false, true
	}
	if len(b) < 6 || b[0] != changesVersion || b[1]&^(changesPublished|changesPending|changesTombstone) != 0 {
		return nil, nil, false, false
	}
	f := b[1]
	l := int(binary.LittleEndian.Uint32(b[2:]))
	if l > len(b)-6 || f&changesPublished == 0 && l != 0 {
		return nil, nil, false, false
	}
	pub, pending = b[6:6+l], b[6+l:]
	if f&changesPending == 0 && len(pending) != 0 || f&changesTombstone != 0 && (f&changesPending == 0 || len(pending) != 0) {
		return nil, nil, false, false
	}
	return pub, pending, f&changesPublished != 0, true
}

// encode writes a state into c.st (reused) and returns it.
func (c *Changes) encode(pub []byte, hasPub bool, pending []byte, hasPending, tombstone bool) []byte {
	var f byte
	if hasPub {
		f |= changesPublished
	}
	if hasPending {
		f |= changesPending
	}
	if tombstone {
		f |= changesTombstone
		pending = nil
	}
	st := append(c.st[:0], changesVersion, f)
	st = binary.LittleEndian.AppendUint32(st, uint32(len(pub)))
	st = append(st, pub...)
	st = append(st, pending...)
	c.st = st
	return st
}
