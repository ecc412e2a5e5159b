package workload

import (
	"encoding/json"
	"testing"

	"github.com/sluice-dev/sluice/configs"
)

func TestEachCustomer(t *testing.T) {
	s := Spec{Records: 1000, Keys: 40, Partitions: 3, Seed: 1}
	n := 0
	err := s.EachCustomer(func(key, value []byte, ts int64) error {
		var row struct {
			CustomerID   string `json:"customer_id"`
			Region, Tier string
		}
		if err := json.Unmarshal(value, &row); err != nil {
			t.Fatalf("row %d: %v: %s", n, err, value)
		}
		if row.CustomerID != string(key) || string(key) != string(s.Key(n)) || CustomerOf(key) != n || row.Region != Region(n) || ts != DefaultStartTS {
			t.Fatalf("row %d: key %s, value %s, ts %d", n, key, value, ts)
		}
		n++
		return nil
	})
	if err != nil || n != s.Keys {
		t.Fatalf("rows %d, err %v", n, err)
	}
}

func TestRegionTotals(t *testing.T) {
	s := Spec{Records: 5000, Keys: 100, Partitions: 3, Seed: 2}
	want := map[string]Total{}
	for k, tot := range s.Expected() {
		r := Region(CustomerOf([]byte(k)))
		w := want[r]
		w.SumCents += tot.SumCents
		w.Count += tot.Count
		want[r] = w
	}
	got := s.RegionTotals()
	if len(got) != len(want) {
		t.Fatalf("regions %d, want %d", len(got), len(want))
	}
	for r, w := range want {
		if got[r] != w {
			t.Fatalf("%s: %+v, want %+v", r, got[r], w)
		}
	}
}

func TestJoinPipelineParses(t *testing.T) {
	cfg := "kafka: {brokers: [127.0.0.1:9092]}\ngroup: g\n" + JoinPipeline("o", "c", "out")
	c, err := configs.Parse([]byte(cfg), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Tables[JoinTable]; !ok {
		t.Fatalf("no table %q in %+v", JoinTable, c.Tables)
	}
}
