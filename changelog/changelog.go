// Package changelog owns sluice's internal topics and rebuilds operator state from them.
//
// Every keyed operator writes, in the same transaction as its outputs and input offsets, one
// changelog record per key it changed: key = the group key, value = the full state (so replaying
// any suffix of the log is idempotent), and a header with the fingerprint of the state's layout
// (codec.HeaderLayout: a restore refuses a state written under another layout). The records'
// layouts (keys, values, headers) and the names of the namespaces a restore writes are
// package codec's. The topic
// <group>-<operator>-changelog is compacted and has exactly the input's partition count:
// partition p holds the state of task p.
//
// On assignment a task restores: it reads its changelog partition, read_committed, from the
// offset stored beside the state in Pebble (the changelog offset the state reflects) to the end,
// and applies it. A state dir that is missing, or an offset the log cannot serve (recreated or
// truncated topic), means a full restore from the log start. Nothing is ever wiped on a crash:
// Pebble only ever lags the transaction log.
package changelog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/changelog/codec"
	"github.com/sluice-dev/sluice/producer"
	"github.com/sluice-dev/sluice/state"
)

// HasAny reports whether ns holds at least one key.
func HasAny(st state.Store, ns state.Namespace) (bool, error) {
	found := errors.New("found")
	err := st.Scan(ns, func(_, _ []byte) error { return found })
	if errors.Is(err, found) {
		return true, nil
	}
	return false, err
}

// Topic describes an internal topic to create.
type Topic struct {
	Name       string
	Partitions int32 // required count; an existing topic with another count is an error when Exact
	Exact      bool
	Compacted  bool
	// Repartition creates a repartition topic: any record timestamp is accepted (they are event
	// times, which may lie far from the broker's clock) and nothing is deleted by time
	// (retention.ms -1, as those timestamps would expire it at once): sluice deletes the records
	// it has committed past (DeleteRecords).
	Repartition bool
}

// Ensure creates the missing topics and checks the existing ones. rf is the replication factor
// of created topics (-1: the broker default). The missing topics are created at once: one request
// for the topics of each kind (partitions, configs), the kinds in parallel (a pipeline of several
// stages has ten or more internal topics, which one request each took a start a third of a second
// on a local broker); the first failure in the order of topics is returned.
func Ensure(ctx context.Context, adm *kadm.Client, topics []Topic, rf int16) error {
	names := make([]string, 0, len(topics))
	for _, t := range topics {
		names = append(names, t.Name)
	}
	details, err := listTopics(ctx, adm, names...)
	if err != nil {
		return fmt.Errorf("changelog: list topics: %w", err)
	}
	var missing []Topic
	for _, t := range topics {
		if d, ok := details[t.Name]; ok && d.Err == nil {
			if n := int32(len(d.Partitions)); t.Exact && n != t.Partitions {
				return fmt.Errorf("changelog: topic %s has %d partitions, but its input has %d: delete it (its state is rebuilt from the input) or restore the input's partition count", t.Name, n, t.Partitions)
			}
			continue
		}
		missing = append(missing, t)
	}
	// One request per kind of topic (partitions and configs), the kinds in parallel: the
	// controller commits each request's topics together.
	type kind struct {
		parts                int32
		compacted, repartite bool
	}
	var kinds []kind
	byKind := map[kind][]string{}
	for _, t := range missing {
		k := kind{t.Partitions, t.Compacted, t.Repartition}
		if _, ok := byKind[k]; !ok {
			kinds = append(kinds, k)
		}
		byKind[k] = append(byKind[k], t.Name)
	}
	errs := make([]error, len(kinds))
	var wg sync.WaitGroup
	for i, k := range kinds {
		wg.Go(func() { errs[i] = create(ctx, adm, byKind[k], k.parts, k.compacted, k.repartite, rf) })
	}
	wg.Wait()
	for _, t := range missing { // the first failure in the order of topics
		for _, err := range errs {
			var te *topicError
			if errors.As(err, &te) && te.topic == t.Name {
				return err
			}
		}
	}
	return errors.Join(errs...)
}

// topicError is the failure to create one topic.
type topicError struct {
	topic string
	err   error
}

func (e *topicError) Error() string {
	return fmt.Sprintf("changelog: create topic %s: %v", e.topic, e.err)
}
func (e *topicError) Unwrap() error { return e.err }

// create creates the topics names, of parts partitions each, in one request (an existing one is
// not an error).
func create(ctx context.Context, adm *kadm.Client, names []string, parts int32, compacted, repartition bool, rf int16) error {
	cfg := map[string]*string{}
	if compacted {
		cfg["cleanup.policy"] = ptr("compact")
	}
	if repartition {
		cfg["retention.ms"] = ptr("-1")
		cfg["message.timestamp.type"] = ptr("CreateTime")
		cfg["message.timestamp.before.max.ms"] = ptr("9223372036854775807")
		cfg["message.timestamp.after.max.ms"] = ptr("9223372036854775807")
	}
	resps, err := adm.CreateTopics(ctx, parts, rf, cfg, names...)
	if err != nil {
		return &topicError{names[0], err}
	}
	for _, name := range names {
		r, ok := resps[name]
		if !ok {
			return &topicError{name, errors.New("the broker did not answer for it")}
		}
		if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
			return &topicError{name, r.Err}
		}
	}
	return nil
}

// MaxMessageBytes returns the effective max.message.bytes of each topic: its own override, or
// else the broker's message.max.bytes (DescribeConfigs reports the value in force with its
// source). It is the largest record batch the broker accepts for the topic, compressed, and
// what the producer sizes its batches by (producer.Limits). A topic that does not exist, or a
// broker that cannot say, is an error: sizing batches by a guess is what aborted checkpoints
// on MESSAGE_TOO_LARGE. Retriable errors (a topic just created that a broker does not know yet,
// a broker down) are retried as ListTopics is.
func MaxMessageBytes(ctx context.Context, adm *kadm.Client, topics ...string) (map[string]int32, error) {
	if len(topics) == 0 {
		return map[string]int32{}, nil
	}
	rcs, err := producer.Retry(ctx, func() (kadm.ResourceConfigs, error) {
		rcs, err := adm.DescribeTopicConfigs(ctx, topics...)
		if err != nil {
			return nil, err
		}
		for _, rc := range rcs {
			if rc.Err != nil {
				return nil, fmt.Errorf("%s: %w", rc.Name, rc.Err)
			}
		}
		return rcs, nil
	})
	if err != nil {
		return nil, fmt.Errorf("changelog: describe the configs of topics %s: %w", strings.Join(topics, ", "), err)
	}
	out := make(map[string]int32, len(topics))
	for _, rc := range rcs {
		for _, c := range rc.Configs {
			if c.Key != "max.message.bytes" || c.Value == nil {
				continue
			}
			n, err := strconv.ParseInt(*c.Value, 10, 32)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("changelog: topic %s: max.message.bytes is %q, not a byte count", rc.Name, *c.Value)
			}
			out[rc.Name] = int32(n)
		}
	}
	for _, t := range topics {
		if _, ok := out[t]; !ok {
			return nil, fmt.Errorf("changelog: topic %s: the broker did not report its max.message.bytes", t)
		}
	}
	return out, nil
}

// listTopics is ListTopics retried while a broker cannot be reached (an instance that starts
// while a node of the cluster is down).
func listTopics(ctx context.Context, adm *kadm.Client, topics ...string) (kadm.TopicDetails, error) {
	return producer.Retry(ctx, func() (kadm.TopicDetails, error) { return adm.ListTopics(ctx, topics...) })
}

// MissingTopicError is Partitions' error for a topic the brokers do not have.
type MissingTopicError struct{ Topic string }

func (e *MissingTopicError) Error() string {
	return fmt.Sprintf("changelog: topic %s does not exist", e.Topic)
}

// Partitions returns the partition count of each topic; a missing topic is a
// *MissingTopicError.
func Partitions(ctx context.Context, adm *kadm.Client, topics ...string) (map[string]int32, error) {
	details, err := listTopics(ctx, adm, topics...)
	if err != nil {
		return nil, fmt.Errorf("changelog: list topics: %w", err)
	}
	out := map[string]int32{}
	for _, t := range topics {
		d, ok := details[t]
		if !ok || d.Err != nil || len(d.Partitions) == 0 {
			return nil, &MissingTopicError{Topic: t}
		}
		out[t] = int32(len(d.Partitions))
	}
	return out, nil
}

// Restorer replays changelog partitions into a Store. Safe for concurrent use (one Restore per
// namespace at a time).
type Restorer struct {
	Brokers []string
	Store   state.Store
	Admin   *kadm.Client
	Logger  *slog.Logger
	// Valid reports whether a changelog value is a state the operator understands; a record that
	// fails is an error (never silently dropped). Nil accepts everything.
	Valid func(op string, val []byte) bool
	// Layout returns the fingerprint and text of operator op's state layout in the running
	// config; a record whose codec.HeaderLayout differs is an error. Nil, or "", checks nothing.
	Layout func(op string) (fingerprint, text string)
	// Accepted returns the fingerprints of other layouts whose states operator op reads as its
	// own (operators.Layout.Accepts): records written under them are applied too. Nil: none.
	Accepted func(op string) []string
	// Decode turns a record's value into the state to store, for an operator whose changelog
	// holds something else (an aggregate whose results are its changelog); it returns val
	// itself for the others. An error is the record's (ErrLayout). Nil stores values as they are.
	Decode func(op string, key, val []byte) ([]byte, error)
	// Gather, for an operator whose changelog records are each a part of a key's state (a top
	// whose rows are its changelog, one Kafka key per rank), returns the key rec's state is
	// stored under and that state with rec applied to the key's state so far, which old
	// returns (stored, or gathered earlier in this restore; nil: none); ok false for a record
	// that is a whole state (Decode). An error with ok is the record's (ErrLayout). Nil: none.
	Gather func(op string, rec *kgo.Record, old func(key []byte) ([]byte, error)) (key, st []byte, ok bool, err error)
	// Opts are the options each restore client starts from, after kgo.SeedBrokers(Brokers):
	// the connection's (dial.Opts: TLS, SASL) and test hooks.
	Opts []kgo.Opt
}

// Stats describe one restore.
type Stats struct {
	From, To int64 // offsets replayed: [From, To)
	Records  int64
	Full     bool // replayed from the log start after dropping local state
	Duration time.Duration
}

// Restore brings ns up to date with topic's partition ns.Partition.
func (r *Restorer) Restore(ctx context.Context, topic string, ns state.Namespace) (Stats, error) {
	start := time.Now()
	var st Stats
	starts, err := producer.RetryList(ctx, func() (kadm.ListedOffsets, error) { return r.Admin.ListStartOffsets(ctx, topic) })
	if err != nil {
		return st, fmt.Errorf("changelog: %s: list start offsets: %w", topic, err)
	}
	ends, err := r.stableEnd(ctx, topic, ns.Partition)
	if err != nil {
		return st, err
	}
	lo, ok1 := starts.Lookup(topic, ns.Partition)
	hi, ok2 := ends.Lookup(topic, ns.Partition)
	if !ok1 || !ok2 {
		return st, fmt.Errorf("changelog: %s has no partition %d", topic, ns.Partition)
	}
	from, have, err := r.Store.Offset(ns)
	if err != nil {
		return st, err
	}
	if !have || from > hi.Offset || from < lo.Offset {
		if have {
			r.log().Warn("changelog offset unusable, restoring in full", "topic", topic, "partition", ns.Partition, "stored", from, "log_start", lo.Offset, "log_end", hi.Offset)
		}
		if err := r.Store.Drop(ns); err != nil {
			return st, err
		}
		if err := r.Store.Drop(codec.PendingNamespace(ns)); err != nil {
			return st, err
		}
		if err := r.Store.Drop(codec.WatermarkNamespace(ns)); err != nil {
			return st, err
		}
		from, st.Full = lo.Offset, true
	}
	st.From, st.To = from, hi.Offset
	if from >= hi.Offset {
		if st.Full && hi.Offset > 0 {
			// Record where the (empty) replay ended so the next restore starts there.
			b := r.Store.NewBatch()
			defer b.Close()
			if err := b.SetOffset(ns, hi.Offset); err != nil {
				return st, err
			}
			if err := b.Commit(); err != nil {
				return st, err
			}
		}
		st.Duration = time.Since(start)
		return st, nil
	}
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(r.Brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {ns.Partition: kgo.NewOffset().At(from)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), // transaction markers advance the position too
		kgo.FetchMaxBytes(64 << 20),
	}, r.Opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return st, fmt.Errorf("changelog: %w", err)
	}
	defer cl.Close()
	next := from
	pendNS := codec.PendingNamespace(ns)
	// Unmarked records clear a pending mark; skip those deletes when no mark can exist.
	marks, err := HasAny(r.Store, pendNS)
	if err != nil {
		return st, err
	}
	var fp, layout string
	var accepted []string
	if r.Layout != nil {
		fp, layout = r.Layout(ns.Operator)
		if r.Accepted != nil {
			accepted = r.Accepted(ns.Operator)
		}
	}
	b := r.Store.NewBatch()
	defer func() { b.Close() }()
	// The states gathered into the batch (Gather), which the store does not show until it
	// commits.
	g := gathered{store: r.Store, ns: ns, batch: map[string][]byte{}}
	for next < hi.Offset {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return st, err
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if ferr == nil {
				ferr = fmt.Errorf("changelog: fetch %s[%d]: %w", t, p, err)
			}
		})
		if ferr != nil {
			return st, ferr
		}
		var aerr error
		fs.EachRecord(func(rec *kgo.Record) {
			if aerr != nil || rec.Offset >= hi.Offset {
				return
			}
			next = rec.Offset + 1
			if rec.Attrs.IsControl() {
				return
			}
			st.Records++
			aerr = r.apply(b, rec, ns, fp, layout, accepted, &marks, &g)
		})
		if aerr != nil {
			return st, aerr
		}
		if b.Len() >= 10000 || next >= hi.Offset {
			if err := b.SetOffset(ns, next); err != nil {
				return st, err
			}
			if err := b.Commit(); err != nil {
				return st, err
			}
			b.Close()
			b = r.Store.NewBatch()
			clear(g.batch)
		}
	}
	st.Duration = time.Since(start)
	return st, nil
}

// apply decodes one changelog record of ns (not a transaction marker) into b: a watermark
// record (codec.IsWatermarkRecord, stored under codec.WatermarkNamespace, so that a task
// restored anywhere decides lateness exactly as the task before it would have), or a key's
// state (checked against the layout fingerprint fp, or one it accepts, and the Valid hook; nil
// value: deleted),
// its pending mark set or cleared (codec.IsPendingRecord; *marks: the pending namespace may
// hold keys). A record that does not decode is an error wrapping ErrLayout; nothing of it is
// applied.
func (r *Restorer) apply(b state.Batch, rec *kgo.Record, ns state.Namespace, fp, layout string, accepted []string, marks *bool, g *gathered) error {
	if codec.IsWatermarkRecord(rec) {
		if !codec.ValidWatermarkRecord(rec.Key, rec.Value) {
			return invalidWatermark(rec, ns)
		}
		return b.Set(codec.WatermarkNamespace(ns), rec.Key, rec.Value)
	}
	if err := checkLayout(rec, ns, fp, layout, accepted); err != nil {
		return err
	}
	key, val := rec.Key, rec.Value
	var part bool
	if r.Gather != nil {
		k, st, ok, err := r.Gather(ns.Operator, rec, g.get)
		if ok && err != nil {
			return undecodable(rec, ns, layout, err)
		}
		if part = ok; part {
			key, val = k, st
			g.batch[string(k)] = st
		}
	}
	if !part && val != nil && r.Decode != nil {
		var err error
		if val, err = r.Decode(ns.Operator, rec.Key, val); err != nil {
			return undecodable(rec, ns, layout, err)
		}
	}
	if val != nil && r.Valid != nil && !r.Valid(ns.Operator, val) {
		return invalidState(rec, ns, layout)
	}
	pendNS := codec.PendingNamespace(ns)
	if codec.IsPendingRecord(rec) {
		*marks = true
		if err := b.Set(pendNS, key, []byte{}); err != nil {
			return err
		}
	} else if *marks {
		if err := b.Delete(pendNS, key); err != nil {
			return err
		}
	}
	if val == nil {
		return b.Delete(ns, key)
	}
	return b.Set(ns, key, val)
}

// gathered are the states a restore gathered (Restorer.Gather) into its uncommitted batch.
type gathered struct {
	store state.Store
	ns    state.Namespace
	batch map[string][]byte
}

// get returns key's state so far: gathered into the batch, or stored, or nil.
func (g *gathered) get(key []byte) ([]byte, error) {
	if v, ok := g.batch[string(key)]; ok {
		return v, nil
	}
	v, ok, err := g.store.Get(g.ns, key, nil)
	if err != nil || !ok {
		return nil, err
	}
	return v, nil
}

func (r *Restorer) log() *slog.Logger {
	if r.Logger != nil {
		return r.Logger
	}
	return slog.Default()
}

func ptr[T any](v T) *T { return &v }

// stableEnd returns the partition's last stable offset once no transaction is open on it
// (last stable offset = high watermark). Only a task's owner writes its changelog partition, so
// an open transaction there is the previous owner's last checkpoint: the new owner's committed
// input offset (fetched with RequireStable) will include it if it commits, so the restore must
// include its changelog records too. It waits at most until ctx ends (an abandoned transaction
// is aborted by the broker after its transaction timeout).
func (r *Restorer) stableEnd(ctx context.Context, topic string, p int32) (kadm.ListedOffsets, error) {
	wait := 20 * time.Millisecond
	logged := false
	for {
		lso, err := producer.RetryList(ctx, func() (kadm.ListedOffsets, error) { return r.Admin.ListCommittedOffsets(ctx, topic) })
		if err != nil {
			return nil, fmt.Errorf("changelog: %s: list stable offsets: %w", topic, err)
		}
		hwm, err := producer.RetryList(ctx, func() (kadm.ListedOffsets, error) { return r.Admin.ListEndOffsets(ctx, topic) })
		if err != nil {
			return nil, fmt.Errorf("changelog: %s: list end offsets: %w", topic, err)
		}
		a, _ := lso.Lookup(topic, p)
		b, _ := hwm.Lookup(topic, p)
		if a.Offset >= b.Offset {
			return lso, nil
		}
		if !logged && wait >= 640*time.Millisecond {
			r.log().Info("waiting for the previous owner's open transaction on the changelog", "topic", topic, "partition", p, "stable", a.Offset, "end", b.Offset)
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}
