package task

import (
	"bytes"
	"strconv"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/changelog/codec"
)

// Dead letters carry the bad record's key and value as they came, with headers saying why and
// where from (codec.AppendDeadLetterHeaders). A bad record may be larger than the dead-letter topic accepts: the input topic may
// allow records of many MiB, while the dead-letter topic usually has the broker's default limit
// (message.max.bytes, 1 MiB) and the producer refuses any record above its topic's batch bound
// (producer.Limits). A dead letter that cannot be produced aborts every checkpoint that carries
// it, so it would stop the pipeline. Every dead letter therefore goes through newDeadLetter
// (or, for a record too large for its topic, newTooLargeDeadLetter: sizelimit.go), which bounds
// it:
//
//   - a key or value longer than DeadLetterMaxBytes keeps its first DeadLetterMaxBytes bytes, and
//     the dead letter gets the headers sluice.original.key.size and sluice.original.value.size
//     (decimal byte counts of the record as it came; present only when something was cut);
//   - the reason (sluice.error) is cut at maxReasonBytes, since an error may quote the input.
//
// The dead letter's sluice.source.topic/partition/offset headers locate the original record.
// A dead letter is then at most 2*DeadLetterMaxBytes plus a few KiB of headers, well under the
// broker's default limit. A dead-letter topic that accepts less gets its dead letters cut
// further to fit (LimitSizes, fitDeadLetter).

// DeadLetterMaxBytes is the most of a bad record's key, and of its value, that its dead letter
// carries.
const DeadLetterMaxBytes = 256 << 10

// maxReasonBytes bounds the sluice.error header.
const maxReasonBytes = 1 << 10

// newDeadLetter returns the dead letter of kr for topic: its key and value (copied, truncated to
// DeadLetterMaxBytes), the reason, the operator, the source coordinates, and the extra headers.
func newDeadLetter(topic string, kr *kgo.Record, op, reason string, extra []kgo.RecordHeader) *kgo.Record {
	key, cutKey := clip(kr.Key, DeadLetterMaxBytes)
	value, cutValue := clip(kr.Value, DeadLetterMaxBytes)
	hs := codec.AppendDeadLetterHeaders(make([]kgo.RecordHeader, 0, 8+len(extra)), clipReason(reason), op, kr)
	if cutKey || cutValue {
		hs = codec.AppendOriginalSizes(hs, len(kr.Key), len(kr.Value))
	}
	return &kgo.Record{Topic: topic, Key: key, Value: value, Partition: -1, Headers: append(hs, extra...)}
}

// clip returns a copy of at most n bytes of b (nil stays nil: a null key or a tombstone) and
// whether it cut anything.
func clip(b []byte, n int) ([]byte, bool) {
	if len(b) <= n {
		return bytes.Clone(b), false
	}
	return bytes.Clone(b[:n]), true
}

// clipReason cuts a reason longer than maxReasonBytes at a UTF-8 boundary and says so.
func clipReason(s string) string {
	if len(s) <= maxReasonBytes {
		return s
	}
	n := maxReasonBytes
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "… (reason cut, " + strconv.Itoa(len(s)) + " bytes)"
}
