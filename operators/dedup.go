package operators

import (
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/sluice-dev/sluice/configs"
)

// Dedup keeps one record per key, in the order the key's records arrived (offset order):
//
//   - keep: first emits a key's first record once and drops the records of the key after it
//     (Flink's deduplication keeping the first row, Kafka Streams' idempotent consumer
//     pattern). With within, a key forgets its first record once the watermark passes its
//     event time + within, and a record of the key after that is a first again; a record
//     that arrives when its input's watermark has passed its own time + within is late (its
//     key may have forgotten an earlier one). Without within, a key remembers for ever.
//   - keep: last writes each key's latest record (an upsert stream: one Kafka key per key, the
//     latest value wins, as Flink's deduplication keeping the last row and Kafka Streams' KTable
//     write them), at most once per key per commit: it is an Updater, and keeps no state past
//     the commit that writes a key's record.
//
// It is a Keyed operator (the runtime replays each key's records in arrival order in backlog
// mode), so both modes give the same answer. State: keep first, a version byte and the first
// record's event time (8 bytes, big-endian); keep last, a version byte and the latest record's
// value, until its Flush. Not safe for concurrent use; Layout, ValidState and IsLate are.
type Dedup struct {
	name   string
	last   bool
	within int64 // ms; 0: keep first remembers for ever
	st     []byte
}

const dedupVersion = 1

// NewDedup compiles a dedup operator; cfg must have been validated.
func NewDedup(name string, cfg configs.Dedup) (*Dedup, error) {
	d := &Dedup{name: name, within: cfg.Within.Milliseconds()}
	switch cfg.Keep {
	case "", configs.KeepFirst:
	case configs.KeepLast:
		d.last = true
		if d.within != 0 {
			return nil, fmt.Errorf("operators: dedup %s: within applies to keep: first only", name)
		}
	default:
		return nil, fmt.Errorf("operators: dedup %s: unknown keep %q", name, cfg.Keep)
	}
	if d.within < 0 {
		return nil, fmt.Errorf("operators: dedup %s: within must not be negative", name)
	}
	return d, nil
}

// Name returns the operator name.
func (d *Dedup) Name() string { return d.name }

// Attributes: the operator sorts its input in backlog (by key); keep first emits as it goes,
// keep last at checkpoints.
func (d *Dedup) Attributes() Attributes {
	return Attributes{InternalSorter: true, OutputOnCheckpoint: true}
}

// Layout: the kind, which record it keeps and for how long.
func (d *Dedup) Layout() Layout {
	keep := configs.KeepFirst
	if d.last {
		keep = configs.KeepLast
	}
	return Layout{Kind: "dedup", Version: dedupVersion, Parts: []string{
		LayoutPart("keep", "word", keep),
		LayoutPart("within", "ms", strconv.FormatInt(d.within, 10)),
	}}
}

// ValidState reports whether b is a state of this operator.
func (d *Dedup) ValidState(b []byte) bool {
	if len(b) == 0 || b[0] != dedupVersion {
		return false
	}
	return d.last || len(b) == 9
}

// Project appends the record's value; a record without a key is an *Error.
func (d *Dedup) Project(_ int, r *Record, dst []byte) ([]byte, error) {
	if r.Key == nil {
		return dst, &Error{Operator: d.name, Reason: reasonNoKey}
	}
	return append(dst, r.Value...), nil
}

// IsLate reports whether a record at ts arriving at watermark wm is late: with within, once the
// watermark has passed ts + within, its key may have forgotten a record it duplicates.
func (d *Dedup) IsLate(_ int, ts, wm int64) bool {
	return !d.last && d.within > 0 && wm > satAdd(ts, d.within)
}

// Process keeps the key's first record (emitting it) or its latest (for Flush).
func (d *Dedup) Process(ctx Context, key []byte, ts int64, in []byte) error {
	if d.last {
		d.st = append(append(d.st[:0], dedupVersion), in...)
		ctx.Put(d.st)
		return nil
	}
	if len(ctx.State()) > 0 {
		return nil // a duplicate
	}
	d.st = binary.BigEndian.AppendUint64(append(d.st[:0], dedupVersion), uint64(ts))
	ctx.Put(d.st)
	if d.within > 0 {
		ctx.SetTimer(satAdd(ts, d.within))
	}
	ctx.Emit(in)
	return nil
}

// OnTimer forgets the key's first record (keep first with within).
func (d *Dedup) OnTimer(ctx Context, _ []byte, _ int64) error {
	ctx.Delete()
	return nil
}

// LastWins: keep last stores the key's latest record whatever it held, and emits it at Flush.
func (d *Dedup) LastWins() bool { return d.last }

// Updates reports whether the operator writes at checkpoints (keep last).
func (d *Dedup) Updates() bool { return d.last }

// Flush writes the key's latest record and forgets it.
func (d *Dedup) Flush(ctx Context, key []byte) error {
	st := ctx.State()
	if !d.ValidState(st) {
		return fmt.Errorf("operators: %s: key %q: stored state is not a dedup state", d.name, key)
	}
	ctx.Emit(st[1:])
	ctx.Delete()
	return nil
}

var _ LastWins = (*Dedup)(nil)
