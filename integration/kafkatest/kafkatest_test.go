package kafkatest

import (
	"context"
	"fmt"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// eachCluster runs fn against an in-process kfake cluster and, when $SLUICE_TEST_KAFKA is set
// (or required), against the real broker.
func eachCluster(t *testing.T, fn func(t *testing.T, brokers string)) {
	t.Run("kfake", func(t *testing.T) { fn(t, Fake(t, 4)) })
	t.Run("kafka", func(t *testing.T) { fn(t, Brokers(t)) })
}

func TestTransactionalRoundTrip(t *testing.T) {
	eachCluster(t, func(t *testing.T, brokers string) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		topic := UniqueName(t, "txn")
		CreateTopic(t, brokers, topic, 3, nil)

		p := Client(t, brokers, kgo.TransactionalID(UniqueName(t, "tx")), kgo.DefaultProduceTopic(topic))
		produce := func(commit bool, values ...string) {
			t.Helper()
			if err := p.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			for _, v := range values {
				if err := p.ProduceSync(ctx, kgo.StringRecord(v)).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
				t.Fatal(err)
			}
		}
		produce(true, "a", "b")
		produce(false, "aborted")
		produce(true, "c")

		c := Client(t, brokers, kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		var got []string
		for len(got) < 3 {
			fs := c.PollFetches(ctx)
			if err := fs.Err0(); err != nil {
				t.Fatalf("after %v: %v", got, err)
			}
			fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		}
		if fmt.Sprint(got) != "[a b c]" {
			t.Fatalf("read_committed consumer got %v, want [a b c]", got)
		}
	})
}

func TestCreateTopicDefaultPartitions(t *testing.T) {
	brokers := Fake(t, 5)
	topic := UniqueName(t, "dflt")
	CreateTopic(t, brokers, topic, -1, nil)
	// A manual partitioner proves partition 4 (the fifth) exists.
	cl := Client(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	r := &kgo.Record{Topic: topic, Partition: 4, Value: []byte("x")}
	if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
		t.Fatalf("produce to partition 4 of a default-partitioned topic: %v", err)
	}
}

func TestFakeSeedsTopics(t *testing.T) {
	brokers := Fake(t, 2, "seeded")
	cl := Client(t, brokers, kgo.DefaultProduceTopic("seeded"))
	if err := cl.ProduceSync(context.Background(), kgo.StringRecord("x")).FirstErr(); err != nil {
		t.Fatalf("produce to seeded topic: %v", err)
	}
}

func TestUniqueName(t *testing.T) {
	a, b := UniqueName(t, "orders"), UniqueName(t, "orders")
	if a == b {
		t.Fatalf("two calls gave the same name %q", a)
	}
	valid := regexp.MustCompile(`^orders-TestUniqueName-[0-9a-f]{8}$`)
	if !valid.MatchString(a) {
		t.Fatalf("UniqueName = %q, want it to match %v", a, valid)
	}
	t.Run(strings.Repeat("long/sub test name ", 20), func(t *testing.T) {
		n := UniqueName(t, "p")
		if len(n) > 200 || !regexp.MustCompile(`^p-[A-Za-z0-9_-]+$`).MatchString(n) {
			t.Fatalf("UniqueName = %q (%d chars): want ≤ 200 topic-safe characters", n, len(n))
		}
	})
}

func TestSplitBrokers(t *testing.T) {
	got := SplitBrokers(" a:1, ,b:2,")
	if fmt.Sprint(got) != "[a:1 b:2]" {
		t.Fatalf("SplitBrokers = %q", got)
	}
}

// outcomeTB records how Brokers ended a test without ending the real one.
type outcomeTB struct {
	testing.TB
	outcome string
}

func (o *outcomeTB) Helper() {}
func (o *outcomeTB) Skipf(format string, args ...any) {
	o.outcome = "skip: " + fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (o *outcomeTB) Fatalf(format string, args ...any) {
	o.outcome = "fatal: " + fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestBrokersEnvironment(t *testing.T) {
	for _, tc := range []struct {
		name, kafka, ci, require string
		want                     string
	}{
		{name: "set", kafka: " 127.0.0.1:19092 ", ci: "true", want: "addr: 127.0.0.1:19092"},
		{name: "local", want: "skip: "},
		{name: "ci", ci: "true", want: "fatal: "},
		{name: "required", require: "1", want: "fatal: "},
		{name: "ci-not-true", ci: "1", want: "skip: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(EnvBrokers, tc.kafka)
			t.Setenv("CI", tc.ci)
			t.Setenv(EnvRequire, tc.require)
			o := &outcomeTB{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				o.outcome = "addr: " + Brokers(o)
			}()
			<-done
			if !strings.HasPrefix(o.outcome, tc.want) {
				t.Fatalf("Brokers ended with %q, want prefix %q", o.outcome, tc.want)
			}
			if strings.HasPrefix(tc.want, "skip") || strings.HasPrefix(tc.want, "fatal") {
				if !strings.Contains(o.outcome, "integration/kafka/kafka.sh start") {
					t.Fatalf("message %q does not say how to start the broker", o.outcome)
				}
			}
		})
	}
}
