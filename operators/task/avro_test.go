package task

import (
	"context"
	"errors"
	"math/big"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	havro "github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/sluice-dev/sluice/changelog/codec"
	"github.com/sluice-dev/sluice/operators/avro"
	"github.com/sluice-dev/sluice/sorter"
	"github.com/sluice-dev/sluice/state"
)

const (
	avroCustomer = `{"type":"record","name":"Customer","fields":[{"name":"customer_id","type":"string"},{"name":"region","type":"string"}]}`
	avroOrder    = `{"type":"record","name":"Order","fields":[{"name":"customer_id","type":"string"},` +
		`{"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}},{"name":"ts","type":"long"}]}`
)

// schemas is a schema registry of fixed schemas that can be down.
type schemas struct {
	byID map[int]string
	down atomic.Bool
}

func (s *schemas) SchemaByID(_ context.Context, id int) (sr.Schema, error) {
	if s.down.Load() {
		return sr.Schema{}, errors.New("connection refused")
	}
	if sch, ok := s.byID[id]; ok {
		return sr.Schema{Schema: sch}, nil
	}
	return sr.Schema{}, &sr.ResponseError{StatusCode: http.StatusNotFound, Message: "not found"}
}

func (s *schemas) SchemaByVersion(context.Context, string, int) (sr.SubjectSchema, error) {
	return sr.SubjectSchema{}, &sr.ResponseError{StatusCode: http.StatusNotFound}
}

func (s *schemas) RegisterSchema(context.Context, string, sr.Schema, int, int) (int, error) {
	return 0, errors.New("read only")
}

func avroValue(t testing.TB, id int, schema string, v map[string]any) []byte {
	t.Helper()
	b, err := havro.Marshal(havro.MustParse(schema), v)
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte{0, 0, 0, 0, byte(id)}, b...)
}

// TestAvroTableAndStream: a table and a stream of format avro, read through a registry: rows
// are stored as their JSON and joined; an undecodable row or order (a string that is not UTF-8
// too) is a dead letter; an unreachable registry fails ProcessTable and Process instead of
// making dead letters.
func TestAvroTableAndStream(t *testing.T) {
	doc := joinConfig("left", false, "", "never", 100, 10, 1000, "0s", "")
	doc = strings.Replace(doc, "orders: {topic: orders, format: json,", "orders: {topic: orders, format: avro, key_format: string,", 1)
	doc = strings.Replace(doc, "customers: {topic: customers, key: customer_id}", "customers: {topic: customers, format: avro, key: customer_id}", 1)
	doc += "schema_registry: {urls: [http://registry.invalid:8081]}\n"
	reg := &schemas{byID: map[int]string{1: avroCustomer, 2: avroOrder}}
	prod := newFakeProducer()
	clk := &stepClock{now: time.Unix(1_700_000_000, 0)}
	tk, err := NewGroup(mustPlan(t, doc), []string{joinTable, testTopic}, 0, Deps{
		Store: state.NewMem(), Budget: sorter.NewBudget(1 << 20), SortDir: t.TempDir(), Producer: prod,
		Clock: clk.Now, Logger: discardLogger(),
		Values: avro.NewRegistry(avro.Options{Fetcher: reg, RetryTimeout: 0}),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tk.Close)

	tk.SetTableEnd(joinTable, 0, 2)
	rows := []*kgo.Record{
		{Topic: joinTable, Offset: 0, Key: []byte("c1"), Value: avroValue(t, 1, avroCustomer, map[string]any{"customer_id": "c1", "region": "EU"})},
		{Topic: joinTable, Offset: 1, Key: []byte("c2"), Value: []byte(`{"customer_id":"c2"}`)}, // JSON in an avro table
	}
	reg.down.Store(true)
	if err := tk.ProcessTable(joinTable, rows, -1); err == nil || !errors.Is(err, avro.ErrUnavailable) {
		t.Fatalf("ProcessTable with the registry down: %v, want ErrUnavailable", err)
	}
	reg.down.Store(false)
	if err := tk.ProcessTable(joinTable, rows, -1); err != nil {
		t.Fatal(err)
	}

	order := func(off int64, key string) *kgo.Record {
		return &kgo.Record{Topic: testTopic, Offset: off, Key: []byte(key), Timestamp: time.UnixMilli(100),
			Value: avroValue(t, 2, avroOrder, map[string]any{"customer_id": key, "amount": big.NewRat(1250, 100), "ts": int64(100)})}
	}
	tk.BeforeBatch(testTopic, Lag{Before: 4})
	bad := order(2, "c1")
	bad.Value[4] = 9 // an unknown schema id
	badKey := order(1, "c1")
	badKey.Key = []byte("c\xff")
	badString := order(3, "c1")
	if string(badString.Value[5:8]) != "\x04c1" {
		t.Fatalf("order value %x: customer_id not where expected", badString.Value)
	}
	badString.Value[7] = 0xff // customer_id "c\xff": an Avro string that is not UTF-8
	if err := tk.Process(testTopic, []*kgo.Record{order(0, "c1"), badKey, bad, badString}); err != nil {
		t.Fatal(err)
	}
	ddCheckpoint(t, tk, prod, false)
	var outs, dead []string
	for _, r := range prod.log {
		switch r.Topic {
		case testSink:
			outs = append(outs, string(r.Value))
		case testGroup + "-dlq":
			dead = append(dead, hdr(r, codec.HeaderSourceTopic)+"@"+hdr(r, codec.HeaderSourceOffset)+": "+hdr(r, codec.HeaderError))
		}
	}
	if want := `{"customer_id":"c1","amount":12.50,"ts":100,"customers":{"customer_id":"c1","region":"EU"}}`; len(outs) != 1 || outs[0] != want {
		t.Errorf("outputs %q, want [%s]", outs, want)
	}
	wantDead := []string{"magic byte 123", "not valid UTF-8 (key_format: string", "schema id 9 not found",
		testTopic + "@3: operators: orders: avro: schema id 2: string is not valid UTF-8"}
	if len(dead) != len(wantDead) {
		t.Fatalf("dead letters %q, want %d", dead, len(wantDead))
	}
	for _, w := range wantDead {
		found := false
		for _, d := range dead {
			found = found || strings.Contains(d, w)
		}
		if !found {
			t.Errorf("no dead letter with %q among %q", w, dead)
		}
	}

	// The registry down when a new schema id comes: Process fails, no dead letter.
	reg.down.Store(true)
	reg.byID[3] = avroOrder
	unseen := order(4, "c1")
	unseen.Value[4] = 3
	tk.BeforeBatch(testTopic, Lag{Before: 1})
	if err := tk.Process(testTopic, []*kgo.Record{unseen}); !errors.Is(err, avro.ErrUnavailable) {
		t.Fatalf("Process with the registry down: %v, want ErrUnavailable", err)
	}
}

// TestTableJSONKeyTombstone: with key_format json a row is stored under its key's text, and a
// tombstone (no value to decode) deletes it by the same text.
func TestTableJSONKeyTombstone(t *testing.T) {
	doc := joinConfig("left", false, "", "never", 100, 10, 1000, "0s", "")
	doc = strings.Replace(doc, "customers: {topic: customers, key: customer_id}", "customers: {topic: customers, key_format: json, key: customer_id}", 1)
	prod := newFakeProducer()
	tk := newJoinTask(t, mustPlan(t, doc), state.NewMem(), prod, nil)
	loadTable(t, tk, `"c1" {"customer_id":"c1","region":"EU"}`, `"c2" {"customer_id":"c2","region":"US"}`, `"c1" `)
	tk.BeforeBatch(testTopic, Lag{Before: 2})
	if err := tk.Process(testTopic, []*kgo.Record{orderRec(0, "c1", "1", 100, ""), orderRec(1, "c2", "2", 100, "")}); err != nil {
		t.Fatal(err)
	}
	ddCheckpoint(t, tk, prod, false)
	var outs []string
	for _, r := range prod.log {
		if r.Topic == testSink {
			outs = append(outs, string(r.Value))
		}
	}
	if len(outs) != 2 || !strings.Contains(outs[0], `"customers":null`) || !strings.Contains(outs[1], `"region":"US"`) {
		t.Errorf("outputs %q; want c1 without a row (deleted) and c2 with its row", outs)
	}
}
