package operators

import (
	"context"
	"math/big"
	"testing"
	"time"

	havro "github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/operators/avro"
)

// benchOrderSchema is ordersValue's record as Avro: the amount a decimal, ts a timestamp-millis.
const benchOrderSchema = `{"type":"record","name":"Order","fields":[
  {"name":"order_id","type":"string"},{"name":"customer_id","type":"string"},
  {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}},
  {"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}}]}`

// oneSchema serves benchOrderSchema as schema id 1.
type oneSchema struct{}

func (oneSchema) SchemaByID(context.Context, int) (sr.Schema, error) {
	return sr.Schema{Schema: benchOrderSchema}, nil
}

func (oneSchema) RegisterSchema(context.Context, string, sr.Schema, int, int) (int, error) {
	return 1, nil
}

func (oneSchema) SchemaByVersion(context.Context, string, int) (sr.SubjectSchema, error) {
	return sr.SubjectSchema{}, nil
}

// avroHotPath is hotPath's Decode with the order as a Confluent-framed Avro value.
func avroHotPath(t testing.TB) (*Source, []byte) {
	src, err := NewSourceDecoding("orders", configs.Source{Topic: "orders", Format: "avro", Key: "customer_id", Timestamp: "ts"},
		avro.NewRegistry(avro.Options{Fetcher: oneSchema{}}))
	if err != nil {
		t.Fatal(err)
	}
	body, err := havro.Marshal(havro.MustParse(benchOrderSchema), map[string]any{
		"order_id": "o-000000000042", "customer_id": "c-0000042", "amount": big.NewRat(12345, 100),
		"ts": time.UnixMilli(1767225600000).UTC(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return src, append([]byte{0, 0, 0, 0, 1}, body...)
}

// TestAvroDecodeAllocs: decoding an Avro order into a reused Record allocates nothing once the
// schema is cached, like the JSON path.
func TestAvroDecodeAllocs(t *testing.T) {
	src, value := avroHotPath(t)
	var r Record
	key := []byte("c-0000042")
	if err := src.Decode(key, value, 0, &r); err != nil {
		t.Fatal(err)
	}
	if want := `{"order_id":"o-000000000042","customer_id":"c-0000042","amount":123.45,"ts":1767225600000}`; string(r.Value) != want {
		t.Fatalf("decoded %s, want %s", r.Value, want)
	}
	if n := testing.AllocsPerRun(100, func() {
		if err := src.Decode(key, value, 0, &r); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Decode (avro): %v allocs/op, want 0", n)
	}
}

// BenchmarkDecodeAvro is BenchmarkDecode with the order in Avro: decode to JSON, then the
// JSON path.
func BenchmarkDecodeAvro(b *testing.B) {
	src, value := avroHotPath(b)
	key := []byte("c-0000042")
	var r Record
	b.ReportAllocs()
	b.SetBytes(int64(len(value)))
	for b.Loop() {
		if err := src.Decode(key, value, 0, &r); err != nil {
			b.Fatal(err)
		}
	}
}
