package operators

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/changelog/codec"
	"github.com/sluice-dev/sluice/configs"
)

func aggCfg(fields map[string]map[string]any) configs.Aggregate {
	return configs.Aggregate{Input: "orders", Fields: fields}
}

// ordersAgg is the demo aggregate.
func ordersAgg() configs.Aggregate {
	return aggCfg(map[string]map[string]any{
		"amount":     {"sum": "amount"},
		"orders":     {"count": map[string]any{}},
		"avg_amount": {"avg": "amount"},
		"min_amount": {"min": "amount"},
		"max_amount": {"max": "amount"},
	})
}

func mustAggregate(t testing.TB, cfg configs.Aggregate) *Aggregate {
	t.Helper()
	a, err := NewAggregate("totals", cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// foldValues projects and folds JSON values (key "c-1") into a fresh state.
func foldValues(t testing.TB, a *Aggregate, values ...string) []byte {
	t.Helper()
	state := make([]byte, a.StateSize())
	a.InitState(state)
	var in []byte
	for _, v := range values {
		r := Record{Key: []byte("c-1"), Value: []byte(v)}
		var err error
		if in, err = a.Project(&r, in[:0]); err != nil {
			t.Fatalf("Project(%s): %v", v, err)
		}
		if len(in) != a.InputSize() && len(a.strs) == 0 {
			t.Fatalf("Project appended %d bytes, InputSize %d", len(in), a.InputSize())
		}
		state = a.Fold(state, in)
	}
	return state
}

func TestAggregateRender(t *testing.T) {
	a := mustAggregate(t, ordersAgg())
	for _, tc := range []struct {
		values []string
		want   string
	}{
		{nil, `{"key":"c-1","amount":0,"avg_amount":null,"max_amount":null,"min_amount":null,"orders":0}`},
		{[]string{`{"amount":123.45}`}, `{"key":"c-1","amount":123.45,"avg_amount":123.45,"max_amount":123.45,"min_amount":123.45,"orders":1}`},
		{[]string{`{"amount":123.45}`, `{"amount":1}`, `{"amount":99.1}`},
			`{"key":"c-1","amount":223.55,"avg_amount":74.516666667,"max_amount":123.45,"min_amount":1,"orders":3}`},
		{[]string{`{"amount":0.1}`, `{"amount":0.2}`}, `{"key":"c-1","amount":0.3,"avg_amount":0.15,"max_amount":0.2,"min_amount":0.1,"orders":2}`},
		{[]string{`{"amount":-0.5}`, `{"amount":-2e-1}`}, `{"key":"c-1","amount":-0.7,"avg_amount":-0.35,"max_amount":-0.2,"min_amount":-0.5,"orders":2}`},
		{[]string{`{"amount":1.00000000049}`}, `{"key":"c-1","amount":1,"avg_amount":1,"max_amount":1,"min_amount":1,"orders":1}`},
	} {
		state := foldValues(t, a, tc.values...)
		if !a.ValidState(state) {
			t.Errorf("%v: ValidState false", tc.values)
		}
		if got := string(a.Render([]byte("c-1"), state, nil)); got != tc.want {
			t.Errorf("%v:\n got %s\nwant %s", tc.values, got, tc.want)
		}
	}
	// The key is escaped; dst is appended to.
	state := foldValues(t, a)
	got := string(a.Render([]byte("a\"b\n\xff"), state, []byte("prefix:")))
	if want := `prefix:{"key":"a\"b\n\ufffd",`; !strings.HasPrefix(got, want) {
		t.Errorf("Render = %s, want prefix %s", got, want)
	}
}

func TestAggregateConfig(t *testing.T) {
	a := mustAggregate(t, ordersAgg())
	if a.Name() != "totals" || a.Emit() != "updates" {
		t.Errorf("Name, Emit = %q, %q", a.Name(), a.Emit())
	}
	if got, want := a.Attributes(), (Attributes{InternalSorter: true, OutputOnCheckpoint: true}); got != want {
		t.Errorf("Attributes = %+v, want %+v", got, want)
	}
	if a.InputSize() != 16 { // one distinct field
		t.Errorf("InputSize = %d, want 16", a.InputSize())
	}
	if a.StateSize() != headerSize+2*sumSize+2*decSize {
		t.Errorf("StateSize = %d", a.StateSize())
	}
	cfg := ordersAgg()
	cfg.Emit = "final"
	if f := mustAggregate(t, cfg); f.Emit() != "final" || !f.Attributes().OutputOnlyAtEnd {
		t.Errorf("emit final: Emit %q, Attributes %+v", f.Emit(), f.Attributes())
	}
	counter := mustAggregate(t, aggCfg(map[string]map[string]any{"n": {"count": nil}}))
	if counter.InputSize() != 0 {
		t.Errorf("count-only InputSize = %d, want 0", counter.InputSize())
	}
	if got := string(counter.Render([]byte("k"), foldValues(t, counter, `{}`, `{"x":1}`), nil)); got != `{"key":"k","n":2}` {
		t.Errorf("count-only Render = %s", got)
	}
	for _, tc := range []struct {
		cfg  configs.Aggregate
		want string
	}{
		{aggCfg(nil), "operators: totals: aggregate has no fields"},
		{aggCfg(map[string]map[string]any{"key": {"sum": "amount"}}), `operators: totals: field name "key" is reserved`},
		{aggCfg(map[string]map[string]any{"window_end": {"count": nil}}), `operators: totals: field name "window_end" is reserved`},
		{aggCfg(map[string]map[string]any{"s": {"summ": "amount"}}), "operators: totals: aggregate has invalid fields"},
		{configs.Aggregate{Fields: map[string]map[string]any{"n": {"count": nil}}, Emit: "sometimes"}, `operators: totals: unknown emit "sometimes"`},
	} {
		if _, err := NewAggregate("totals", tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewAggregate(%v) error = %v, want %q", tc.cfg.Fields, err, tc.want)
		}
	}
}

func TestProjectErrors(t *testing.T) {
	a := mustAggregate(t, aggCfg(map[string]map[string]any{
		"s": {"sum": "amount"},
		"m": {"max": "detail.price"},
	}))
	for _, tc := range []struct {
		key   []byte
		value string
		want  string
	}{
		{[]byte("k"), `{"amount":1}`, `operators: totals: field "detail.price" missing`},
		{[]byte("k"), `{"detail":{"price":2}}`, `field "amount" missing`},
		{[]byte("k"), `{"amount":"12","detail":{"price":2}}`, `field "amount" is a string, want a number`},
		{[]byte("k"), `{"amount":null,"detail":{"price":2}}`, `field "amount" is null, want a number`},
		{[]byte("k"), `{"amount":1,"detail":{"price":[2]}}`, `field "detail.price" is an array, want a number`},
		{[]byte("k"), `{"amount":2e29,"detail":{"price":2}}`, `field "amount": 2e29: number out of range`},
		{[]byte("k"), `{"amount":1,"detail":{"price":2}`, `invalid JSON at byte 32`},
		{nil, `{"amount":1,"detail":{"price":2}}`, `record has no key`},
	} {
		r := Record{Key: tc.key, Value: []byte(tc.value)}
		dst := []byte("keep")
		out, err := a.Project(&r, dst)
		var e *Error
		if !errors.As(err, &e) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Project(%s) error = %v, want *Error containing %q", tc.value, err, tc.want)
		}
		if string(out) != "keep" {
			t.Errorf("Project(%s) on error returned %q, want dst unchanged", tc.value, out)
		}
	}
	r := Record{Key: []byte("k"), Value: []byte(`{"amount":1.5,"detail":{"price":-2}}`)}
	out, err := a.Project(&r, nil)
	if err != nil || len(out) != 32 {
		t.Fatalf("Project = %d bytes, %v", len(out), err)
	}
}

func TestValidState(t *testing.T) {
	a := mustAggregate(t, ordersAgg())
	good := foldValues(t, a, `{"amount":1}`, `{"amount":-3}`)
	empty := foldValues(t, a)
	if !a.ValidState(good) || !a.ValidState(empty) {
		t.Fatal("valid states rejected")
	}
	mutate := func(b []byte, f func([]byte)) []byte {
		c := bytes.Clone(b)
		f(c)
		return c
	}
	for name, b := range map[string][]byte{
		"short":         good[:len(good)-1],
		"long":          append(bytes.Clone(good), 0),
		"nil":           nil,
		"version":       mutate(good, func(c []byte) { c[0] = 2 }),
		"negative n":    mutate(good, func(c []byte) { c[8] = 0x80 }),
		"empty w/ junk": mutate(empty, func(c []byte) { c[len(c)-1] = 1 }),
		"max sentinel":  mutate(good, func(c []byte) { copy(c[a.specs[2].off:], make([]byte, 15)); c[a.specs[2].off+15] = 0x80 }),
	} {
		if a.ValidState(b) {
			t.Errorf("ValidState(%s) = true", name)
		}
	}
}

// randomNumber returns a random JSON number within range, in varied notations.
func randomNumber(rng *rand.Rand) string {
	digits := func(n int) string {
		var sb strings.Builder
		sb.WriteByte(byte('1' + rng.IntN(9)))
		for range n - 1 {
			sb.WriteByte(byte('0' + rng.IntN(10)))
		}
		return sb.String()
	}
	sign := ""
	if rng.IntN(3) == 0 {
		sign = "-"
	}
	switch rng.IntN(5) {
	case 0:
		return sign + digits(1+rng.IntN(6)) + "." + fmt.Sprint(rng.IntN(100))
	case 1:
		return sign + "0." + strings.Repeat("0", rng.IntN(12)) + digits(1+rng.IntN(8))
	case 2:
		return sign + digits(1+rng.IntN(3)) + "e" + fmt.Sprint(rng.IntN(27))
	case 3:
		return sign + digits(20+rng.IntN(9)) + "." + digits(1+rng.IntN(15)) // huge, rounded
	default:
		return sign + fmt.Sprint(rng.IntN(1000))
	}
}

// TestFoldOrderIndependent is the "one answer, two modes" property: folding the same inputs in
// any order gives identical state bytes, and the sum equals the exact (math/big) sum of the
// per-record rounded values.
func TestFoldOrderIndependent(t *testing.T) {
	a := mustAggregate(t, ordersAgg())
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		n := 1 + rng.IntN(40)
		values := make([]string, n)
		exact := new(big.Int)
		for i := range values {
			num := randomNumber(rng)
			values[i] = `{"amount":` + num + `}`
			want, ok := oracle(num)
			if !ok {
				t.Fatalf("randomNumber gave out-of-range %s", num)
			}
			exact.Add(exact, want)
		}
		first := foldValues(t, a, values...)
		for range 5 {
			rng.Shuffle(len(values), func(i, j int) { values[i], values[j] = values[j], values[i] })
			if again := foldValues(t, a, values...); !bytes.Equal(first, again) {
				t.Fatalf("trial %d: state differs between orders:\n%x\n%x", trial, first, again)
			}
		}
		sum := loadSum(first[a.specs[0].off:]) // "amount" sorts first
		if got, want := string(appendInt192(nil, sum)), unitsString(exact); got != want {
			t.Fatalf("trial %d: sum %s, want %s", trial, got, want)
		}
	}
}

// unitsString renders a big count of 10^-9 units like appendDecimal.
func unitsString(u *big.Int) string {
	neg := u.Sign() < 0
	abs := new(big.Int).Abs(u)
	q, r := new(big.Int).QuoRem(abs, big.NewInt(decUnit), new(big.Int))
	s := q.String()
	if r.Sign() != 0 {
		s += "." + strings.TrimRight(fmt.Sprintf("%09d", r.Int64()), "0")
	}
	if neg && s != "0" {
		s = "-" + s
	}
	return s
}

// TestMergeEqualsFold: merging the partial states of any split of the inputs gives the bytes of
// folding them all (what backlog pre-aggregation relies on), including empty sides.
func TestMergeEqualsFold(t *testing.T) {
	a := mustAggregate(t, ordersAgg())
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 300 {
		n := rng.IntN(30)
		values := make([]string, n)
		for i := range values {
			values[i] = `{"amount":` + randomNumber(rng) + `}`
		}
		want := foldValues(t, a, values...)
		// Split into up to 4 parts (some possibly empty), fold each, merge in a random order.
		parts := make([][]string, 1+rng.IntN(4))
		for _, v := range values {
			k := rng.IntN(len(parts))
			parts[k] = append(parts[k], v)
		}
		rng.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
		got := make([]byte, a.StateSize())
		a.InitState(got)
		for _, p := range parts {
			a.Merge(got, foldValues(t, a, p...))
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("trial %d (%d values in %d parts): merged state differs from folded:\n%x\n%x", trial, n, len(parts), got, want)
		}
		if !a.ValidState(got) {
			t.Fatalf("trial %d: merged state invalid: %x", trial, got)
		}
	}
}

// A composite group_by's key columns take the place of "key" in the output; a field named like
// one of them is refused.
func TestAggregateKeyColumns(t *testing.T) {
	cfg := configs.Aggregate{GroupBy: "auction, day", Fields: map[string]map[string]any{"bids": {"count": nil}, "top": {"max": "price"}}}
	a, err := NewAggregate("q17", cfg)
	if err != nil {
		t.Fatal(err)
	}
	st := make([]byte, a.StateSize())
	a.InitState(st)
	var r Record
	r.Key, r.Value = []byte("k"), []byte(`{"price":12.5}`)
	in, err := a.Project(&r, nil)
	if err != nil {
		t.Fatal(err)
	}
	a.Fold(st, in)
	key := []byte(`{"auction":1001,"day":"2015-07-15"}`)
	if got, want := string(a.Render(key, st, nil)), `{"auction":1001,"day":"2015-07-15","bids":1,"top":12.5}`; got != want {
		t.Errorf("Render = %s, want %s", got, want)
	}
	if got, want := string(a.RenderWindow(key, 0, 60000, st, nil)), `{"auction":1001,"day":"2015-07-15","window_start":0,"window_end":60000,"bids":1,"top":12.5}`; got != want {
		t.Errorf("RenderWindow = %s, want %s", got, want)
	}
	cfg.Fields["day"] = map[string]any{"count": nil}
	if _, err := NewAggregate("q17", cfg); err == nil || !strings.Contains(err.Error(), `field name "day" is reserved`) {
		t.Errorf("a field named like a key column: %v, want it refused", err)
	}
}

// A cogroup with key_columns writes a composite key's members in place of "key" (its inputs
// re-keyed by several fields); a key that is not a JSON object stays "key"; the state is the
// same bytes either way.
func TestCogroupKeyColumns(t *testing.T) {
	cfg := configs.Cogroup{Inputs: []string{"bids", "firsts"}, Fields: map[string]map[string]any{
		"bids": {"count": nil, "from": "bids"}, "bidders": {"sum": "n", "from": "firsts"}}}
	plain, err := NewCogroup("q16", cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.KeyColumns = true
	cols, err := NewCogroup("q16", cfg)
	if err != nil {
		t.Fatal(err)
	}
	st := make([]byte, cols.StateSize())
	cols.InitState(st)
	var r Record
	r.Key, r.Value = []byte("k"), []byte(`{"n":1}`)
	for i := range 2 {
		in, err := cols.ProjectInput(i, &r, nil)
		if err != nil {
			t.Fatal(err)
		}
		cols.Fold(st, in)
	}
	key := []byte(`{"channel":"Google","day":"2015-07-15"}`)
	for _, c := range []struct {
		a         *Aggregate
		key, want string
	}{
		{cols, string(key), `{"channel":"Google","day":"2015-07-15","bidders":1,"bids":1}`},
		{cols, "Google", `{"key":"Google","bidders":1,"bids":1}`},
		{plain, string(key), `{"key":"{\"channel\":\"Google\",\"day\":\"2015-07-15\"}","bidders":1,"bids":1}`},
	} {
		if got := string(c.a.Render([]byte(c.key), st, nil)); got != c.want {
			t.Errorf("Render(%s) = %s, want %s", c.key, got, c.want)
		}
	}
	if plain.StateSize() != cols.StateSize() || plain.Layout().Fingerprint() != cols.Layout().Fingerprint() {
		t.Errorf("key_columns changed the state: %d/%s vs %d/%s", plain.StateSize(), plain.Layout(), cols.StateSize(), cols.Layout())
	}
}

// fieldsAgg is an aggregate with filtered fields and min and max over strings: Nexmark's
// count(*) filter (where ...) beside first and last names.
func fieldsAgg() configs.Aggregate {
	return aggCfg(map[string]map[string]any{
		"bids":       {"count": map[string]any{}},
		"rank1":      {"count": map[string]any{}, "where": "price < 100"},
		"rank1_sum":  {"sum": "price", "where": "price < 100"},
		"rank2_avg":  {"avg": "price", "where": "price >= 100"},
		"rank2_min":  {"min": "price", "where": "price >= 100"},
		"first":      {"min": "name", "type": "string"},
		"last":       {"max": "name", "type": "string"},
		"rank1_last": {"max": "name", "type": "string", "where": "price < 100"},
	})
}

// randomName returns a short string over a small alphabet (so prefixes and equal strings are
// common), sometimes empty, sometimes with an escape or a multi-byte letter.
func randomName(rng *rand.Rand) string {
	alphabet := []string{"a", "b", "z", "A", "é", `\"`, `\u00e9`, "\\\\", "\u4e16"}
	var sb strings.Builder
	for range rng.IntN(6) {
		sb.WriteString(alphabet[rng.IntN(len(alphabet))])
	}
	return sb.String()
}

// fieldsOracle renders what fieldsAgg must render for records of (price, name), computed
// without the aggregate: big.Rat sums, Go's string comparison of the unescaped names.
func fieldsOracle(t *testing.T, prices []string, names []string) string {
	t.Helper()
	var (
		bids, rank1, rank2  int
		sum1, sum2          = new(big.Rat), new(big.Rat)
		min2                *big.Rat
		first, last, last1  string
		haveName, haveLast1 bool
		hundred             = big.NewRat(100, 1)
		ratOf               = func(s string) *big.Rat { r, _ := new(big.Rat).SetString(s); return r }
		unquote             = func(s string) string { var u string; _ = json.Unmarshal([]byte(`"`+s+`"`), &u); return u }
		decimal             = func(r *big.Rat) string { return strings.TrimRight(strings.TrimRight(r.FloatString(9), "0"), ".") }
	)
	for i, p := range prices {
		price := ratOf(p)
		name := unquote(names[i])
		bids++
		if !haveName || name < first {
			first = name
		}
		if !haveName || name > last {
			last = name
		}
		haveName = true
		if price.Cmp(hundred) < 0 {
			rank1++
			sum1.Add(sum1, price)
			if !haveLast1 || name > last1 {
				last1, haveLast1 = name, true
			}
		} else {
			rank2++
			sum2.Add(sum2, price)
			if min2 == nil || price.Cmp(min2) < 0 {
				min2 = price
			}
		}
	}
	str := func(ok bool, s string) string {
		if !ok {
			return "null"
		}
		b, _ := json.Marshal(s)
		return string(b)
	}
	avg2, minS := "null", "null"
	if rank2 > 0 {
		avg2 = decimal(new(big.Rat).Quo(sum2, big.NewRat(int64(rank2), 1)))
		minS = decimal(min2)
	}
	return fmt.Sprintf(`{"key":"c-1","bids":%d,"first":%s,"last":%s,"rank1":%d,"rank1_last":%s,"rank1_sum":%s,"rank2_avg":%s,"rank2_min":%s}`,
		bids, str(haveName, first), str(haveName, last), rank1, str(haveLast1, last1), decimal(sum1), avg2, minS)
}

// TestFieldsMergeEqualsFold: with filtered fields and strings, folding in any order and merging
// the partials of any split give the same bytes, and the rendering is the oracle's.
func TestFieldsMergeEqualsFold(t *testing.T) {
	a := mustAggregate(t, fieldsAgg())
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := range 300 {
		n := rng.IntN(20)
		values, prices, names := make([]string, n), make([]string, n), make([]string, n)
		for i := range values {
			prices[i] = fmt.Sprint(rng.IntN(200))
			if rng.IntN(3) == 0 {
				prices[i] += ".5"
			}
			names[i] = randomName(rng)
			values[i] = fmt.Sprintf(`{"price":%s,"name":"%s"}`, prices[i], names[i])
		}
		want := foldValues(t, a, values...)
		if !a.ValidState(want) {
			t.Fatalf("trial %d: folded state invalid: %x", trial, want)
		}
		if got, exp := string(a.Render([]byte("c-1"), want, nil)), fieldsOracle(t, prices, names); got != exp {
			t.Fatalf("trial %d: rendered\n%s\nwant\n%s", trial, got, exp)
		}
		shuffled := slices.Clone(values)
		rng.Shuffle(n, func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if again := foldValues(t, a, shuffled...); !bytes.Equal(again, want) {
			t.Fatalf("trial %d: state differs between orders:\n%x\n%x", trial, again, want)
		}
		parts := make([][]string, 1+rng.IntN(4))
		for _, v := range values {
			k := rng.IntN(len(parts))
			parts[k] = append(parts[k], v)
		}
		got := make([]byte, a.StateSize(), a.StateSize()) // no room: every string grows it
		a.InitState(got)
		for _, p := range parts {
			got = a.Merge(got, foldValues(t, a, p...))
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("trial %d (%d values in %d parts): merged state differs from folded:\n%x\n%x", trial, n, len(parts), got, want)
		}
	}
}

// A string min or max grows a state with no spare capacity into a new slice and leaves the
// original's bytes alone (the runtime may still be producing them); a shorter string shrinks it
// in place.
func TestFieldsFoldGrows(t *testing.T) {
	a := mustAggregate(t, aggCfg(map[string]map[string]any{"last": {"max": "name", "type": "string"}}))
	project := func(v string) []byte {
		r := Record{Key: []byte("k"), Value: []byte(v)}
		in, err := a.Project(&r, nil)
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	st := make([]byte, a.StateSize())
	a.InitState(st)
	orig := bytes.Clone(st)
	grown := a.Fold(st[:len(st):len(st)], project(`{"name":"m"}`))
	if !bytes.Equal(st, orig) || len(grown) != a.StateSize()+1 {
		t.Fatalf("grown %x, original now %x", grown, st)
	}
	grown = a.Fold(grown, project(`{"name":"a-long-name"}`)) // smaller: kept out
	grown = a.Fold(grown, project(`{"name":"zz"}`))
	if got := string(a.Render([]byte("k"), grown, nil)); got != `{"key":"k","last":"zz"}` {
		t.Fatalf("Render = %s", got)
	}
	if !a.ValidState(grown) {
		t.Fatalf("state %x invalid", grown)
	}
}

// TestFieldsValidState: a state with strings is its fixed part and exactly its strings; an
// empty filtered field has no string; the version is 2.
func TestFieldsValidState(t *testing.T) {
	a := mustAggregate(t, fieldsAgg())
	good := foldValues(t, a, `{"price":150,"name":"bob"}`, `{"price":200,"name":"al"}`)
	if !a.ValidState(good) {
		t.Fatalf("valid state %x rejected", good)
	}
	last1 := a.specs[slices.IndexFunc(a.specs, func(s aggSpec) bool { return s.name == "rank1_last" })]
	for name, b := range map[string][]byte{
		"short tail":      good[:len(good)-1],
		"long tail":       append(bytes.Clone(good), 'x'),
		"version 1":       append([]byte{1}, good[1:]...),
		"string of empty": append(func() []byte { c := bytes.Clone(good); c[last1.off] = 1; return c }(), 'x'),
		"fixed part only": good[:a.StateSize()-1],
	} {
		if a.ValidState(b) {
			t.Errorf("ValidState(%s) = true", name)
		}
	}
}

// An aggregate without where or strings keeps layout version 1 and its text; one with them is
// version 2, and its text names them.
func TestFieldsLayout(t *testing.T) {
	if got := mustAggregate(t, ordersAgg()).Layout().String(); got != "aggregate/v1 amount=sum(amount) avg_amount=avg(amount) max_amount=max(amount) min_amount=min(amount) orders=count()" {
		t.Errorf("plain layout = %s", got)
	}
	a := mustAggregate(t, aggCfg(map[string]map[string]any{"n": {"count": nil, "where": "price < 10"}, "last": {"max": "name", "type": "string"}}))
	if got := a.Layout().String(); got != `aggregate/v2 last=max(name,"type=string") n=count("where=price < 10")` {
		t.Errorf("fields layout = %s", got)
	}
	st := make([]byte, a.StateSize())
	a.InitState(st)
	if st[0] != 2 {
		t.Errorf("version byte %d", st[0])
	}
	// A filtered field's own count and a string are not all in the result: changelog: output
	// cannot rebuild such a state.
	if a.ResultsRebuildState() || !mustAggregate(t, aggCfg(map[string]map[string]any{"n": {"count": nil}})).ResultsRebuildState() {
		t.Error("ResultsRebuildState: want false with where and strings, true without")
	}
}

// A where that fails on a record (a missing field compared) makes it a dead letter, named.
func TestFieldsWhereErrors(t *testing.T) {
	a := mustAggregate(t, fieldsAgg())
	r := Record{Key: []byte("k"), Value: []byte(`{"name":"x"}`)}
	_, err := a.Project(&r, nil)
	var e *Error
	if !errors.As(err, &e) || !strings.Contains(e.Reason, "where price < 100") {
		t.Fatalf("Project = %v", err)
	}
	_, err = NewAggregate("t", aggCfg(map[string]map[string]any{"n": {"count": nil, "where": "price +"}}))
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "n" || fe.Part != "where" {
		t.Fatalf("NewAggregate = %v", err)
	}
}

// AssignFinal folds a window's final (at its end - 1) into that window alone, where Assign puts
// it into every hopping window containing its time; it is late once that window is closed.
func TestAssignFinal(t *testing.T) {
	cfg := ordersAgg()
	cfg.Window = &configs.Window{Hopping: 30 * time.Millisecond, Advance: 10 * time.Millisecond, Grace: 5 * time.Millisecond}
	a := mustAggregate(t, cfg)
	starts := func(final bool, ts, wm int64) (out []int64, late bool) {
		assign := a.Assign
		if final {
			assign = a.AssignFinal
		}
		_, late, err := assign(nil, []byte("k"), ts, wm, func(sk []byte) error {
			_, start, ok := codec.SplitWindowKey(sk)
			if !ok {
				t.Fatalf("not a window key: %x", sk)
			}
			out = append(out, start)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out, late
	}
	for _, c := range []struct {
		final    bool
		ts, wm   int64
		want     []int64
		wantLate bool
		what     string
	}{
		{false, 29, 0, []int64{0, 10, 20}, false, "a record: every window containing it"},
		{true, 29, 0, []int64{0}, false, "the final of [0, 30): that window alone"},
		{true, 39, 0, []int64{10}, false, "the final of [10, 40)"},
		{true, -1, -100, []int64{-30}, false, "before the epoch: the final of [-30, 0)"},
		{true, 29, 34, []int64{0}, false, "[0, 30) closes at 35"},
		{true, 29, 35, nil, true, "[0, 30) closed: late"},
		{false, 29, 35, []int64{10, 20}, false, "a record: its later windows still open"},
	} {
		got, late := starts(c.final, c.ts, c.wm)
		if !slices.Equal(got, c.want) || late != c.wantLate {
			t.Errorf("%s: windows %v late %v, want %v %v", c.what, got, late, c.want, c.wantLate)
		}
	}
	// Tumbling windows: the same window either way.
	cfg.Window = &configs.Window{Tumbling: 10 * time.Millisecond}
	a = mustAggregate(t, cfg)
	for ts := int64(-25); ts < 25; ts++ {
		x, lx := starts(false, ts, -100)
		y, ly := starts(true, ts, -100)
		if !slices.Equal(x, y) || lx != ly {
			t.Fatalf("tumbling, ts %d: Assign %v %v, AssignFinal %v %v", ts, x, lx, y, ly)
		}
	}
}

// A slice (Windows.Slice) is the start of the last window containing a time, open when Assign
// takes the record into every window containing it; Slices offers only hopping windows whose
// size is a multiple of their advance.
func TestWindowsSlice(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for range 2000 {
		adv := int64(1 + rng.IntN(20))
		w := &Windows{Size: adv * int64(1+rng.IntN(6)), Advance: adv, Grace: int64(rng.IntN(30))}
		ts := int64(rng.IntN(400)) - 200
		wm := ts + int64(rng.IntN(200)) - 150
		var starts []int64
		n := w.Assign(ts, wm, func(s int64) { starts = append(starts, s) })
		start, open := w.Slice(ts, wm)
		if open != (len(starts) == n) {
			t.Fatalf("%+v ts=%d wm=%d: open %v, Assign took %d of %d windows", w, ts, wm, open, len(starts), n)
		}
		if last := floorDiv(ts, adv) * adv; start != last || ts < start || ts >= start+adv {
			t.Fatalf("%+v ts=%d: slice %d, want %d", w, ts, start, last)
		}
		if w.Sliced() != (w.Size > w.Advance) {
			t.Fatalf("%+v: Sliced %v", w, w.Sliced())
		}
	}
	for _, c := range []struct {
		cfg  *configs.Window
		want bool
	}{
		{&configs.Window{Hopping: 10 * time.Second, Advance: 2 * time.Second}, true},
		{&configs.Window{Hopping: 10 * time.Second, Advance: 3 * time.Second}, false},
		{&configs.Window{Tumbling: 10 * time.Second}, false},
		{nil, false},
	} {
		cfg := ordersAgg()
		cfg.Window = c.cfg
		if got := mustAggregate(t, cfg).Slices() != nil; got != c.want {
			t.Errorf("window %+v: Slices %v, want %v", c.cfg, got, c.want)
		}
	}
}
