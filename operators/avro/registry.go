// Package avro decodes record values in the Confluent wire format (a zero magic byte, a 4-byte
// big-endian schema id, the Avro binary encoding) into JSON objects, the one representation
// sluice's operators work on, with the writer schemas fetched by id from a schema registry
// (the Confluent REST protocol, through franz-go's sr client) and cached for the process.
//
// It owns the mapping from Avro to JSON (README "Formats"): null, boolean, int and long, float
// and double (shortest text; NaN and infinities as null), string, bytes and fixed (base64),
// enum (its symbol), array, map, record (fields in schema order), a union as its branch's
// value, decimal (bytes or fixed) as an exact JSON number, timestamp-millis as epoch
// milliseconds (a long, unchanged), timestamp-micros as epoch milliseconds with three
// fractional digits, date and time-* unchanged (the int or long).
//
// A value that cannot be decoded (wrong magic byte, unknown schema id, a schema that is not
// Avro, bytes that do not match the schema) gives a *RecordError: the caller sends the record
// to the dead-letter topic. A registry that cannot be reached (network errors, 5xx, 401/403,
// 429) is retried with backoff up to Options.RetryTimeout and then gives an error wrapping
// ErrUnavailable, which is not the record's fault: the caller fails rather than lose the record.
//
// For sinks of format avro it also registers a schema under a subject (Registry.Encoder, the
// subject from a subject name strategy: Subject) and encodes JSON objects with it (Encoder).
//
// A Registry and an Encoder are safe for concurrent use by any number of tasks; the slices they
// return are the caller's.
package avro

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	havro "github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
)

// ErrUnavailable is wrapped by the errors of a registry that could not be reached within the
// retry timeout.
var ErrUnavailable = errors.New("avro: schema registry unavailable")

// RecordError is a record that can never be decoded. Safe to share once returned.
type RecordError struct {
	Reason string
}

func (e *RecordError) Error() string { return "avro: " + e.Reason }

// BadRecord marks the error as the record's own fault (operators send it to the dead-letter
// topic).
func (e *RecordError) BadRecord() bool { return true }

func recordErr(format string, args ...any) *RecordError {
	return &RecordError{Reason: fmt.Sprintf(format, args...)}
}

// Fetcher reads schemas from a registry and registers them; *sr.Client is one.
type Fetcher interface {
	SchemaByID(ctx context.Context, id int) (sr.Schema, error)
	SchemaByVersion(ctx context.Context, subject string, version int) (sr.SubjectSchema, error)
	RegisterSchema(ctx context.Context, subject string, s sr.Schema, id, version int) (int, error)
}

// Options configure a Registry.
type Options struct {
	Fetcher Fetcher
	// Context bounds every wait for the registry (the process's context).
	Context context.Context
	// RetryTimeout is how long an unreachable registry is retried, with backoff from 100ms to
	// 5s, before a decode fails with ErrUnavailable. 0: one try.
	RetryTimeout time.Duration
	// Now is the clock of the backoff and of the negative cache (nil: time.Now).
	Now func() time.Time
	Log *slog.Logger
}

// negativeTTL is how long an id the registry does not know is remembered as unknown.
const negativeTTL = time.Minute

// Registry decodes Confluent-framed Avro values with writer schemas fetched by id.
type Registry struct {
	o  Options
	mu struct {
		sync.Mutex
		ids map[int]*entry
	}
}

// entry is one schema id: loading until done is closed, then n or err (a *RecordError) for
// good (n) or until expires (err).
type entry struct {
	ready   atomic.Bool // done is closed (a cheaper test than a select on the hot path)
	done    chan struct{}
	n       *node
	err     error
	expires time.Time
}

// NewRegistry returns a Registry over o.Fetcher.
func NewRegistry(o Options) *Registry {
	if o.Context == nil {
		o.Context = context.Background()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	r := &Registry{o: o}
	r.mu.ids = map[int]*entry{}
	return r
}

// AppendJSON appends the JSON object of a Confluent-framed Avro record value to dst. The
// writer schema must be a record. Errors: *RecordError (the record's fault) or ErrUnavailable.
func (r *Registry) AppendJSON(dst, value []byte) ([]byte, error) {
	if len(value) < 5 {
		return dst, recordErr("value of %d bytes is too short for the Confluent header (magic byte 0, 4-byte schema id)", len(value))
	}
	if value[0] != 0 {
		return dst, recordErr("magic byte %d, want 0 (not the Confluent wire format)", value[0])
	}
	id := int(uint32(value[1])<<24 | uint32(value[2])<<16 | uint32(value[3])<<8 | uint32(value[4]))
	n, err := r.schema(id)
	if err != nil {
		return dst, err
	}
	if n.kind != kRecord {
		return dst, recordErr("schema id %d is not a record schema", id)
	}
	start := len(dst)
	dst, err = appendJSON(dst, n, value[5:])
	if err != nil {
		return dst[:start], recordErr("schema id %d: %v", id, err)
	}
	return dst, nil
}

// Subject name strategies of a sink (Confluent's TopicNameStrategy, RecordNameStrategy and
// TopicRecordNameStrategy).
const (
	SubjectTopic       = "topic"
	SubjectRecord      = "record"
	SubjectTopicRecord = "topic_record"
)

// Subject returns the subject a value schema of topic is registered under by strategy.
func Subject(strategy, topic, schema string) (string, error) {
	if strategy == SubjectTopic || strategy == "" {
		return topic + "-value", nil
	}
	name, err := RecordName(schema)
	if err != nil {
		return "", err
	}
	switch strategy {
	case SubjectRecord:
		return name, nil
	case SubjectTopicRecord:
		return topic + "-" + name, nil
	}
	return "", fmt.Errorf("avro: unknown subject name strategy %q", strategy)
}

// Encoder registers schema (an Avro record schema) under subject, or finds it there, retrying
// an unreachable registry like a fetch, and returns the Encoder of its id. The registry's
// compatibility rules apply: a schema the subject refuses is an error.
func (r *Registry) Encoder(subject, schema string) (*Encoder, error) {
	if _, err := NewEncoder(schema, 0); err != nil {
		return nil, err
	}
	var id int
	err := r.retry("register "+subject, func(ctx context.Context) error {
		var err error
		id, err = r.o.Fetcher.RegisterSchema(ctx, subject, sr.Schema{Schema: schema, Type: sr.TypeAvro}, -1, -1)
		var re *sr.ResponseError
		if errors.As(err, &re) && re.StatusCode >= 400 && re.StatusCode < 500 && re.StatusCode != http.StatusUnauthorized &&
			re.StatusCode != http.StatusForbidden && re.StatusCode != http.StatusTooManyRequests && re.StatusCode != http.StatusRequestTimeout {
			return &permanent{fmt.Errorf("avro: registering the schema under subject %s: %w", subject, err)}
		}
		return err
	})
	if err != nil {
		var p *permanent
		if errors.As(err, &p) {
			return nil, p.err
		}
		return nil, err
	}
	r.o.Log.Info("avro schema registered", "subject", subject, "id", id)
	return NewEncoder(schema, id)
}

// schema returns the compiled schema of id, fetching it once for the whole process.
func (r *Registry) schema(id int) (*node, error) {
	r.mu.Lock()
	e, ok := r.mu.ids[id]
	if ok && e.ready.Load() {
		if e.err == nil {
			r.mu.Unlock()
			return e.n, nil
		}
		if !r.o.Now().Before(e.expires) {
			ok = false // an unknown id: ask again
		}
	}
	if !ok {
		e = &entry{done: make(chan struct{})}
		r.mu.ids[id] = e
		r.mu.Unlock()
		e.n, e.err = r.fetch(id)
		e.expires = r.o.Now().Add(negativeTTL)
		var rerr *RecordError
		if e.err != nil && !errors.As(e.err, &rerr) {
			r.mu.Lock()
			delete(r.mu.ids, id) // unavailable: the next record tries again
			r.mu.Unlock()
		}
		e.ready.Store(true)
		close(e.done)
		return e.n, e.err
	}
	r.mu.Unlock()
	select {
	case <-e.done:
		return e.n, e.err
	case <-r.o.Context.Done():
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, r.o.Context.Err())
	}
}

// fetch reads and compiles the schema of id, retrying while the registry is unreachable.
func (r *Registry) fetch(id int) (*node, error) {
	var s sr.Schema
	cache := &havro.SchemaCache{}
	err := r.retry(fmt.Sprintf("schema id %d", id), func(ctx context.Context) error {
		var err error
		s, err = r.o.Fetcher.SchemaByID(ctx, id)
		return err
	})
	if err != nil {
		return nil, err
	}
	if s.Type != sr.TypeAvro {
		return nil, recordErr("schema id %d is %s, not Avro", id, s.Type)
	}
	if err := r.references(s.References, cache, 0); err != nil {
		return nil, fmt.Errorf("schema id %d: %w", id, err)
	}
	parsed, err := havro.ParseWithCache(s.Schema, "", cache)
	if err != nil {
		return nil, recordErr("schema id %d: %v", id, err)
	}
	n, err := compile(parsed, map[string]*node{})
	if err != nil {
		return nil, recordErr("schema id %d: %v", id, err)
	}
	r.o.Log.Info("avro schema loaded", "id", id)
	return n, nil
}

// references parses the schemas a schema refers to (by subject and version) into cache,
// depth first, so that their named types resolve.
func (r *Registry) references(refs []sr.SchemaReference, cache *havro.SchemaCache, depth int) error {
	if depth > 16 {
		return recordErr("schema references nested more than 16 deep")
	}
	for _, ref := range refs {
		var ss sr.SubjectSchema
		err := r.retry(fmt.Sprintf("reference %s version %d", ref.Subject, ref.Version), func(ctx context.Context) error {
			var err error
			ss, err = r.o.Fetcher.SchemaByVersion(ctx, ref.Subject, ref.Version)
			return err
		})
		if err != nil {
			return err
		}
		if err := r.references(ss.References, cache, depth+1); err != nil {
			return err
		}
		if _, err := havro.ParseWithCache(ss.Schema.Schema, "", cache); err != nil {
			return recordErr("reference %s version %d: %v", ref.Subject, ref.Version, err)
		}
	}
	return nil
}

// retry calls fn until it succeeds, fails for good (404: a *RecordError), or RetryTimeout has
// passed (ErrUnavailable).
func (r *Registry) retry(what string, fn func(context.Context) error) error {
	start := r.o.Now()
	backoff := 100 * time.Millisecond
	for {
		err := fn(r.o.Context)
		if err == nil {
			return nil
		}
		var re *sr.ResponseError
		if errors.As(err, &re) && re.StatusCode == http.StatusNotFound {
			return recordErr("%s not found in the schema registry: %s", what, re.Message)
		}
		var p *permanent
		if errors.As(err, &p) {
			return err
		}
		left := r.o.RetryTimeout - r.o.Now().Sub(start)
		if r.o.Context.Err() != nil || left <= 0 {
			return fmt.Errorf("%w: %s: %w", ErrUnavailable, what, err)
		}
		wait := min(backoff, left)
		r.o.Log.Warn("schema registry unavailable, retrying", "what", what, "wait", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-r.o.Context.Done():
			t.Stop()
			return fmt.Errorf("%w: %s: %w", ErrUnavailable, what, r.o.Context.Err())
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// permanent is a failure retry does not retry (a registry's refusal of a schema).
type permanent struct{ err error }

func (p *permanent) Error() string { return p.err.Error() }
