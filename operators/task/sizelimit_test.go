package task

import (
	"github.com/sluice-dev/sluice/changelog/codec"

	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestBatchBytesMatchesFranzGo: batchBytes is franz-go's own measure of a record alone in a
// batch, checked against franz-go itself (the oracle). On a client that has not produced yet
// (it does not know the broker's produce version, and measures a batch the largest way it
// can), with the topic's batch bound one byte below batchBytes(r), franz-go fails r at once
// with kerr.MessageTooLarge; with the bound at batchBytes(r), it produces r (to kfake, whose
// limit is far above), then and once it knows the version (a flexible request's measure is up
// to 3 bytes smaller: the check is conservative by that much). The records cross the widths of
// every varint (lengths of 63/64 and 8191/8192 bytes), with null and empty keys and values, and
// headers.
func TestBatchBytesMatchesFranzGo(t *testing.T) {
	hs := []kgo.RecordHeader{{Key: "sluice.error", Value: []byte("x")}, {Key: "h", Value: bytes.Repeat([]byte("v"), 200)}}
	var recs []*kgo.Record
	for _, k := range []int{-1, 0, 63, 64, 300} {
		for _, v := range []int{-1, 0, 447, 448, 8191, 8192, 300 << 10} {
			for _, h := range [][]kgo.RecordHeader{nil, hs} {
				r := &kgo.Record{Headers: h}
				if k >= 0 {
					r.Key = bytes.Repeat([]byte("k"), k)
				}
				if v >= 0 {
					r.Value = bytes.Repeat([]byte("v"), v)
				}
				if batchBytes(r) > 512 { // franz-go's smallest bound
					recs = append(recs, r)
				}
			}
		}
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "over", "fit"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	for i, r := range recs {
		what := fmt.Sprintf("record %d (key %d bytes, value %d, %d headers; batchBytes %d)", i, len(r.Key), len(r.Value), len(r.Headers), batchBytes(r))
		n := int32(batchBytes(r))
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerBatchMaxBytesFn(func(topic string) int32 {
			if topic == "over" {
				return n - 1
			}
			return n
		}))
		if err != nil {
			t.Fatal(err)
		}
		over := &kgo.Record{Topic: "over", Key: r.Key, Value: r.Value, Headers: r.Headers}
		if err := cl.ProduceSync(ctx, over).FirstErr(); !errors.Is(err, kerr.MessageTooLarge) {
			t.Errorf("%s with a bound of batchBytes-1: %v, want MESSAGE_TOO_LARGE", what, err)
		}
		for range 2 { // before and after the client knows the produce version
			fit := &kgo.Record{Topic: "fit", Key: r.Key, Value: r.Value, Headers: r.Headers}
			if err := cl.ProduceSync(ctx, fit).FirstErr(); err != nil {
				t.Errorf("%s with a bound of batchBytes: %v, want it produced", what, err)
			}
		}
		cl.Close()
	}
}

// TestLimitSizes: the tasks' producer keeps every record within its topic's bound. A record
// that fits goes out as it is; one too large for a sink becomes a dead letter in its place
// (reason with "too large", its size, the topic and its limit; the destination topic; key and
// value bounded; counted), and its promise hears the dead letter's produce; a dead letter too
// large for the dead-letter topic is cut to fit with its original sizes; a changelog record too
// large fails at once with MESSAGE_TOO_LARGE naming the topic and produces nothing.
func TestLimitSizes(t *testing.T) {
	plan := mustPlan(t, testConfig("auto", 1000, 10, 100))
	dlq, changelogTopic := plan.Config.DLQTopic(), plan.Config.ChangelogTopic(testOp)
	const sinkLimit, dlqLimit = 16 << 10, 20 << 10
	limit := func(topic string) int32 {
		switch topic {
		case testSink, changelogTopic:
			return sinkLimit
		case dlq:
			return dlqLimit
		}
		return 1_000_012
	}
	reg := prometheus.NewRegistry()
	fp := newFakeProducer()
	p := LimitSizes(fp, plan, limit, NewMetrics(reg))
	type result struct {
		r   *kgo.Record
		err error
	}
	produce := func(r *kgo.Record) result {
		var res result
		called := 0
		p.Produce(r, func(r *kgo.Record, err error) { res.r, res.err = r, err; called++ })
		if called != 1 {
			t.Fatalf("promise called %d times, want once", called)
		}
		return res
	}
	last := func() *kgo.Record { return fp.txn[len(fp.txn)-1] }

	// Fits: as it is. The bound is checked by batchBytes, which TestBatchBytesMatchesFranzGo
	// checks against franz-go; a value of sinkLimit-100 bytes with a short key fits.
	fits := &kgo.Record{Topic: testSink, Key: []byte("c-1"), Value: bytes.Repeat([]byte("a"), sinkLimit-100), Partition: -1}
	if res := produce(fits); res.err != nil || len(fp.txn) != 1 || last().Topic != testSink || !bytes.Equal(last().Value, fits.Value) {
		t.Fatalf("a record that fits: err %v, produced %d records", res.err, len(fp.txn))
	}

	// Too large for the sink: a dead letter instead.
	big := &kgo.Record{Topic: testSink, Key: []byte("c-2"), Value: bytes.Repeat([]byte("b"), sinkLimit), Partition: -1}
	size := batchBytes(big)
	res := produce(big)
	dl := last()
	if res.err != nil || len(fp.txn) != 2 || dl.Topic != dlq {
		t.Fatalf("a record too large: err %v, last record to %s; want a dead letter to %s", res.err, dl.Topic, dlq)
	}
	reason := string(codec.Header(dl, codec.HeaderError))
	for _, want := range []string{"too large", strconv.Itoa(size) + " bytes", "topic " + testSink, strconv.Itoa(sinkLimit) + " bytes", "max.message.bytes"} {
		if !strings.Contains(reason, want) {
			t.Errorf("reason %q does not say %q", reason, want)
		}
	}
	if got := string(codec.Header(dl, codec.HeaderDestinationTopic)); got != testSink {
		t.Errorf("%s = %q, want %s", codec.HeaderDestinationTopic, got, testSink)
	}
	if got := string(codec.Header(dl, codec.HeaderOperator)); got != "produce "+testSink {
		t.Errorf("%s = %q, want %q", codec.HeaderOperator, got, "produce "+testSink)
	}
	if !bytes.Equal(dl.Key, big.Key) || !bytes.Equal(dl.Value, big.Value) || codec.Header(dl, codec.HeaderOriginalValueSize) != nil {
		t.Errorf("dead letter: key %q, value %d bytes, original size %q; want the record's key and value uncut", dl.Key, len(dl.Value), codec.Header(dl, codec.HeaderOriginalValueSize))
	}
	if res.r.Topic != dlq {
		t.Errorf("the promise heard of a record to %s, want the dead letter's produce", res.r.Topic)
	}
	if n := sumMetric(t, reg, "sluice_dead_letters_total"); n != 1 {
		t.Errorf("sluice_dead_letters_total = %v, want 1", n)
	}

	// Larger than the dead-letter topic accepts too: cut to fit, with the original sizes.
	huge := &kgo.Record{Topic: testSink, Key: []byte("c-3"), Value: bytes.Repeat([]byte("c"), 64<<10), Partition: -1}
	produce(huge)
	dl = last()
	if dl.Topic != dlq || batchBytes(dl) > dlqLimit || batchBytes(dl) < dlqLimit-8 || !bytes.HasPrefix(huge.Value, dl.Value) {
		t.Errorf("dead letter of a 64 KiB record: to %s, %d bytes in a batch, value %d bytes; want its first bytes, cut to fit %d", dl.Topic, batchBytes(dl), len(dl.Value), dlqLimit)
	}
	if got := string(codec.Header(dl, codec.HeaderOriginalValueSize)); got != strconv.Itoa(64<<10) {
		t.Errorf("%s = %q, want %d", codec.HeaderOriginalValueSize, got, 64<<10)
	}

	// A dead letter of the tasks' own that the dead-letter topic cannot take: cut the same way.
	own := newDeadLetter(dlq, &kgo.Record{Topic: testTopic, Key: []byte("k"), Value: bytes.Repeat([]byte("d"), 100<<10)}, "source orders", "invalid JSON", nil)
	if res := produce(own); res.err != nil || batchBytes(last()) > dlqLimit || string(codec.Header(last(), codec.HeaderSourceTopic)) != testTopic {
		t.Errorf("a dead letter of 100 KiB for a dead-letter topic of 20 KiB: err %v, %d bytes; want it cut to fit, its headers kept", res.err, batchBytes(last()))
	}

	// A changelog record too large: fails at once, nothing produced.
	n := len(fp.txn)
	state := &kgo.Record{Topic: changelogTopic, Partition: 0, Key: []byte("c-4"), Value: bytes.Repeat([]byte("s"), sinkLimit)}
	res = produce(state)
	if !errors.Is(res.err, kerr.MessageTooLarge) || !strings.Contains(res.err.Error(), changelogTopic) || len(fp.txn) != n {
		t.Errorf("a changelog record too large: %v (%d records produced); want MESSAGE_TOO_LARGE naming %s and none", res.err, len(fp.txn)-n, changelogTopic)
	}
	if n := sumMetric(t, reg, "sluice_dead_letters_total"); n != 2 {
		t.Errorf("sluice_dead_letters_total = %v, want 2 (the two records too large for the sink)", n)
	}
}
