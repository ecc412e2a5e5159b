package operators

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/configs"
)

// rowCtx is a Context that keeps one key's state and the rows written under their Kafka keys.
type rowCtx struct {
	sessCtx
	rows [][2][]byte
}

func (c *rowCtx) EmitKey(key, value []byte) {
	c.rows = append(c.rows, [2][]byte{bytes.Clone(key), bytes.Clone(value)})
}

// TestTopGatherRow: the rows a top writes (every Flush's, in any order, each rank's latest
// winning as in a compacted topic) gather back into the state they were written from, byte for
// byte, for plain and composite keys, keys and records that need escaping, and records with
// spaces, with the rank column and without it (omit_rank: the rank from the Kafka key alone); a
// row Flush would not write for the key is an error, and a state with a rank still missing is
// refused by Process.
func TestTopGatherRow(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, key := range []string{`c-1`, `c"2\`, `{"bidder":7,"auction":1001}`} {
		for k := range 6 {
			n, omit := []int{1, 3, 10}[k%3], k >= 3
			top, err := NewTop("best", configs.Top{N: n, By: "price", Order: configs.OrderDesc, Rank: "rank_number", OmitRank: omit, Changelog: configs.ChangelogOutput})
			if err != nil {
				t.Fatal(err)
			}
			ctx := &rowCtx{}
			for i := range 40 {
				v := fmt.Sprintf(`{"id":%d, "price":%d,"note":"a\"b" }`, i, rng.IntN(20))
				if i%3 == 0 {
					v = fmt.Sprintf(`{"price":%d.5}`, rng.IntN(20))
				}
				in, err := top.Project(0, &Record{Key: []byte(key), Value: []byte(v)}, nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := top.Process(ctx, []byte(key), 0, in); err != nil {
					t.Fatal(err)
				}
				if rng.IntN(4) == 0 {
					if err := top.Flush(ctx, []byte(key)); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := top.Flush(ctx, []byte(key)); err != nil {
				t.Fatal(err)
			}
			latest := map[string][]byte{}
			var order []string
			for _, r := range ctx.rows {
				if _, ok := latest[string(r[0])]; !ok {
					order = append(order, string(r[0]))
				}
				latest[string(r[0])] = r[1]
			}
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			var st []byte
			for _, k := range order {
				if st, err = top.GatherRow([]byte(key), []byte(k), latest[k], st, nil); err != nil {
					t.Fatalf("key %s, n %d: GatherRow(%s=%s): %v", key, n, k, latest[k], err)
				}
			}
			if !bytes.Equal(st, ctx.state) {
				t.Fatalf("key %s, n %d, omit_rank %t: gathered state\n%q, want\n%q", key, n, omit, st, ctx.state)
			}
			for _, r := range ctx.rows {
				if hasRank := bytes.Contains(r[1], []byte(`"rank_number":`)); hasRank == omit {
					t.Fatalf("key %s, n %d, omit_rank %t: row %s", key, n, omit, r[1])
				}
			}
			if !top.ValidState(st) {
				t.Fatalf("key %s, n %d: the gathered state is not valid", key, n)
			}
		}
	}

	top, err := NewTop("best", configs.Top{N: 3, By: "price", Order: configs.OrderDesc, Rank: "rank_number", Changelog: configs.ChangelogOutput})
	if err != nil {
		t.Fatal(err)
	}
	row := `{"price":5,"rank_number":2}`
	for _, tc := range []struct{ key, rowKey, row, err string }{
		{`c-1`, `{"key":"c-2","rank_number":2}`, row, "not a row key"},
		{`c-1`, `{"key":"c-1","rank_number":4}`, `{"price":5,"rank_number":4}`, "ranks 1 to 3"},
		{`c-1`, `{"key":"c-1","rank_number":1}`, row, "does not end with its rank column"},
		{`c-1`, `{"key":"c-1","rank_number":2}`, `{"price":"x","rank_number":2}`, "want a number"},
		{`c-1`, `{"key":"c-1","rank_number":2}`, `[1,"rank_number":2}`, "does not end with its rank column"},
		{`c-1`, `c-1`, row, "not a row key"},
	} {
		if _, err := top.GatherRow([]byte(tc.key), []byte(tc.rowKey), []byte(tc.row), nil, nil); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("GatherRow(%s, %s=%s) = %v, want an error with %q", tc.key, tc.rowKey, tc.row, err, tc.err)
		}
	}
	omitting, err := NewTop("best", configs.Top{N: 3, By: "price", Order: configs.OrderDesc, Rank: "rank_number", OmitRank: true, Changelog: configs.ChangelogOutput})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ rowKey, row, err string }{
		{`{"key":"c-1","rank_number":4}`, `{"price":5}`, "ranks 1 to 3"},
		{`{"key":"c-1","rank_number":2}`, `[1]`, "not a JSON object"},
		{`{"key":"c-1","rank_number":2}`, `{"price":"x"}`, "want a number"},
		{`{"key":"c-2","rank_number":2}`, `{"price":5}`, "not a row key"},
	} {
		if _, err := omitting.GatherRow([]byte("c-1"), []byte(tc.rowKey), []byte(tc.row), nil, nil); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("omit_rank: GatherRow(c-1, %s=%s) = %v, want an error with %q", tc.rowKey, tc.row, err, tc.err)
		}
	}
	// Rank 2 alone: rank 1 is missing until its row comes.
	st, err := top.GatherRow([]byte("c-1"), []byte(`{"key":"c-1","rank_number":2}`), []byte(row), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := &rowCtx{sessCtx: sessCtx{state: st}}
	in, _ := top.Project(0, &Record{Key: []byte("c-1"), Value: []byte(`{"price":1}`)}, nil)
	if err := top.Process(ctx, []byte("c-1"), 0, in); err == nil {
		t.Errorf("Process on a state with rank 1 missing: no error")
	}
	if st, err = top.GatherRow([]byte("c-1"), []byte(`{"key":"c-1","rank_number":1}`), []byte(`{"price":9,"rank_number":1}`), st, nil); err != nil {
		t.Fatal(err)
	}
	ctx.state = st
	if err := top.Process(ctx, []byte("c-1"), 0, in); err != nil {
		t.Errorf("Process on the state with both ranks: %v", err)
	}
}
