package workload

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/producer"
)

func digest(t *testing.T, s Spec) string {
	t.Helper()
	h := sha256.New()
	err := s.Each(func(key, value []byte, ts int64) error {
		fmt.Fprintf(h, "%s|%s|%d\n", key, value, ts)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

func TestEachDeterministic(t *testing.T) {
	s := Spec{Records: 5000, Keys: 100, Partitions: 8, Seed: 7}
	if a, b := digest(t, s), digest(t, s); a != b {
		t.Fatalf("same spec, different records: %s vs %s", a, b)
	}
	other := s
	other.Seed = 8
	if digest(t, s) == digest(t, other) {
		t.Fatal("seeds 7 and 8 generated the same records")
	}
}

// TestEachGolden pins the exact bytes, so benchmarks stay comparable across versions.
func TestEachGolden(t *testing.T) {
	var got []string
	s := Spec{Records: 3, Keys: 100, Partitions: 8, Seed: 1}
	if err := s.Each(func(key, value []byte, ts int64) error {
		got = append(got, fmt.Sprintf("%s %s %d", key, value, ts))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`c-0000040 {"order_id":"o-000000000001","customer_id":"c-0000040","amount":373.80,"ts":1767225600064} 1767225600064`,
		`c-0000078 {"order_id":"o-000000000002","customer_id":"c-0000078","amount":525.46,"ts":1767225600052} 1767225600052`,
		`c-0000055 {"order_id":"o-000000000003","customer_id":"c-0000055","amount":547.44,"ts":1767225600101} 1767225600101`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestEachShape(t *testing.T) {
	const base = DefaultStartTS + 1000
	s := Spec{Records: 20000, Keys: 12345678, Partitions: 8, Seed: 3, StartTS: base}
	shape := regexp.MustCompile(`^\{"order_id":"o-(\d{12})","customer_id":"(c-\d{8})","amount":(\d{1,3}\.\d\d),"ts":(\d+)\}$`)
	var i int64
	var size int
	err := s.Each(func(key, value []byte, ts int64) error {
		m := shape.FindSubmatch(value)
		if m == nil {
			return fmt.Errorf("record %d: value %s has the wrong shape", i, value)
		}
		var o struct {
			OrderID    string `json:"order_id"`
			CustomerID string `json:"customer_id"`
			Amount     json.Number
			TS         int64
		}
		if err := json.Unmarshal(value, &o); err != nil {
			return err
		}
		if o.OrderID != "o-"+string(m[1]) || o.CustomerID != string(key) || o.TS != ts {
			return fmt.Errorf("record %d: JSON decodes to %+v", i, o)
		}
		cents, err := parseDecimal([]byte(m[3]), 2)
		switch {
		case err != nil:
			return err
		case cents < MinCents || cents > MaxCents:
			return fmt.Errorf("record %d: amount %s out of range", i, m[3])
		case string(m[2]) != string(key):
			return fmt.Errorf("record %d: key %s, customer_id %s", i, key, m[2])
		case string(m[1]) != fmt.Sprintf("%012d", i+1):
			return fmt.Errorf("record %d: order_id %s", i, m[1])
		case string(m[4]) != fmt.Sprint(ts) || ts < base+i || ts >= base+i+MaxJitterMS:
			return fmt.Errorf("record %d: ts %s (arg %d) outside [%d, %d)", i, m[4], ts, base+i, base+i+MaxJitterMS)
		}
		size += len(value)
		i++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if avg := size / int(i); avg < 85 || avg > 100 {
		t.Fatalf("average value size %d bytes, want about 90", avg)
	}
}

func TestEachStopsOnError(t *testing.T) {
	stop := errors.New("stop")
	n := 0
	err := Spec{Records: 100, Keys: 3, Partitions: 1}.Each(func(_, _ []byte, _ int64) error {
		if n++; n == 10 {
			return stop
		}
		return nil
	})
	if err != stop || n != 10 {
		t.Fatalf("Each returned %v after %d records, want stop after 10", err, n)
	}
}

func TestValidate(t *testing.T) {
	for _, s := range []Spec{
		{Records: -1, Keys: 1, Partitions: 1},
		{Records: 1, Keys: 0, Partitions: 1},
		{Records: 1, Keys: 1, Partitions: 0},
		{Records: 1, Keys: 1, Partitions: 1, StartTS: -5},
	} {
		if err := s.Each(func(_, _ []byte, _ int64) error { return nil }); !errors.Is(err, ErrSpec) {
			t.Errorf("%+v: Each error %v, want ErrSpec", s, err)
		}
	}
}

func TestEachAllocationFree(t *testing.T) {
	count := func(records int64) float64 {
		s := Spec{Records: records, Keys: 1000, Partitions: 8, Seed: 1}
		return testing.AllocsPerRun(5, func() {
			_ = s.Each(func(_, _ []byte, _ int64) error { return nil })
		})
	}
	if small, large := count(10), count(10000); large != small {
		t.Fatalf("Each allocates per record: %v allocs for 10 records, %v for 10000", small, large)
	}
}

// TestExpected recomputes the totals from the generated JSON values.
func TestExpected(t *testing.T) {
	s := Spec{Records: 30000, Keys: 500, Partitions: 8, Seed: 11}
	want := make(map[string]Total)
	err := s.Each(func(key, value []byte, _ int64) error {
		var o struct{ Amount json.Number }
		if err := json.Unmarshal(value, &o); err != nil {
			return err
		}
		cents, err := parseDecimal([]byte(o.Amount), 2)
		if err != nil {
			return err
		}
		tot := want[string(key)]
		tot.SumCents += cents
		tot.Count++
		want[string(key)] = tot
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got := s.Expected()
	if d := Diff(want, got, 5); len(d) > 0 {
		t.Fatalf("Expected differs from the generated values:\n%s", strings.Join(d, "\n"))
	}
	if len(got) != 500 {
		t.Fatalf("%d keys, want all 500", len(got))
	}
	var n int64
	for _, c := range s.Counts() {
		n += c
	}
	if n != s.Records {
		t.Fatalf("Counts add up to %d, want %d", n, s.Records)
	}
}

func TestKey(t *testing.T) {
	for _, tc := range []struct {
		keys, n int
		want    string
	}{
		{100, 42, "c-0000042"},
		{10_000_000, 9_999_999, "c-9999999"},
		{10_000_001, 7, "c-00000007"},
	} {
		if got := string(Spec{Keys: tc.keys}.Key(tc.n)); got != tc.want {
			t.Errorf("Keys %d: Key(%d) = %s, want %s", tc.keys, tc.n, got, tc.want)
		}
	}
}

// TestMurmur2 uses the vectors of Kafka's own UtilsTest.testMurmur2.
func TestMurmur2(t *testing.T) {
	for in, want := range map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	} {
		if got := int32(producer.Murmur2([]byte(in))); got != want {
			t.Errorf("murmur2(%q) = %d, want %d", in, got, want)
		}
	}
}

// TestPartitionMatchesFranzGo compares Partition with franz-go's Kafka-compatible partitioner.
func TestPartitionMatchesFranzGo(t *testing.T) {
	tp := kgo.StickyKeyPartitioner(nil).ForTopic("orders")
	for _, n := range []int32{1, 3, 8, 64} {
		s := Spec{Keys: 20000, Partitions: n}
		for c := range s.Keys {
			key := s.Key(c)
			if got, want := Partition(key, n), tp.Partition(&kgo.Record{Key: key}, int(n)); int(got) != want {
				t.Fatalf("Partition(%s, %d) = %d, franz-go chooses %d", key, n, got, want)
			}
		}
	}
}

func TestAppendCents(t *testing.T) {
	for cents, want := range map[int64]string{
		0: "0.00", 1: "0.01", 10: "0.10", 99: "0.99", 100: "1.00", 12345: "123.45", 99999: "999.99",
		-5: "-0.05", -12345: "-123.45",
	} {
		if got := string(appendCents(nil, cents)); got != want {
			t.Errorf("appendCents(%d) = %s, want %s", cents, got, want)
		}
	}
}

func TestParseDecimal(t *testing.T) {
	for _, tc := range []struct {
		in    string
		scale int
		want  int64
		err   bool
	}{
		{in: "0", scale: 2, want: 0},
		{in: "-0", scale: 2, want: 0},
		{in: "0.00", scale: 2, want: 0},
		{in: "0.01", scale: 2, want: 1},
		{in: "0.1", scale: 2, want: 10},
		{in: "12.34", scale: 2, want: 1234},
		{in: "12.340000", scale: 2, want: 1234},
		{in: "12", scale: 2, want: 1200},
		{in: "100", scale: 2, want: 10000},
		{in: "-12.34", scale: 2, want: -1234},
		{in: "+12.34", scale: 2, want: 1234},
		{in: "007.50", scale: 2, want: 750},
		{in: "1.5e2", scale: 2, want: 15000},
		{in: "1234E-2", scale: 2, want: 1234},
		{in: "1234e-4", scale: 2, err: true},
		{in: "123400e-4", scale: 2, want: 1234},
		{in: "0.29", scale: 2, want: 29}, // 0.29 is 0.28999… as a float64
		{in: "4.35", scale: 2, want: 435},
		{in: "92233720368547758.07", scale: 2, want: 9223372036854775807},
		{in: "-92233720368547758.08", scale: 2, want: -9223372036854775808},
		{in: "92233720368547758.08", scale: 2, err: true},
		{in: "1e17", scale: 2, err: true},
		{in: "0e999", scale: 2, want: 0},
		{in: "12.345", scale: 2, err: true},
		{in: "3", scale: 0, want: 3},
		{in: "3.0", scale: 0, want: 3},
		{in: "3.5", scale: 0, err: true},
		{in: "", scale: 2, err: true},
		{in: "-", scale: 2, err: true},
		{in: ".5", scale: 2, err: true},
		{in: "5.", scale: 2, err: true},
		{in: "1e", scale: 2, err: true},
		{in: "1e+", scale: 2, err: true},
		{in: "1.2.3", scale: 2, err: true},
		{in: " 1", scale: 2, err: true},
		{in: "NaN", scale: 2, err: true},
		{in: "Infinity", scale: 2, err: true},
		{in: "0x10", scale: 2, err: true},
	} {
		got, err := parseDecimal([]byte(tc.in), tc.scale)
		switch {
		case tc.err && err == nil:
			t.Errorf("parseDecimal(%q, %d) = %d, want an error", tc.in, tc.scale, got)
		case tc.err && !errors.Is(err, ErrDecimal):
			t.Errorf("parseDecimal(%q, %d) error %v does not wrap ErrDecimal", tc.in, tc.scale, err)
		case !tc.err && (err != nil || got != tc.want):
			t.Errorf("parseDecimal(%q, %d) = %d, %v; want %d", tc.in, tc.scale, got, err, tc.want)
		}
	}
}

func TestParseCents(t *testing.T) {
	for in, want := range map[string]int64{"12.34": 1234, "12.3": 1230, "7": 700, "1.5e3": 150000, "-0.01": -1} {
		if got, err := ParseCents([]byte(in)); err != nil || got != want {
			t.Errorf("ParseCents(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	if _, err := ParseCents([]byte("0.001")); !errors.Is(err, ErrDecimal) {
		t.Errorf("ParseCents(\"0.001\") error %v, want ErrDecimal", err)
	}
}

func FuzzParseDecimal(f *testing.F) {
	for _, s := range []string{"12.34", "-0.01", "1e3", "999.99", "0.5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseDecimal([]byte(s), 2)
		if err != nil {
			return
		}
		// Whatever parses must format back to a decimal with the same value.
		back, err := parseDecimal(appendCents(nil, n), 2)
		if err != nil || back != n {
			t.Fatalf("%q parsed to %d, which formats to %s and parses back to %d (%v)", s, n, appendCents(nil, n), back, err)
		}
	})
}

func TestDiff(t *testing.T) {
	want := map[string]Total{"a": {100, 1}, "b": {250, 2}, "c": {1, 1}, "d": {5, 5}}
	got := map[string]Total{"a": {100, 1}, "b": {260, 2}, "d": {5, 4}, "e": {7, 1}}
	d := Diff(want, got, 10)
	exp := []string{
		"b: got sum=2.60 count=2, want sum=2.50 count=2",
		"c: missing, want sum=0.01 count=1",
		"d: got sum=0.05 count=4, want sum=0.05 count=5",
		"e: unexpected sum=0.07 count=1",
	}
	if strings.Join(d, "\n") != strings.Join(exp, "\n") {
		t.Fatalf("Diff =\n%s\nwant\n%s", strings.Join(d, "\n"), strings.Join(exp, "\n"))
	}
	if d := Diff(want, got, 2); len(d) != 2 || d[1] != "... and 3 more differences (4 in all)" {
		t.Fatalf("Diff with max 2 = %q", d)
	}
	if d := Diff(want, want, 10); d != nil {
		t.Fatalf("Diff of equal maps = %q", d)
	}
}

func BenchmarkEach(b *testing.B) {
	s := Spec{Records: int64(b.N), Keys: 100_000, Partitions: 8, Seed: 1}
	var n int
	b.ReportAllocs()
	_ = s.Each(func(key, value []byte, _ int64) error {
		n += len(value)
		return nil
	})
	b.SetBytes(int64(n / max(b.N, 1)))
}

// TestPipelineParses: the pipeline that computes the workload's totals is a valid sluice
// config once kafka and group are added, with the aggregate the changelog name relies on.
func TestPipelineParses(t *testing.T) {
	doc := "kafka: {brokers: [127.0.0.1:1]}\ngroup: g\n" + Pipeline("orders-x", "totals-x")
	cfg, err := configs.Parse([]byte(doc), nil)
	if err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	if got := cfg.ChangelogTopic(PipelineOperator); got != "g-totals-changelog" {
		t.Fatalf("changelog topic %q", got)
	}
}
