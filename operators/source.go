package operators

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/sluice-dev/sluice/configs"
)

// Source decodes one source's Kafka records into Records (configs.Source: JSON values, or
// values of another format turned into JSON objects by a ValueDecoder; the group key from a
// field or the Kafka key, read by the key format; event time from a field or the record
// timestamp).
//
// One Source per task; not safe for concurrent use (it holds no mutable state today, but the
// runtime must not rely on that).
type Source struct {
	name      string
	key       *path // nil: the Kafka key
	ts        *path // nil: the Kafka timestamp
	cfgTS     string
	keyFormat string       // configs.KeyString, KeyBytes, KeyJSON; "": bytes
	values    ValueDecoder // nil: JSON values
	// now, when set, is the record's time (processing_time: the wall clock when it is decoded).
	now func() int64
}

// ValueDecoder turns a record value of another format into a JSON object, the one
// representation operators work on (format avro: operators/avro.Registry). It must be safe for
// concurrent use: the tasks of a process share it.
type ValueDecoder interface {
	// AppendJSON appends the value's JSON object to dst and returns it. An error with a
	// method BadRecord() bool returning true is the record's fault (a dead letter); any other
	// error means the record could not be decoded now (its schema registry is unreachable)
	// and must not be dropped.
	AppendJSON(dst, value []byte) ([]byte, error)
}

// ValueEncoder turns an output's JSON object into a sink's format (format avro:
// operators/avro.Encoder). It must be safe for concurrent use.
type ValueEncoder interface {
	// AppendValue appends the encoding of the JSON object value to dst and returns it.
	AppendValue(dst, value []byte) ([]byte, error)
}

// NewSource returns the decoder for source name with JSON values (format "json" or "").
func NewSource(name string, cfg configs.Source) (*Source, error) {
	return NewSourceDecoding(name, cfg, nil)
}

// NewSourceDecoding returns the decoder for source name; values decodes the values of a format
// other than JSON (format avro needs one).
func NewSourceDecoding(name string, cfg configs.Source, values ValueDecoder) (*Source, error) {
	s := &Source{name: name, keyFormat: cfg.KeyFormat}
	switch cfg.Format {
	case "", configs.FormatJSON:
	case configs.FormatAvro:
		if values == nil {
			return nil, fmt.Errorf("operators: source %s: format avro needs a schema registry (schema_registry.urls)", name)
		}
		s.values = values
	default:
		return nil, fmt.Errorf("operators: source %s: unsupported format %q (allowed: json, avro)", name, cfg.Format)
	}
	switch cfg.KeyFormat {
	case "", configs.KeyString, configs.KeyBytes, configs.KeyJSON:
	default:
		return nil, fmt.Errorf("operators: source %s: unsupported key_format %q (allowed: bytes, string, json)", name, cfg.KeyFormat)
	}
	if cfg.Key != "" {
		p, err := checkedPath(cfg.Key)
		if err != nil {
			return nil, fmt.Errorf("operators: source %s: key: %w", name, err)
		}
		s.key = &p
	}
	if cfg.ProcessingTime {
		if cfg.Timestamp != "" {
			return nil, fmt.Errorf("operators: source %s: processing_time and timestamp are exclusive", name)
		}
		s.now = func() int64 { return time.Now().UnixMilli() }
	}
	if cfg.Timestamp != "" {
		p, err := checkedPath(cfg.Timestamp)
		if err != nil {
			return nil, fmt.Errorf("operators: source %s: timestamp: %w", name, err)
		}
		s.ts = &p
	}
	return s, nil
}

// checkedPath compiles a field path, rejecting empty segments ("a..b", ".a").
func checkedPath(s string) (path, error) {
	p := newPath(s)
	for _, part := range p.parts {
		if part == "" {
			return path{}, fmt.Errorf("invalid field path %q", s)
		}
	}
	return p, nil
}

// Name returns the source name given to NewSource.
func (s *Source) Name() string { return s.name }

func (s *Source) fail(format string, args ...any) error {
	return &Error{Operator: s.name, Reason: fmt.Sprintf(format, args...)}
}

// Decode fills r from a Kafka record's key, value and timestamp (epoch ms). The value must be
// one JSON object, or a value its ValueDecoder turns into one (r.Value is then that JSON, in
// r's scratch).
//
// The Kafka key is read by the key format: bytes (as is), string (valid UTF-8, as is) or json
// (a JSON string's text or a JSON number's text; any other JSON value is an *Error).
//
// With a key field configured, the field's value (a string as is, a number as its JSON text)
// must equal the Kafka record key: sluice does not re-key (that needs a repartition topic), so
// a mismatch, a null Kafka key, or a missing or non-scalar key field is an *Error. Without a
// key field, r.Key is the Kafka key (nil for a null key). With a timestamp field, r.Time is
// that field as epoch milliseconds (a number, fractions rounded down) or an RFC 3339 string;
// otherwise the Kafka timestamp. An event time outside the years 0000 to 9999 (MinTime to
// MaxTime), from either, is an *Error: window and watermark arithmetic stays far from int64's
// limits. Every per-record failure is an *Error; any other error is the ValueDecoder's (the
// record could not be decoded now, and must not become a dead letter).
//
// r.Key and r.Value alias kafkaKey and value (or r's scratch, for an escaped key field, a JSON
// key or a decoded value).
func (s *Source) Decode(kafkaKey, value []byte, kafkaTimeMs int64, r *Record) error {
	r.Value = nil
	r.Key = nil
	r.Time = kafkaTimeMs
	if s.values != nil {
		if value == nil {
			return s.fail("null value (a tombstone)")
		}
		buf, err := s.values.AppendJSON(r.decBuf[:0], value)
		r.decBuf = buf
		if err != nil {
			var bad interface{ BadRecord() bool }
			if errors.As(err, &bad) && bad.BadRecord() {
				return s.fail("%v", err)
			}
			return fmt.Errorf("operators: source %s: %w", s.name, err)
		}
		value = buf
	}
	r.Value = value
	var err error
	r.members, err = indexObject(value, r.members)
	r.setIndexed(value, err)
	if err != nil {
		return s.fail("%v", err)
	}
	if kafkaKey, err = s.readKey(kafkaKey, r); err != nil {
		return err
	}
	if s.key == nil {
		r.Key = kafkaKey
	} else if err := s.decodeKey(kafkaKey, r); err != nil {
		return err
	}
	if s.ts != nil {
		raw, ok, _ := r.lookup(*s.ts)
		if !ok {
			return s.fail("timestamp field %q missing", s.ts.text)
		}
		t, err := parseTime(raw)
		if err != nil {
			return s.fail("timestamp field %q: %v", s.ts.text, err)
		}
		r.Time = t
	} else if s.now != nil {
		r.Time = s.now()
	} else if kafkaTimeMs < MinTime || kafkaTimeMs > MaxTime {
		return s.fail("record timestamp %d ms out of range (years 0000 to 9999)", kafkaTimeMs)
	}
	return nil
}

// Key returns the group key of a Kafka record key read by the key format (for a tombstone,
// which has no value to decode): kafkaKey itself, or the text of a JSON key in r's scratch.
// A key the format refuses is an *Error.
func (s *Source) Key(kafkaKey []byte, r *Record) ([]byte, error) {
	return s.readKey(kafkaKey, r)
}

// readKey reads the Kafka record key by the key format: the key the record is grouped by.
func (s *Source) readKey(k []byte, r *Record) ([]byte, error) {
	if k == nil {
		return nil, nil
	}
	switch s.keyFormat {
	case configs.KeyString:
		if !utf8.Valid(k) {
			return nil, s.fail("record key %q is not valid UTF-8 (key_format: string; bytes takes any key)", k)
		}
	case configs.KeyJSON:
		i := skipSpace(k, 0)
		if i == len(k) {
			return nil, s.fail("record key %q is not JSON (key_format: json)", k)
		}
		var body []byte
		switch c := k[i]; {
		case c == '"':
			end, esc, err := scanString(k, i)
			if err != nil {
				return nil, s.fail("record key %q: %v (key_format: json)", k, err)
			}
			body = k[i+1 : end-1]
			if esc {
				r.jsonKey = appendUnescaped(r.jsonKey[:0], body)
				body = r.jsonKey
			}
			i = end
		case c == '-' || (c >= '0' && c <= '9'):
			end, err := scanNumber(k, i)
			if err != nil {
				return nil, s.fail("record key %q: %v (key_format: json)", k, err)
			}
			body, i = k[i:end], end
		case c == '{' || c == '[' || c == 't' || c == 'f' || c == 'n':
			return nil, s.fail("record key %q is %s, want a JSON string or number (key_format: json)", k, kindOf(c))
		default:
			return nil, s.fail("record key %q is not JSON (key_format: json)", k)
		}
		if skipSpace(k, i) != len(k) {
			return nil, s.fail("record key %q: more than one JSON value (key_format: json)", k)
		}
		return body, nil
	}
	return k, nil
}

// MinTime and MaxTime bound event times (epoch ms): the first and the last millisecond of the
// years RFC 3339 can write, 0000-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z.
const (
	MinTime int64 = -62_167_219_200_000
	MaxTime int64 = 253_402_300_799_999
)

func (s *Source) decodeKey(kafkaKey []byte, r *Record) error {
	raw, ok, _ := r.lookup(*s.key)
	if !ok {
		return s.fail("key field %q missing", s.key.text)
	}
	var k []byte
	switch c := raw[0]; {
	case c == '"':
		body, esc := stringBody(raw)
		if esc {
			r.keyBuf = appendUnescaped(r.keyBuf[:0], body)
			body = r.keyBuf
		}
		k = body
	case c == '-' || (c >= '0' && c <= '9'):
		k = raw
	default:
		return s.fail("key field %q is %s, want a string or a number", s.key.text, kindOf(c))
	}
	if kafkaKey == nil {
		return s.fail("key field %q=%q but the record has no key (re-keying needs a repartition topic)", s.key.text, k)
	}
	if !bytes.Equal(k, kafkaKey) {
		return s.fail("key field %q=%q differs from record key %q (re-keying needs a repartition topic)", s.key.text, k, kafkaKey)
	}
	r.Key = kafkaKey
	return nil
}

// parseTime reads an event time: a JSON number of epoch milliseconds (fractions rounded
// down) or an RFC 3339 string.
func parseTime(raw []byte) (int64, error) {
	switch c := raw[0]; {
	case c == '"':
		body, esc := stringBody(raw)
		if esc {
			body = appendUnescaped(nil, body)
		}
		t, err := time.Parse(time.RFC3339Nano, string(body))
		if err != nil {
			return 0, fmt.Errorf("not an RFC 3339 time: %q", body)
		}
		return t.UnixMilli(), nil
	case c == '-' || (c >= '0' && c <= '9'):
		if v, ok := parseInt64(raw); ok {
			if v < MinTime || v > MaxTime {
				return 0, fmt.Errorf("epoch milliseconds %s out of range (years 0000 to 9999)", raw)
			}
			return v, nil
		}
		f, err := strconv.ParseFloat(string(raw), 64)
		if err != nil || math.IsInf(f, 0) || math.Floor(f) < float64(MinTime) || math.Floor(f) > float64(MaxTime) {
			return 0, fmt.Errorf("epoch milliseconds %s out of range (years 0000 to 9999)", raw)
		}
		return int64(math.Floor(f)), nil
	default:
		return 0, fmt.Errorf("is %s, want epoch milliseconds or an RFC 3339 string", kindOf(c))
	}
}

// parseInt64 parses a plain JSON integer (no fraction or exponent) that fits in int64.
func parseInt64(b []byte) (int64, bool) {
	i := 0
	neg := false
	if len(b) > 0 && b[0] == '-' {
		neg = true
		i = 1
	}
	if i >= len(b) || len(b)-i > 19 {
		return 0, false
	}
	var v uint64
	for ; i < len(b); i++ {
		c := b[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	if neg {
		if v > 1<<63 {
			return 0, false
		}
		return -int64(v), true
	}
	if v > math.MaxInt64 {
		return 0, false
	}
	return int64(v), true
}
