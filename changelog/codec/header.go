package codec

import (
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Headers of changelog records.
const (
	// HeaderLayout carries, on every changelog record of a state, the fingerprint of the state
	// layout its value was written under (operators.Layout.Fingerprint). A restore refuses a
	// record whose fingerprint differs from the running config's: its bytes mean something
	// else. Records of sluice versions before the header have none.
	HeaderLayout = "sluice.layout"
	// HeaderPending (value "1") marks a changelog record written by a backlog checkpoint: the
	// key's state was folded, but its output is still due (at the switch to real-time). A later
	// record of the key without the header clears it; compaction keeps only the latest record
	// per key, so the mark survives exactly as long as it is true.
	HeaderPending = "sluice.pending"
	// HeaderWatermark (empty value) marks the changelog record of a committed watermark (key:
	// WatermarkKey, InputWatermarkKey or WriterWatermarkKey; value: AppendWatermark or
	// AppendWriterMark) as of the input offset committed with it. The same key names a writer's
	// announced watermark on an attribute record, and the watermark a late record's dead letter
	// was judged by.
	HeaderWatermark = "sluice.watermark"
	// HeaderKey carries, on a row of an operator whose rows are its changelog and several rows
	// make one key's state (a top with changelog: output), the key whose state the row is part
	// of; a restore gathers the rows by it.
	HeaderKey = "sluice.key"
)

// Headers of attribute records (in-band announcements of a writer of an internal topic:
// operators/task/attributes.go). HeaderWatermark carries a watermark announcement.
const (
	// HeaderBacklog is a writer's mode: "true" (backlog) or "false".
	HeaderBacklog = "sluice.backlog"
	// HeaderWriter is the writer's partition, in decimal.
	HeaderWriter = "sluice.writer"
)

// HeaderPartial marks a record of a repartition topic whose value is a partial state of the
// operator that reads it (an aggregate's or a cogroup's state, merged in as a whole) rather
// than a record to fold: a combining writer's (operators/task/combine.go). Its value is the
// state layout's fingerprint, which the reader checks against its own.
const HeaderPartial = "sluice.partial"

// PartialHeaders returns the headers of a partial state written under the layout fingerprint.
func PartialHeaders(fingerprint string) []kgo.RecordHeader {
	return []kgo.RecordHeader{{Key: HeaderPartial, Value: []byte(fingerprint)}}
}

// PartialOf returns the layout fingerprint of a record carrying a partial state; ok is false for
// any other record.
func PartialOf(headers []kgo.RecordHeader) (fingerprint string, ok bool) {
	for _, h := range headers {
		if h.Key == HeaderPartial {
			return string(h.Value), true
		}
	}
	return "", false
}

// IdleMark is the value of HeaderWatermark on the attribute record of a writer whose inputs
// are idle.
const IdleMark = "idle"

// Headers of dead letters, and of the dead letter of a record too large for its topic.
const (
	HeaderError             = "sluice.error"
	HeaderOperator          = "sluice.operator"
	HeaderSourceTopic       = "sluice.source.topic"
	HeaderSourcePartition   = "sluice.source.partition"
	HeaderSourceOffset      = "sluice.source.offset"
	HeaderSourceTimestamp   = "sluice.source.timestamp"
	HeaderOriginalKeySize   = "sluice.original.key.size"
	HeaderOriginalValueSize = "sluice.original.value.size"
	// HeaderDestinationTopic is on the dead letter of a record too large for its topic
	// (operators/task/sizelimit.go): the topic it was for.
	HeaderDestinationTopic = "sluice.destination.topic"
)

// Header returns the value of r's first header key, or nil (absent, or a nil value).
func Header(r *kgo.Record, key string) []byte {
	for _, h := range r.Headers {
		if h.Key == key {
			return h.Value
		}
	}
	return nil
}

// HasHeader reports whether r has a header key, whatever its value.
func HasHeader(r *kgo.Record, key string) bool {
	for _, h := range r.Headers {
		if h.Key == key {
			return true
		}
	}
	return false
}

// ChangelogHeaders returns the headers of the changelog records of a state written under the
// layout of fingerprint fp: plain (HeaderLayout) and for a backlog checkpoint's records
// (HeaderPending "1", then HeaderLayout). The two slices share their layout header; callers
// keep them for every record of the operator and never modify them.
func ChangelogHeaders(fp string) (plain, pending []kgo.RecordHeader) {
	h := kgo.RecordHeader{Key: HeaderLayout, Value: []byte(fp)}
	return []kgo.RecordHeader{h}, []kgo.RecordHeader{{Key: HeaderPending, Value: []byte("1")}, h}
}

// WatermarkRecordHeaders returns the headers of a changelog watermark record: HeaderWatermark
// with an empty value (new memory).
func WatermarkRecordHeaders() []kgo.RecordHeader {
	return []kgo.RecordHeader{{Key: HeaderWatermark, Value: []byte{}}}
}

// IsWatermarkRecord reports whether a changelog record is a watermark record (HeaderWatermark),
// not a key's state.
func IsWatermarkRecord(r *kgo.Record) bool { return HasHeader(r, HeaderWatermark) }

// ValidWatermarkRecord reports whether a watermark record's key and value are ones sluice
// writes: a watermark key, and 8 bytes (AppendWatermark), or 9 under a WriterWatermarkKey (a
// writer's mark; the ninth byte is not checked here, ParseWriterMark checks it).
func ValidWatermarkRecord(key, value []byte) bool {
	return IsWatermarkKey(key) && (len(value) == WatermarkSize || len(value) == WatermarkSize+1 && IsWriterWatermarkKey(key))
}

// IsPendingRecord reports whether a changelog record of a state carries HeaderPending.
func IsPendingRecord(r *kgo.Record) bool { return HasHeader(r, HeaderPending) }

// ModeHeaders returns the headers of the attribute record of writer (its partition) announcing
// its mode: HeaderBacklog ("true" or "false"), HeaderWriter.
func ModeHeaders(backlog bool, writer int32) []kgo.RecordHeader {
	return []kgo.RecordHeader{
		{Key: HeaderBacklog, Value: []byte(strconv.FormatBool(backlog))},
		{Key: HeaderWriter, Value: strconv.AppendInt(nil, int64(writer), 10)},
	}
}

// AppendMark appends to dst the HeaderWatermark value of an attribute record announcing the
// watermark wm: wm in decimal. A writer whose inputs are idle announces IdleMark instead.
func AppendMark(dst []byte, wm int64) []byte { return strconv.AppendInt(dst, wm, 10) }

// MarkHeaders returns the headers of the attribute record of writer announcing mark
// (AppendMark, or IdleMark): HeaderWatermark, HeaderWriter. The record keeps mark.
func MarkHeaders(mark []byte, writer int32) []kgo.RecordHeader {
	return []kgo.RecordHeader{
		{Key: HeaderWatermark, Value: mark},
		{Key: HeaderWriter, Value: strconv.AppendInt(nil, int64(writer), 10)},
	}
}

// Attribute is a decoded attribute record: what its writer announced.
type Attribute struct {
	Writer string // HeaderWriter's value, the writer's partition in decimal (see WriterIndex)
	// HasMode: the record announces a mode; Backlog: it is backlog (HeaderBacklog "true"; any
	// other value is real-time).
	HasMode, Backlog bool
	// Idle: the record announces IdleMark. HasWatermark: it announces Watermark. A
	// HeaderWatermark value that is neither announces nothing.
	Idle, HasWatermark bool
	Watermark          int64
}

// WriterIndex returns the writer's partition; ok is false when Writer is not a number.
func (a *Attribute) WriterIndex() (int, bool) {
	i, err := strconv.Atoi(a.Writer)
	return i, err == nil
}

// ParseAttribute reports whether r is an attribute record (no key, no value, HeaderWriter and
// HeaderBacklog or HeaderWatermark) and, if it is, decodes it. A record that is not one costs
// a nil check.
func ParseAttribute(r *kgo.Record) (Attribute, bool) {
	if r.Key != nil || r.Value != nil {
		return Attribute{}, false
	}
	w, b, m := Header(r, HeaderWriter), Header(r, HeaderBacklog), Header(r, HeaderWatermark)
	if w == nil || b == nil && m == nil {
		return Attribute{}, false
	}
	a := Attribute{Writer: string(w), HasMode: b != nil, Backlog: string(b) == "true"}
	if string(m) == IdleMark {
		a.Idle = true
	} else if m != nil {
		if wm, err := strconv.ParseInt(string(m), 10, 64); err == nil {
			a.HasWatermark, a.Watermark = true, wm
		}
	}
	return a, true
}

// AppendDeadLetterHeaders appends to dst the headers of the dead letter of src, a bad input
// record: HeaderError (reason), HeaderOperator (op), and src's coordinates (HeaderSourceTopic,
// HeaderSourcePartition, HeaderSourceOffset, HeaderSourceTimestamp in ms, all decimal).
func AppendDeadLetterHeaders(dst []kgo.RecordHeader, reason, op string, src *kgo.Record) []kgo.RecordHeader {
	return append(dst,
		kgo.RecordHeader{Key: HeaderError, Value: []byte(reason)},
		kgo.RecordHeader{Key: HeaderOperator, Value: []byte(op)},
		kgo.RecordHeader{Key: HeaderSourceTopic, Value: []byte(src.Topic)},
		kgo.RecordHeader{Key: HeaderSourcePartition, Value: []byte(strconv.Itoa(int(src.Partition)))},
		kgo.RecordHeader{Key: HeaderSourceOffset, Value: []byte(strconv.FormatInt(src.Offset, 10))},
		kgo.RecordHeader{Key: HeaderSourceTimestamp, Value: []byte(strconv.FormatInt(src.Timestamp.UnixMilli(), 10))},
	)
}

// AppendTooLargeHeaders appends to dst the headers of the dead letter of a record too large
// for topic: HeaderError (reason), HeaderOperator (op), HeaderDestinationTopic (topic).
func AppendTooLargeHeaders(dst []kgo.RecordHeader, reason, op, topic string) []kgo.RecordHeader {
	return append(dst,
		kgo.RecordHeader{Key: HeaderError, Value: []byte(reason)},
		kgo.RecordHeader{Key: HeaderOperator, Value: []byte(op)},
		kgo.RecordHeader{Key: HeaderDestinationTopic, Value: []byte(topic)},
	)
}

// AppendOriginalSizes appends to dst the headers of a dead letter whose key or value was cut:
// the sizes before the cut (HeaderOriginalKeySize, HeaderOriginalValueSize, decimal).
func AppendOriginalSizes(dst []kgo.RecordHeader, keySize, valueSize int) []kgo.RecordHeader {
	return append(dst,
		kgo.RecordHeader{Key: HeaderOriginalKeySize, Value: []byte(strconv.Itoa(keySize))},
		kgo.RecordHeader{Key: HeaderOriginalValueSize, Value: []byte(strconv.Itoa(valueSize))},
	)
}

// LateHeader is the header a late record's dead letter adds: the watermark (decimal) it was
// judged late by.
func LateHeader(wm int64) kgo.RecordHeader {
	return kgo.RecordHeader{Key: HeaderWatermark, Value: strconv.AppendInt(nil, wm, 10)}
}

// DeadLetterSource returns the source coordinates a dead letter's headers carry (the last of
// each; "" when absent), as written: topic, partition and offset in decimal.
func DeadLetterSource(hs []kgo.RecordHeader) (topic, partition, offset string) {
	for _, h := range hs {
		switch h.Key {
		case HeaderSourceTopic:
			topic = string(h.Value)
		case HeaderSourcePartition:
			partition = string(h.Value)
		case HeaderSourceOffset:
			offset = string(h.Value)
		}
	}
	return topic, partition, offset
}
