package operators

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/configs"
)

// TestStateOfRebuildsState: a state rebuilt from its result (StateOf, changelog: output)
// renders the same result, and folding the same later records into it and into the original
// gives the same results: with and without a count field, with a composite key, and with sums
// beyond 128 bits (huge numbers added up). The expected results are the original state's.
func TestStateOfRebuildsState(t *testing.T) {
	withCount := aggCfg(map[string]map[string]any{
		"amount": {"sum": "amount"}, "orders": {"count": map[string]any{}},
		"lo": {"min": "amount"}, "hi": {"max": "amount"},
	})
	noCount := aggCfg(map[string]map[string]any{"amount": {"sum": "amount"}, "hi": {"max": "amount"}})
	composite := aggCfg(map[string]map[string]any{"amount": {"sum": "amount"}, "orders": {"count": map[string]any{}}})
	composite.GroupBy = "region, day"
	for _, c := range []struct {
		name string
		cfg  configs.Aggregate
		key  string
		huge bool
	}{
		{"count", withCount, "c-1", false},
		{"no count", noCount, "c-\"1\"", false},
		{"composite key", composite, `{"day":"2026-12-04","region":"eu"}`, false},
		{"sum beyond 128 bits", withCount, "c-1", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := mustAggregate(t, c.cfg)
			if !a.ResultsRebuildState() {
				t.Fatal("ResultsRebuildState false")
			}
			rng := rand.New(rand.NewPCG(7, 11))
			value := func() string {
				if c.huge {
					return `{"amount":9` + strings.Repeat("9", 27) + `.5}`
				}
				return fmt.Sprintf(`{"amount":%s}`, randomNumber(rng))
			}
			for round := range 200 {
				n := rng.IntN(5) + 1
				if c.huge {
					n += 20 // past 1.7e29, dec's range
				}
				orig := foldKey(t, a, c.key, nil, n, value)
				res := a.Render([]byte(c.key), orig, nil)
				st, err := a.StateOf([]byte(c.key), res, []byte("prefix"))
				if err != nil {
					t.Fatalf("round %d: StateOf(%s): %v", round, res, err)
				}
				if string(st[:6]) != "prefix" || len(st) != 6+a.StateSize() || !a.ValidState(st[6:]) {
					t.Fatalf("round %d: StateOf appended %d bytes (want %d), valid %v", round, len(st)-6, a.StateSize(), a.ValidState(st[6:]))
				}
				rebuilt := st[6:]
				if got := a.Render([]byte(c.key), rebuilt, nil); string(got) != string(res) {
					t.Fatalf("round %d: rebuilt renders %s, want %s", round, got, res)
				}
				seed := rng.Uint64()
				more := func(st []byte) string {
					r := rand.New(rand.NewPCG(seed, 1))
					v := func() string {
						if c.huge {
							return value()
						}
						return fmt.Sprintf(`{"amount":%s}`, randomNumber(r))
					}
					return string(a.Render([]byte(c.key), foldKey(t, a, c.key, st, 3, v), nil))
				}
				if got, want := more(rebuilt), more(orig); got != want {
					t.Fatalf("round %d: after more records the rebuilt state renders %s, the original %s", round, got, want)
				}
			}
		})
	}
}

// TestStateOfRefuses: results that this config would not have rendered are errors (another
// key, a missing, extra or renamed field, a number not in sluice's exact form, a count of 0),
// and aggregates whose results cannot give their state back say so.
func TestStateOfRefuses(t *testing.T) {
	a := mustAggregate(t, aggCfg(map[string]map[string]any{"amount": {"sum": "amount"}, "orders": {"count": map[string]any{}}}))
	for _, val := range []string{
		`{"key":"c-2","amount":1,"orders":1}`,
		`{"key":"c-1","orders":1}`,
		`{"key":"c-1","amount":1,"orders":1,"x":2}`,
		`{"key":"c-1","amount":1.50,"orders":1}`,
		`{"key":"c-1","amount":1,"orders":0}`,
		`{"key":"c-1","amount":"1","orders":1}`,
		`{"key":"c-1","amount":1,"orders":1`,
		``,
	} {
		if _, err := a.StateOf([]byte("c-1"), []byte(val), nil); err == nil {
			t.Errorf("StateOf(%s) accepted it", val)
		}
	}
	for name, cfg := range map[string]configs.Aggregate{
		"avg":         aggCfg(map[string]map[string]any{"mean": {"avg": "amount"}}),
		"retractions": {Input: "orders", Fields: map[string]map[string]any{"n": {"count": map[string]any{}}}, Retractions: true},
		"window":      {Input: "orders", Fields: map[string]map[string]any{"n": {"count": map[string]any{}}}, Window: &configs.Window{Tumbling: 60_000_000_000}},
	} {
		if b := mustAggregate(t, cfg); b.ResultsRebuildState() {
			t.Errorf("%s: ResultsRebuildState true", name)
		} else if _, err := b.StateOf([]byte("c-1"), []byte(`{"key":"c-1","n":1}`), nil); err == nil {
			t.Errorf("%s: StateOf accepted a result", name)
		}
	}
}

// foldKey folds n values of value() under key into a copy of st (a fresh state when nil).
func foldKey(t *testing.T, a *Aggregate, key string, st []byte, n int, value func() string) []byte {
	t.Helper()
	state := make([]byte, a.StateSize())
	if st == nil {
		a.InitState(state)
	} else {
		copy(state, st)
	}
	var in []byte
	for range n {
		r := Record{Key: []byte(key), Value: []byte(value())}
		var err error
		if in, err = a.Project(&r, in[:0]); err != nil {
			t.Fatalf("Project(%s): %v", r.Value, err)
		}
		a.Fold(state, in)
	}
	return state
}
