package task

import (
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/changelog/codec"
	"github.com/sluice-dev/sluice/operators/plan"
)

// Records too large for their topic. A broker refuses a record batch larger than its topic's
// max.message.bytes, and the producer bounds each topic's batches by it (producer.Limits), so a
// batch of several records is never refused; but a single record larger than the bound fails at
// once (kerr.MessageTooLarge), and a checkpoint holding it would abort, rewind, produce it again
// and abort again. LimitSizes checks every record a task produces, in one place, against the
// same bound and the same arithmetic as franz-go (batchBytes):
//
//   - a record for a sink, a repartition topic or an output topic that does not fit becomes a
//     dead letter in its place, in the same transaction (newTooLargeDeadLetter): sluice.error
//     says "too large", its size, the topic and its limit; sluice.destination.topic names the
//     topic; its key and value are bounded as every dead letter's; it counts in
//     sluice_dead_letters_total under operator "produce <topic>". The check sees only the record
//     produced, not the input record it came from, so the dead letter carries the output record
//     (not the input's sluice.source.* coordinates);
//   - a dead letter that does not fit the dead-letter topic is cut further (fitDeadLetter),
//     with its sizes before the cut in sluice.original.key.size and sluice.original.value.size;
//   - a changelog record that does not fit fails at once with an error saying so (wrapping
//     kerr.MessageTooLarge), as franz-go would: it holds a key's whole state, which a dead
//     letter would lose from the changelog (a restore would then rebuild another state), so
//     the checkpoint aborts and consumer/failure.go bounds the repeats.

// recordBatchOverhead is franz-go's size of a v2 record batch without records: its 4-byte
// length prefix in the produce request (which the broker does not count against
// max.message.bytes) and the 61-byte batch header.
const recordBatchOverhead = 65

// batchBytes returns the size franz-go gives a record batch holding r alone (kgo's
// recBatch.wireLength for a new batch): the batch overhead, then the record with its varint
// length prefix: attributes, timestamp and offset deltas (0 for a batch's first record), key,
// value and headers, each with its varint length. It is the largest of franz-go's measures,
// the one it uses until it knows the broker's produce version (a client's first records):
// franz-go then fails r with kerr.MessageTooLarge exactly when this exceeds the topic's batch
// bound; later, with a flexible produce version, it measures up to 3 bytes less. So a record
// within it always fits, and one over it may not. It reads r and keeps nothing.
func batchBytes(r *kgo.Record) int {
	l := 1 + // attributes
		kbin.VarlongLen(0) + // timestamp delta
		kbin.VarintLen(0) + // offset delta
		kbin.VarintLen(int32(len(r.Key))) + len(r.Key) +
		kbin.VarintLen(int32(len(r.Value))) + len(r.Value) +
		kbin.VarintLen(int32(len(r.Headers)))
	for _, h := range r.Headers {
		l += kbin.VarintLen(int32(len(h.Key))) + len(h.Key) + kbin.VarintLen(int32(len(h.Value))) + len(h.Value)
	}
	return recordBatchOverhead + kbin.VarintLen(int32(l)) + l
}

// LimitSizes returns a Producer that sends every record through p unless it is larger than its
// topic accepts on its own, which it handles as described above. limit(topic) must be the
// bound the producer gives the topic's batches (producer.Limits.BatchMaxBytes); plan names the
// dead-letter and changelog topics; m counts the dead letters (nil: none counted). The result
// is safe for concurrent use if p and limit are; it keeps nothing of a record after Produce
// returns except through p. Wrap the producer that writes to Kafka last (after a value
// encoder): the check must see the bytes that are sent.
func LimitSizes(p Producer, plan *plan.Plan, limit func(topic string) int32, m *Metrics) Producer {
	s := &sizeLimiter{p: p, limit: limit, dlq: plan.Config.DLQTopic(), changelogs: map[string]bool{}, m: m}
	for _, c := range plan.Chains {
		if c.Changelog != "" {
			s.changelogs[c.Changelog] = true
		}
	}
	return s
}

// sizeLimiter is LimitSizes' Producer. Its fields are set once, then only read.
type sizeLimiter struct {
	p          Producer
	limit      func(topic string) int32
	dlq        string
	changelogs map[string]bool
	m          *Metrics
}

func (s *sizeLimiter) Produce(r *kgo.Record, promise func(*kgo.Record, error)) {
	limit := int(s.limit(r.Topic))
	size := batchBytes(r)
	switch {
	case size <= limit:
		s.p.Produce(r, promise)
	case r.Topic == s.dlq:
		fitDeadLetter(r, limit)
		s.p.Produce(r, promise)
	case s.changelogs[r.Topic]:
		promise(r, fmt.Errorf("a changelog record of %d bytes (key %d, value %d) for topic %s, over its limit of %d bytes (max.message.bytes): a key's state this large cannot be stored; raise the topic's max.message.bytes: %w",
			size, len(r.Key), len(r.Value), r.Topic, limit, kerr.MessageTooLarge))
	default:
		op := "produce " + r.Topic
		s.m.deadLetter(op)
		dl := newTooLargeDeadLetter(s.dlq, r, op, size, limit)
		fitDeadLetter(dl, int(s.limit(s.dlq)))
		s.p.Produce(dl, promise)
	}
}

// newTooLargeDeadLetter returns the dead letter of r, a record of size bytes (batchBytes) that
// its topic's limit refuses: its key and value (copied, truncated to DeadLetterMaxBytes, with
// the original sizes when cut), the reason, the operator, and the destination topic.
func newTooLargeDeadLetter(dlq string, r *kgo.Record, op string, size, limit int) *kgo.Record {
	key, cutKey := clip(r.Key, DeadLetterMaxBytes)
	value, cutValue := clip(r.Value, DeadLetterMaxBytes)
	reason := "too large: a record of " + strconv.Itoa(size) + " bytes for topic " + r.Topic +
		", over its limit of " + strconv.Itoa(limit) + " bytes (max.message.bytes; the size counts key, value, headers and the overhead of a record batch)"
	hs := codec.AppendTooLargeHeaders(make([]kgo.RecordHeader, 0, 5), clipReason(reason), op, r.Topic)
	if cutKey || cutValue {
		hs = codec.AppendOriginalSizes(hs, len(r.Key), len(r.Value))
	}
	return &kgo.Record{Topic: dlq, Key: key, Value: value, Partition: -1, Headers: hs}
}

// fitDeadLetter cuts the value, then the key, of dead letter r until it fits a batch of limit
// bytes on its own, and records their sizes before the cut (unless r says them already). A dead
// letter whose headers alone do not fit is left too large: its produce fails.
func fitDeadLetter(r *kgo.Record, limit int) {
	if batchBytes(r) <= limit {
		return
	}
	if codec.Header(r, codec.HeaderOriginalValueSize) == nil {
		r.Headers = codec.AppendOriginalSizes(r.Headers, len(r.Key), len(r.Value))
	}
	// Cutting n bytes shrinks the record by n or more (a length's varint may shrink too).
	over := batchBytes(r) - limit
	n := min(over, len(r.Value))
	r.Value = r.Value[:len(r.Value)-n]
	over -= n
	n = min(max(over, 0), len(r.Key))
	r.Key = r.Key[:len(r.Key)-n]
}
