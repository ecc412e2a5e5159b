package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	havro "github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
	"github.com/sluice-dev/sluice/integration/kafkatest"
	"github.com/sluice-dev/sluice/operators/avro"
)

// Environment of the format tests: the base URL of a real schema registry speaking the
// Confluent protocol (integration/registry/registry.sh starts Apicurio Registry and
// integration/test.sh exports it), and whether its absence fails the tests instead of skipping
// them.
const (
	envRegistry        = "SLUICE_TEST_REGISTRY"
	envRequireRegistry = "SLUICE_REQUIRE_REGISTRY"
)

// registryURL returns the test registry's URL, or skips (fails under SLUICE_REQUIRE_REGISTRY=1).
func registryURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv(envRegistry)
	if u == "" {
		if os.Getenv(envRequireRegistry) == "1" {
			t.Fatalf("%s=1 but %s is not set: start one with integration/registry/registry.sh start", envRequireRegistry, envRegistry)
		}
		t.Skipf("no schema registry: set %s (integration/registry/registry.sh start prints one)", envRegistry)
	}
	return u
}

// orderSchema is the writer schema of the Avro orders: the workload's orders with the amount
// as a decimal and the time as timestamp-millis, plus an optional field the pipeline ignores.
const orderSchema = `{
  "type": "record", "name": "Order", "namespace": "sluice.e2e",
  "fields": [
    {"name": "order_id", "type": "string"},
    {"name": "customer_id", "type": "string"},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "note", "type": ["null", "string"], "default": null}
  ]
}`

// totalSchema is the Avro schema of the totals sink: the aggregate's output object.
const totalSchema = `{"type":"record","name":"Total","namespace":"sluice.e2e","fields":[{"name":"key","type":"string"},` +
	`{"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":20,"scale":2}},{"name":"orders","type":"long"}]}`

// TestAvro runs `sluice run` on a topic of Confluent-framed Avro orders whose schema is
// registered in a real registry, with JSON-text Kafka keys (key_format: json), writing its
// totals as Avro too (the schema registered by sluice under the topic-record subject): the
// totals read back through the registry must be exact, and records that do not decode (wrong
// magic byte, unknown schema id, bytes that do not match the schema) must land in the
// dead-letter topic with a sluice.error that says why.
func TestAvro(t *testing.T) {
	regURL := registryURL(t)
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	brokers := kafkatest.Fake(t, 4)
	good := workload.Spec{Records: 3_000, Keys: 150, Partitions: 4, Seed: 47}
	// No backlog mode: the nudges of waitCaughtUp would be JSON, so the pipeline stays in
	// real-time mode and waitCommitted runs without them.
	p := newPipeline(t, brokers, pipelineOpts{partitions: 4, keys: good.Keys, enterLag: 1 << 40, exitLag: 500})
	cfg, err := os.ReadFile(p.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	src := "orders: {topic: " + p.topic + ", format: json, key: customer_id, timestamp: ts}"
	if !strings.Contains(string(cfg), src) {
		t.Fatalf("the pipeline's source is not %q:\n%s", src, cfg)
	}
	cfg = []byte(strings.Replace(string(cfg), src, "orders: {topic: "+p.topic+", format: avro, key_format: json, key: customer_id, timestamp: ts}", 1))
	sinkLine := "totals_out: {topic: " + p.sink + ", format: json}"
	if !strings.Contains(string(cfg), sinkLine) {
		t.Fatalf("the pipeline's sink is not %q:\n%s", sinkLine, cfg)
	}
	cfg = []byte(strings.Replace(string(cfg), sinkLine, "totals_out: {topic: "+p.sink+", format: avro, subject_strategy: topic_record, schema: '"+totalSchema+"'}", 1))
	cfg = append(cfg, "schema_registry: {urls: ["+regURL+"], retry_timeout: 30s}\n"...)
	if err := os.WriteFile(p.cfgPath, cfg, 0o644); err != nil {
		t.Fatal(err)
	}

	rcl, err := sr.NewClient(sr.URLs(regURL))
	if err != nil {
		t.Fatal(err)
	}
	ss, err := rcl.CreateSchema(ctx, p.topic+"-value", sr.Schema{Schema: orderSchema, Type: sr.TypeAvro})
	if err != nil {
		t.Fatalf("registering the schema in %s: %v", regURL, err)
	}
	t.Logf("schema registered in %s: subject %s, id %d", regURL, ss.Subject, ss.ID)
	schema := havro.MustParse(orderSchema)
	var serde sr.ConfluentHeader
	encode := func(key, value []byte) (k, v []byte, err error) {
		o, err := orderFields(value)
		if err != nil {
			return nil, nil, err
		}
		if o["ts"].(time.Time).UnixMilli()%3 == 0 {
			o["note"] = map[string]any{"string": "gift"}
		}
		body, err := havro.Marshal(schema, o)
		if err != nil {
			return nil, nil, err
		}
		v, _ = serde.AppendEncode(nil, ss.ID, nil)
		k, _ = json.Marshal(string(key))
		return k, append(v, body...), nil
	}

	ts := workload.DefaultStartTS
	goodBody, _ := havro.Marshal(schema, map[string]any{"order_id": "bad", "customer_id": "c-0000001",
		"amount": big.NewRat(1, 1), "ts": time.UnixMilli(ts).UTC(), "note": nil})
	framed := func(id int, body []byte) []byte {
		v, _ := serde.AppendEncode(nil, id, nil)
		return append(v, body...)
	}
	bad := []struct {
		name, errHas string
		value        []byte
	}{
		{"JSON value", "magic byte 123", []byte(`{"order_id":"bad-1","customer_id":"c-0000001","amount":1.00,"ts":1}`)},
		{"unknown schema id", "schema id 987654 not found", framed(987654, goodBody)},
		{"truncated", "schema id", framed(ss.ID, goodBody[:len(goodBody)-3])},
		{"trailing bytes", "bytes left after the value", framed(ss.ID, append(slices.Clone(goodBody), 0, 0))},
	}
	cl := kafkatest.Client(t, brokers)
	produceBad := func() {
		for _, b := range bad {
			r := &kgo.Record{Topic: p.topic, Key: []byte(`"c-0000001"`), Value: b.value, Timestamp: time.UnixMilli(ts)}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatalf("producing %s: %v", b.name, err)
			}
		}
	}

	produceBad()
	in := p.newInstance("a0", false)
	in.start()
	err = workload.ProduceEach(ctx, cl, p.topic, func(fn func(key, value []byte, ts int64) error) error {
		return good.Each(func(key, value []byte, ts int64) error {
			k, v, err := encode(key, value)
			if err != nil {
				return err
			}
			return fn(k, v, ts)
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	produceBad()
	p.waitCommitted(ctx, 60*time.Second, false, in)
	in.term()
	if lines := in.logLines(0, "avro schema loaded"); len(lines) == 0 {
		t.Errorf("no \"avro schema loaded\" log line; last lines:\n%s", in.tail(20))
	}

	dlq := p.group + "-dlq"
	c := kafkatest.Client(t, brokers, kgo.ConsumeTopics(dlq), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	var got []*kgo.Record
	rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
	defer rcancel()
	for len(got) < 2*len(bad) {
		fs := c.PollFetches(rctx)
		if rctx.Err() != nil {
			break
		}
		if err := fs.Err0(); err != nil {
			t.Fatalf("reading %s: %v", dlq, err)
		}
		got = append(got, fs.Records()...)
	}
	if len(got) != 2*len(bad) {
		t.Errorf("%s holds %d records, want %d (each bad record twice)", dlq, len(got), 2*len(bad))
	}
	for _, b := range bad {
		same := func(r *kgo.Record) bool { return slices.Equal(r.Value, b.value) }
		if n := countFunc(got, same); n != 2 {
			t.Errorf("%s: %d times in %s, want 2", b.name, n, dlq)
		}
		i := slices.IndexFunc(got, same)
		if i < 0 {
			continue
		}
		var msg string
		for _, h := range got[i].Headers {
			if h.Key == "sluice.error" {
				msg = string(h.Value)
			}
		}
		if !strings.Contains(msg, b.errHas) {
			t.Errorf("%s: sluice.error %q does not mention %q", b.name, msg, b.errHas)
		} else {
			t.Logf("%s: sluice.error=%q", b.name, msg)
		}
	}
	p.checkTransactions(ctx, in.id)
	subject := p.sink + "-sluice.e2e.Total"
	if _, err := rcl.SchemaByVersion(ctx, subject, -1); err != nil {
		t.Errorf("the sink's schema is not under subject %s: %v", subject, err)
	}
	dec := avro.NewRegistry(avro.Options{Fetcher: rcl})
	gotTotals, err := workload.ReadTotalsDecoded(ctx, kafkatest.SplitBrokers(p.brokers), p.sink, "amount", "orders", dec.AppendJSON)
	if err != nil {
		t.Fatalf("reading the Avro totals: %v", err)
	}
	if d := workload.Diff(good.Expected(), gotTotals, 20); d != nil {
		t.Fatalf("totals differ from expected:\n%s", strings.Join(d, "\n"))
	}
	t.Logf("verified %d keys exactly, read as Avro through subject %s", len(gotTotals), subject)
}

// orderFields turns a workload order (JSON) into the fields of orderSchema for hamba/avro.
func orderFields(value []byte) (map[string]any, error) {
	var o struct {
		OrderID    string      `json:"order_id"`
		CustomerID string      `json:"customer_id"`
		Amount     json.Number `json:"amount"`
		TS         int64       `json:"ts"`
	}
	if err := json.Unmarshal(value, &o); err != nil {
		return nil, err
	}
	amount, ok := new(big.Rat).SetString(o.Amount.String())
	if !ok {
		return nil, fmt.Errorf("amount %q", o.Amount)
	}
	return map[string]any{"order_id": o.OrderID, "customer_id": o.CustomerID, "amount": amount,
		"ts": time.UnixMilli(o.TS).UTC(), "note": nil}, nil
}
