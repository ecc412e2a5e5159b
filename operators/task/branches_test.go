package task

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/valyala/fastjson"

	"github.com/sluice-dev/sluice/state"
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

// TestBranchAheadAbortBeforeFirstBatch pins a loss TestChaos found: a task starts with the
// filter's progress ahead of the topic's committed offset (SetProgress) and a checkpoint aborts
// before the first batch. The rewind must go to the committed offset, where the aggregate
// resumes, not to the filter's progress: the aggregate would never see the records between.
func TestBranchAheadAbortBeforeFirstBatch(t *testing.T) {
	plan := mustPlan(t, testConfigBranches("always", 50, 10, 100, "0s"))
	tk := newTestTask(t, plan, state.NewMem(), 1<<20, 0)
	prod := newFakeProducer()
	tk.d.Producer = prod
	tk.SetProgress(testTopic, 100, map[string]int64{"sevens": 2148})
	tk.Observe(testTopic, 1<<40, 0)
	pd, err := tk.Checkpoint(prod)
	if err != nil {
		t.Fatal(err)
	}
	prod.abort()
	if seek, ok := tk.Aborted(pd)[testTopic]; !ok || seek != 100 {
		t.Fatalf("abort before the first batch rewinds to %d (given: %v), want the committed offset 100 (the aggregate's)", seek, ok)
	}
	// The batch from the committed offset: the aggregate takes every record, the filter only
	// those from its progress on.
	var recs []*kgo.Record
	for off := int64(100); off < 2200; off++ {
		recs = append(recs, &kgo.Record{Topic: testTopic, Offset: off, Key: []byte("c-1"), Timestamp: time.UnixMilli(off),
			Value: fmt.Appendf(nil, `{"order_id":"o-%d","customer_id":"c-1","amount":1,"ts":%d}`, off, off)})
	}
	if err := tk.Process(testTopic, recs); err != nil {
		t.Fatal(err)
	}
	tk.Observe(testTopic, 0, 0)
	for range 2 {
		if err := commitCheckpoint(tk, prod); err != nil {
			t.Fatal(err)
		}
	}
	if got := prod.lastByKey(testSink)["c-1"]; !strings.Contains(got, `"n":2100`) {
		t.Errorf("the aggregate's output %s, want n=2100 (offsets 100 to 2199)", got)
	}
	if n := len(prod.committed(testBranchSink)); n != 5 { // o-2157, o-2167, ..., o-2197
		t.Errorf("the filter wrote %d records, want the 5 from its progress on", n)
	}
}
