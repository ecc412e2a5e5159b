package workload

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/integration/kafkatest"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestExpectedCogroup: two specs over the same customers with different seeds give each
// customer an orders side equal to the first's totals and a refunds side equal to the second's.
func TestExpectedCogroup(t *testing.T) {
	orders := Spec{Records: 3000, Keys: 700, Partitions: 4, Seed: 1}
	refunds := orders
	refunds.Seed = 2
	got := ExpectedCogroup(orders, refunds)
	o, r := orders.Expected(), refunds.Expected()
	if len(got) != len(o)+len(r) {
		t.Fatalf("%d entries, want %d + %d", len(got), len(o), len(r))
	}
	same := 0
	for k, w := range o {
		if got[CogroupKey([]byte(k), SideOrders)] != w {
			t.Fatalf("%s orders side %v, want %v", k, got[CogroupKey([]byte(k), SideOrders)], w)
		}
		if r[k] == w {
			same++
		}
	}
	for k, w := range r {
		if got[CogroupKey([]byte(k), SideRefunds)] != w {
			t.Fatalf("%s refunds side %v, want %v", k, got[CogroupKey([]byte(k), SideRefunds)], w)
		}
	}
	if same > len(o)/10 {
		t.Fatalf("%d of %d customers have the same orders and refunds: the seeds do not differ", same, len(o))
	}
}

// TestCogroupPipelineParses: the pipeline is a config sluice's parser reads (once main has the
// cogroup operator; until then the parser refuses it and the test says so).
func TestCogroupPipelineParses(t *testing.T) {
	cfg := "kafka: {brokers: [127.0.0.1:9092]}\ngroup: g\n" + CogroupPipeline("o", "r", "out")
	if _, err := configs.Parse([]byte(cfg), nil); err != nil {
		if strings.Contains(err.Error(), "cogroup") {
			t.Skipf("this sluice has no cogroup operator yet: %v", err)
		}
		t.Fatal(err)
	}
}

// TestReadCogroup writes balances the way an aggregate does (the last per key wins), with a side
// that had no record yet as 0, null or absent, a tombstone and an aborted transaction:
// ReadCogroup keeps each customer's last balance, one entry per side that had records.
func TestReadCogroup(t *testing.T) {
	ctx := timeout(t)
	brokers := kafkatest.Fake(t, 3)
	topic := kafkatest.UniqueName(t, "balances")
	kafkatest.CreateTopic(t, brokers, topic, 3, nil)
	p := kafkatest.Client(t, brokers, kgo.TransactionalID(kafkatest.UniqueName(t, "tx")), kgo.DefaultProduceTopic(topic))
	txn := func(commit bool, kvs ...string) {
		t.Helper()
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(kvs); i += 2 {
			r := &kgo.Record{Key: []byte(kvs[i]), Value: []byte(kvs[i+1])}
			if kvs[i+1] == "<nil>" {
				r.Value = nil
			}
			if err := p.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	read := func() (map[string]Total, int) {
		t.Helper()
		got, n, err := ReadCogroup(ctx, kafkatest.SplitBrokers(brokers), topic)
		if err != nil {
			t.Fatal(err)
		}
		return got, n
	}
	txn(true,
		"c-1", `{"key":"c-1","spent":10,"refunded":0,"orders":1,"refunds":0}`,
		"c-1", `{"key":"c-1","spent":22.50,"refunded":3.25,"orders":2,"refunds":1}`,
		"c-2", `{"key":"c-2","spent":null,"refunded":1.5,"orders":null,"refunds":1}`,
		"c-3", `{"key":"c-3","spent":0.01,"orders":1}`,
		"", `{"key":"c-4","spent":"7.00","refunded":"0","orders":"1","refunds":"0"}`,
		"c-5", `{"key":"c-5","spent":1,"orders":1}`,
	)
	txn(false, "c-1", `{"key":"c-1","spent":99,"refunded":99,"orders":9,"refunds":9}`)
	txn(true, "c-5", "<nil>")
	got, n := read()
	want := map[string]Total{
		"c-1|orders": {2250, 2}, "c-1|refunds": {325, 1},
		"c-2|refunds": {150, 1},
		"c-3|orders":  {1, 1},
		"c-4|orders":  {700, 1},
	}
	if d := Diff(want, got, 10); d != nil || n != 4 {
		t.Fatalf("ReadCogroup: %d customers, %v", n, d)
	}

	// A wrong balance shows as a difference from what was expected.
	txn(true, "c-2", `{"key":"c-2","spent":0,"refunded":1.5,"orders":0,"refunds":2}`)
	got, _ = read()
	if d := Diff(want, got, 10); len(d) != 1 || !strings.Contains(d[0], "c-2|refunds: got sum=1.50 count=2, want sum=1.50 count=1") {
		t.Fatalf("Diff of a wrong count: %v", d)
	}

	for _, bad := range []struct{ value, err string }{
		{`{"key":"c-6","spent":1.234,"orders":1}`, `field "spent"`},
		{`{"key":"c-6","spent":1,"orders":"x"}`, `field "orders"`},
		{`[1,2]`, "want an object"},
	} {
		topic := kafkatest.UniqueName(t, "bad")
		kafkatest.CreateTopic(t, brokers, topic, 1, nil)
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := p.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte("c-6"), Value: []byte(bad.value)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := p.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
		if _, _, err := ReadCogroup(ctx, kafkatest.SplitBrokers(brokers), topic); err == nil || !strings.Contains(err.Error(), bad.err) || !strings.Contains(err.Error(), "offset 0") {
			t.Errorf("ReadCogroup of %s: %v, want an error with %q", bad.value, err, bad.err)
		}
	}
}
