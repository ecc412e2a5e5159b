package task

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/changelog/codec"
	"github.com/sluice-dev/sluice/state"
)

// TestDeadLetterOnceAfterBacklogAbort pins a bug the metamorphic test found: in
// backlog mode a checkpoint used to commit the dead letters of the records seen so far without
// their input offset (good records before them still wait in the sorter); after an abort and a
// rewind, the dead letters were committed a second time. Dead letters are now held until the
// checkpoint whose offset moves past them.
func TestDeadLetterOnceAfterBacklogAbort(t *testing.T) {
	plan := mustPlan(t, testConfig("always", 50, 10, 100))
	tk := newTestTask(t, plan, state.NewMem(), 1<<20, 0)
	prod := newFakeProducer()
	recs := []*kgo.Record{
		{Topic: testTopic, Offset: 0, Key: []byte("c-1"), Value: []byte(`{"customer_id":"c-1","amount":1.5,"ts":1}`), Timestamp: time.UnixMilli(1)},
		{Topic: testTopic, Offset: 1, Key: []byte("c-1"), Value: []byte(`{"customer_id":`), Timestamp: time.UnixMilli(2)},
	}
	const huge = 1 << 40
	if tk.Observe(testTopic, huge, 0) {
		t.Fatal("entering backlog on the first lag must not need a checkpoint")
	}
	if err := tk.Process(testTopic, recs); err != nil {
		t.Fatal(err)
	}
	// A periodic checkpoint while in backlog: commits the dead letter, not the offset.
	pd, err := tk.Checkpoint(prod)
	if err != nil {
		t.Fatal(err)
	}
	prod.commit()
	if err := tk.Committed(pd); err != nil {
		t.Fatal(err)
	}
	if _, ok := pd.Offsets[testTopic]; ok {
		t.Fatalf("offset committed while records wait in the sorter: %v", pd.Offsets)
	}
	// The next checkpoint aborts (a produce error, a fenced transaction): rewind.
	pd, err = tk.Checkpoint(prod)
	if err != nil {
		t.Fatal(err)
	}
	prod.abort()
	seek := tk.Aborted(pd)
	// Nothing of the task was in the aborted transaction: it keeps its sorted records (and the
	// held dead letter) and the consumer resumes after them.
	if seek[testTopic] != 2 {
		t.Fatalf("rewind to %v, want offset 2 (sorted records kept)", seek)
	}
	// The consumer resumes at offset 2 with nothing more to read: caught up.
	if tk.Observe(testTopic, 0, 0) {
		if err := commitCheckpoint(tk, prod); err != nil {
			t.Fatal(err)
		}
	}
	if err := commitCheckpoint(tk, prod); err != nil {
		t.Fatal(err)
	}
	dead := prod.committed(testGroup + "-dlq")
	if len(dead) != 1 {
		t.Errorf("bad record at offset 1 was committed to the dead-letter topic %d times, want exactly once", len(dead))
	}
}

// commitCheckpoint runs a checkpoint that commits.
func commitCheckpoint(tk *Task, prod *fakeProducer) error {
	pd, err := tk.Checkpoint(prod)
	if err != nil {
		return err
	}
	prod.commit()
	return tk.Committed(pd)
}

// header returns the value of the record's header key and whether it has one.
func header(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// TestDeadLetterTruncated: a bad record larger than DeadLetterMaxBytes (key or value) leaves as
// a dead letter holding the first DeadLetterMaxBytes bytes, with its original sizes in
// headers beside the source's topic, partition and offset; its reason is cut too (an error may
// quote the input). A small bad record, a tombstone and a null key leave as they came, without
// size headers. Every dead letter fits the producer's bound for the dead-letter topic.
func TestDeadLetterTruncated(t *testing.T) {
	bigValue := `{"customer_id":"c-1","amount":` + strings.Repeat("1", 5<<20) // 5 MiB, unterminated
	bigKey := strings.Repeat("k", 3<<20)
	recs := []*kgo.Record{
		{Key: []byte("c-1"), Value: []byte(bigValue)},
		// The key field differs from the 3 MiB Kafka key: the reason quotes both.
		{Key: []byte(bigKey), Value: []byte(`{"customer_id":"c-1","amount":1,"ts":5}`)},
		{Key: []byte("c-1"), Value: []byte(`{"customer_id":"c-1","amount":`)},
		{Key: nil, Value: nil},
		{Key: []byte("c-1"), Value: []byte(`{"customer_id":"c-1","amount":2,"ts":5}`)},
	}
	for i, r := range recs {
		r.Topic, r.Partition, r.Offset, r.Timestamp = testTopic, 0, int64(i), time.UnixMilli(5)
	}
	plan := mustPlan(t, testConfig("never", 50, 10, 100))
	tk := newTestTask(t, plan, state.NewMem(), 1<<20, 0)
	prod := newFakeProducer()
	stream(t, tk, prod, recs...)
	dead := prod.committed(testGroup + "-dlq")
	if len(dead) != 4 {
		t.Fatalf("%d dead letters, want 4", len(dead))
	}
	for i, want := range []struct {
		keyLen, valueLen int
		cut              bool
		reason           string
	}{
		{3, DeadLetterMaxBytes, true, "invalid JSON"},
		{DeadLetterMaxBytes, len(recs[1].Value), true, "differs from record key"},
		{3, len(recs[2].Value), false, "invalid JSON"},
		{0, 0, false, "empty value"},
	} {
		dl := dead[i]
		src := recs[i]
		if len(dl.Key) != want.keyLen || len(dl.Value) != want.valueLen {
			t.Errorf("dead letter %d: key %d bytes, value %d bytes; want %d and %d", i, len(dl.Key), len(dl.Value), want.keyLen, want.valueLen)
		}
		if string(dl.Key) != string(src.Key[:len(dl.Key)]) || string(dl.Value) != string(src.Value[:len(dl.Value)]) {
			t.Errorf("dead letter %d: key and value are not the start of the record's", i)
		}
		if (src.Key == nil) != (dl.Key == nil) || (src.Value == nil) != (dl.Value == nil) {
			t.Errorf("dead letter %d: null key %v / value %v, the record's %v / %v", i, dl.Key == nil, dl.Value == nil, src.Key == nil, src.Value == nil)
		}
		reason, _ := header(dl, codec.HeaderError)
		if !strings.Contains(reason, want.reason) || len(reason) > maxReasonBytes+100 {
			t.Errorf("dead letter %d: reason (%d bytes) %.200q, want at most ~%d bytes containing %q", i, len(reason), reason, maxReasonBytes, want.reason)
		}
		if off, _ := header(dl, codec.HeaderSourceOffset); off != strconv.Itoa(i) {
			t.Errorf("dead letter %d: %s = %q", i, codec.HeaderSourceOffset, off)
		}
		if tp, _ := header(dl, codec.HeaderSourceTopic); tp != testTopic {
			t.Errorf("dead letter %d: %s = %q", i, codec.HeaderSourceTopic, tp)
		}
		ks, hasK := header(dl, codec.HeaderOriginalKeySize)
		vs, hasV := header(dl, codec.HeaderOriginalValueSize)
		if want.cut {
			if ks != strconv.Itoa(len(src.Key)) || vs != strconv.Itoa(len(src.Value)) {
				t.Errorf("dead letter %d: original sizes key %q value %q, want %d and %d", i, ks, vs, len(src.Key), len(src.Value))
			}
		} else if hasK || hasV {
			t.Errorf("dead letter %d: original size headers on a dead letter that was not cut", i)
		}
		size := len(dl.Key) + len(dl.Value)
		for _, h := range dl.Headers {
			size += len(h.Key) + len(h.Value)
		}
		if size > 2*DeadLetterMaxBytes+4<<10 {
			t.Errorf("dead letter %d is %d bytes", i, size)
		}
	}
	if got := prod.lastByKey(testSink)["c-1"]; !strings.Contains(got, `"n":1`) {
		t.Errorf("the good record after the bad ones was not aggregated: %s", got)
	}
}
