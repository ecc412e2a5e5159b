package task

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fastjson"
)

// testBranchSink is the sink of testConfigBranches's second branch.
const testBranchSink = "sevens"

// testConfigBranches is testConfigEvery with a second operator reading the same source: a
// filter whose records go straight to testBranchSink (two chains on one topic).
func testConfigBranches(mode string, enter, exit int64, cacheKeys int, every string) string {
	return strings.Replace(testConfigEvery(mode, enter, exit, cacheKeys, every), "sinks:\n", `  - name: sevens
    filter:
      input: orders
      expr: order_id endsWith "7"
    output: sevens_out
sinks:
  sevens_out: {topic: `+testBranchSink+`, format: json}
`, 1)
}

// TestBranchesOneAnswer is TestOneAnswerTwoModes with a second branch on the input: a
// stateless filter beside the aggregate. The aggregate's answer is the same in every mode, and
// the filter writes each record it keeps exactly once, although the two chains commit
// different progress (the filter's outputs go out at every checkpoint while the aggregate
// sorts its backlog) and aborts rewind the topic to the smaller: a branch ahead skips what it
// has done. A record the source cannot decode is a dead letter once (by the first branch).
func TestBranchesOneAnswer(t *testing.T) {
	seeds := 30
	if testing.Short() {
		seeds = 5
	}
	base := uint64(time.Now().UnixNano())
	if *flagSeed != 0 {
		base, seeds = *flagSeed, 1
	}
	t.Logf("base seed %d (rerun one seed with -seed=N)", base)
	for i := range seeds {
		seed := base + uint64(i)
		ok := t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			res := oneAnswerWith(t, seed, i == 0, testConfigBranches)
			var ref []string
			for k, r := range res {
				var ids []string
				for _, o := range r.branch {
					v, err := fastjson.ParseBytes(o.Value)
					if err != nil {
						t.Fatalf("%s: branch output %q: %v", r.name, o.Value, err)
					}
					id := string(v.GetStringBytes("order_id"))
					if !strings.HasSuffix(id, "7") {
						t.Errorf("%s: branch output %s does not end in 7", r.name, id)
					}
					ids = append(ids, id)
				}
				slices.Sort(ids)
				if d := len(ids) - len(slices.Compact(slices.Clone(ids))); d > 0 {
					t.Errorf("%s: %d branch outputs duplicated (of %d)", r.name, d, len(ids))
				}
				if k == 0 {
					ref = ids
				} else if !slices.Equal(ref, ids) {
					t.Errorf("branch outputs differ: %s %d vs %s %d", res[0].name, len(ref), r.name, len(ids))
				}
			}
			if len(res) > 0 && len(ref) == 0 && len(res[0].outs) > 10 {
				t.Logf("no order id ending in 7 was kept")
			}
		})
		if !ok {
			t.Fatalf("seed %d failed; rerun with: go test ./operators/task -run TestBranchesOneAnswer -seed=%d -v", seed, seed)
		}
	}
}
