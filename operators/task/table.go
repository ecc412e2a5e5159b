package task

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/changelog/codec"
	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/operators"
	"github.com/sluice-dev/sluice/state"
)

// A table partition (tables.<name> of the config) is materialized in the namespace
// "<name>#table" of the store: the latest row (the record value, a JSON object) of each key, a
// tombstone deleting it. The topic is its own changelog: each applied batch of records is one
// store batch that also records the next offset to read, so a task resumes the table where its
// store left it, and a fresh store reads the whole (compacted) topic. Rows are applied as they
// arrive, outside the checkpoints: a join sees them at once, and applying a record twice (after
// an abort) changes nothing.
//
// FLIP-326: a task's streams wait (the consumer keeps their partitions paused) until every
// table partition of the task has reached the end offset it had when the task started: its
// snapshot. The consumer sets that end (SetTableEnd) and resumes the streams when Waiting
// turns false.

// table is one table partition of a task.
type table struct {
	name, topic string
	src         *operators.Source
	ns          state.Namespace
	rec         operators.Record

	next      int64 // next offset to apply
	dlqFrom   int64 // the group's committed offset of the table at start: dead letters before it were produced already
	stored    int64 // the next offset the store recorded when the task started (-1: none)
	committed int64 // next offset as of the last committed checkpoint (a rewind goes back here)
	end       int64 // the snapshot: the end offset when the task started; -1 until SetTableEnd
	loaded    bool  // next reached end

	waitStart     time.Time
	rows, deletes int64 // records applied since the task started
	dead          int64

	err error // a failure of the store outside a call that returns errors (SetTableEnd); the next ProcessTable returns it
}

func newTable(name string, cfg configs.Table, partition int32, st state.Store, now time.Time, values operators.ValueDecoder) (*table, error) {
	src, err := operators.NewSourceDecoding(name, configs.Source{Topic: cfg.Topic, Format: cfg.Format, KeyFormat: cfg.KeyFormat, Key: cfg.Key}, values)
	if err != nil {
		return nil, err
	}
	tb := &table{name: name, topic: cfg.Topic, src: src, ns: codec.TableNamespace(name, partition), next: -1, committed: -1, end: -1, stored: -1, waitStart: now}
	off, ok, err := st.Offset(tb.ns)
	if err != nil {
		return nil, fmt.Errorf("table %s[%d]: %w", cfg.Topic, partition, err)
	}
	if ok {
		tb.next, tb.committed, tb.stored = off, off, off
	}
	return tb, nil
}

// rows serves a join's lookups from the table's namespace.
type rows struct {
	st state.Store
	ns state.Namespace
}

func (r rows) Row(key, dst []byte) ([]byte, bool, error) { return r.st.Get(r.ns, key, dst) }

// TableStart returns the offset the consumer must read topic's table partition from: the next
// offset the store recorded, or -1 (none: from the log start). ok is false if topic is not a
// table of the task.
func (t *Task) TableStart(topic string) (offset int64, ok bool) {
	tb := t.tables[topic]
	if tb == nil {
		return 0, false
	}
	return tb.next, true
}

// SetTableCommitted gives topic's table partition the offset the group has committed for it
// (-1: none), which moves with the table's dead letters: the table is read again from there if
// its store is ahead (the dead letters of those records were never committed), or from its log
// start if the group committed none; records before it produce no dead letter again (a store
// behind it, or a fresh one). Call it before SetTableEnd.
func (t *Task) SetTableCommitted(topic string, committed int64) {
	tb := t.tables[topic]
	if tb == nil {
		return
	}
	if committed < 0 {
		tb.next, tb.committed, tb.dlqFrom = -1, -1, 0
		return
	}
	tb.dlqFrom = committed
	if tb.next > committed {
		tb.next, tb.committed = committed, committed
	}
}

// SetTableEnd gives topic's table partition its snapshot, the end offset (last stable) it had
// when the task started, and its log start offset (where a store without an offset reads
// from). A table already at its end is loaded; else the task's streams wait (Waiting).
//
// A stored offset before the log start means records the store never saw were deleted
// (retention, DeleteRecords), tombstones among them: the rows it holds may be rows deleted
// since, so the table is dropped and read again from the log start, as a fresh store would.
// The caller must read the table from TableStart after this call.
func (t *Task) SetTableEnd(topic string, start, end int64) {
	tb := t.tables[topic]
	if tb == nil {
		return
	}
	if tb.stored >= 0 && tb.stored < start {
		t.log.Warn("table partition: records after the stored offset were deleted; reading the table again from its log start",
			"table", tb.name, "topic", tb.topic, "stored_offset", tb.stored, "log_start", start)
		tb.stored = -1
		if err := t.d.Store.Drop(tb.ns); err != nil && tb.err == nil {
			tb.err = fmt.Errorf("task %d: table %s: drop the rows before reading it again from its log start: %w", t.partition, tb.name, err)
		}
		tb.next, tb.committed = -1, -1
	}
	if tb.next < start {
		tb.next, tb.committed = start, start
	}
	tb.end = end
	if tb.next >= end && !tb.loaded {
		t.tableLoaded(tb)
	}
	t.publish()
}

// Waiting reports whether the task's streams must wait: a table partition has not loaded its
// snapshot yet (or has no snapshot end yet).
func (t *Task) Waiting() bool {
	for _, tb := range t.tables {
		if !tb.loaded {
			return true
		}
	}
	return false
}

// Tables returns the topics of the task's tables, sorted.
func (t *Task) Tables() []string {
	out := make([]string, 0, len(t.tables))
	for topic := range t.tables {
		out = append(out, topic)
	}
	slices.Sort(out)
	return out
}

func (t *Task) sortedTables() []*table {
	out := make([]*table, 0, len(t.tables))
	for _, tb := range t.tables {
		out = append(out, tb)
	}
	slices.SortFunc(out, func(a, b *table) int { return strings.Compare(a.name, b.name) })
	return out
}

// ProcessTable applies a batch of records of the table topic (in offset order); next is the
// offset after the batch as the fetch saw it (past transaction markers, which are not records),
// or -1. Process does the same with next -1.
func (t *Task) ProcessTable(topic string, recs []*kgo.Record, next int64) error {
	t.must("ProcessTable", phaseIdle)
	tb := t.tables[topic]
	if tb == nil {
		return fmt.Errorf("task %d: %s is not a table of the task", t.partition, topic)
	}
	err := t.applyTable(tb, recs, next)
	t.publish()
	return err
}

// applyTable applies a batch of a table's records (in offset order) to its namespace in one
// store batch with the next offset. last is the offset after the batch as the fetch saw it
// (past transaction markers), or -1. A record that fails to decode is a dead letter.
func (t *Task) applyTable(tb *table, recs []*kgo.Record, last int64) error {
	if tb.err != nil {
		return tb.err
	}
	b := t.d.Store.NewBatch()
	defer b.Close()
	defer tb.rec.Release() // do not pin the batch's fetch response (operators.Record.Release)
	for _, kr := range recs {
		tb.next = kr.Offset + 1
		if kr.Value == nil {
			if kr.Key == nil {
				t.deadLetterTable(tb, kr, fmt.Errorf("a tombstone without a key"))
				continue
			}
			key, err := tb.src.Key(kr.Key, &tb.rec) // the row's key as its record stored it (key_format)
			if err != nil {
				t.deadLetterTable(tb, kr, err)
				continue
			}
			if err := b.Delete(tb.ns, key); err != nil {
				return fmt.Errorf("task %d: table %s: %w", t.partition, tb.name, err)
			}
			tb.deletes++
			continue
		}
		if err := tb.src.Decode(kr.Key, kr.Value, kr.Timestamp.UnixMilli(), &tb.rec); err != nil {
			var rerr *operators.Error
			if !errors.As(err, &rerr) {
				return fmt.Errorf("task %d: table %s: %w", t.partition, tb.name, err) // its schema registry is unreachable
			}
			t.deadLetterTable(tb, kr, err)
			continue
		}
		if tb.rec.Key == nil {
			// No key field and a null record key: no stream record's key could find it (and
			// a compacted topic refuses such records).
			t.deadLetterTable(tb, kr, fmt.Errorf("a row without a key"))
			continue
		}
		if err := b.Set(tb.ns, tb.rec.Key, tb.rec.Value); err != nil { // the JSON (kr.Value, or decoded from avro)
			return fmt.Errorf("task %d: table %s: %w", t.partition, tb.name, err)
		}
		tb.rows++
	}
	tb.next = max(tb.next, last)
	if tb.next < 0 {
		return nil // nothing read yet and no offset to record (an empty batch before SetTableEnd)
	}
	if err := b.SetOffset(tb.ns, tb.next); err != nil {
		return fmt.Errorf("task %d: table %s: %w", t.partition, tb.name, err)
	}
	if err := b.Commit(); err != nil {
		return fmt.Errorf("task %d: table %s: %w", t.partition, tb.name, err)
	}
	if !tb.loaded && tb.end >= 0 && tb.next >= tb.end {
		t.tableLoaded(tb)
	}
	return nil
}

func (t *Task) tableLoaded(tb *table) {
	tb.loaded = true
	d := t.d.Clock().Sub(tb.waitStart)
	t.log.Info("table snapshot loaded; its streams go on", "table", tb.name, "topic", tb.topic, "rows", tb.rows, "tombstones", tb.deletes,
		"end_offset", tb.end, "seconds", d.Seconds())
	t.d.Metrics.joinWaited(d.Seconds())
	if !t.Waiting() {
		t.d.Metrics.joinWaiting(-1)
	}
}

func (t *Task) deadLetterTable(tb *table, kr *kgo.Record, err error) {
	if kr.Offset < tb.dlqFrom {
		return // its dead letter was committed with the group's offset of the table already
	}
	tb.dead++
	t.d.Metrics.deadLetter("table " + tb.name)
	t.dlq = append(t.dlq, newDeadLetter(t.plan.Config.DLQTopic(), kr, "table "+tb.name, err.Error(), nil))
}

// TableStatus is a table partition of a task in /status.
type TableStatus struct {
	Table      string   `json:"table"`
	Topic      string   `json:"topic"`
	Loaded     bool     `json:"loaded"`                // the snapshot is loaded: the streams go on
	NextOffset int64    `json:"next_offset"`           // next offset to apply
	EndOffset  int64    `json:"snapshot_end_offset"`   // the end offset when the task started (-1: not known yet)
	Lag        int64    `json:"lag"`                   // records to the snapshot's end
	Rows       int64    `json:"rows_applied"`          // rows and tombstones applied since the task started
	WaitingFor []string `json:"waiting,omitempty"`     // the streams held back, while not loaded
	ETASeconds float64  `json:"eta_seconds,omitempty"` // while loading: lag / rate since start
}

// tableStatus returns the task's tables sorted by name (the first one not loaded is the
// task's Waiting reason).
func (t *Task) tableStatus(now time.Time) []TableStatus {
	var out []TableStatus
	for _, tb := range t.sortedTables() {
		ts := TableStatus{Table: tb.name, Topic: tb.topic, Loaded: tb.loaded, NextOffset: tb.next, EndOffset: tb.end, Rows: tb.rows + tb.deletes}
		if !tb.loaded && tb.end >= 0 {
			ts.Lag = max(tb.end-max(tb.next, 0), 0) // from next: an abort rewinds it
		}
		if !tb.loaded {
			for _, c := range t.chains {
				for _, name := range c.plan.Tables {
					if name == tb.name {
						ts.WaitingFor = append(ts.WaitingFor, c.plan.SourceName)
					}
				}
			}
			if d := now.Sub(tb.waitStart).Seconds(); d > 0 && ts.Rows > 0 {
				ts.ETASeconds = float64(ts.Lag) / (float64(ts.Rows) / d)
			}
		}
		out = append(out, ts)
	}
	return out
}
