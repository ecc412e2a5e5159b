package task

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// testConfigOutputLog is testConfigEvery's aggregate without its avg, whose results are its
// changelog (changelog: output).
func testConfigOutputLog(mode string, enter, exit int64, cacheKeys int, every string) string {
	doc := testConfigEvery(mode, enter, exit, cacheKeys, every)
	doc = strings.Replace(doc, "        mean: {avg: amount}\n", "", 1)
	return strings.Replace(doc, "    output: out\n", "      changelog: output\n    output: out\n", 1)
}

// TestOneAnswerTwoModesOutputLog is the metamorphic test (TestOneAnswerTwoModes) of an
// aggregate whose results are its changelog: in real time, in backlog (with backlog
// checkpoints, whose results are written too) and with random switches, aborts and produce
// errors, the state, the last results and the dead letters agree, the oracle's totals hold, and
// every key's state is the one its last committed result rebuilds, at the offset after it.
func TestOneAnswerTwoModesOutputLog(t *testing.T) {
	seeds := 30
	if *flagLong {
		seeds = 400
	}
	if testing.Short() {
		seeds = 5
	}
	base := uint64(time.Now().UnixNano())
	if *flagSeed != 0 {
		base, seeds = *flagSeed, 1
	}
	t.Logf("base seed %d (rerun one seed with -seed=N)", base)
	if doc := testConfigOutputLog("auto", 5, 1, 10, "0s"); !strings.Contains(doc, "changelog: output") || strings.Contains(doc, "avg") {
		t.Fatalf("the pipeline is not the one meant:\n%s", doc)
	}
	for i := range seeds {
		seed := base + uint64(i)
		ok := t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			res := oneAnswerWith(t, seed, i == 0, testConfigOutputLog)
			for _, r := range res {
				if len(r.clLast) != len(r.state) {
					t.Errorf("%s: %d keys rebuilt from the results, %d in state", r.name, len(r.clLast), len(r.state))
				}
			}
		})
		if !ok {
			t.Fatalf("seed %d failed; rerun with: go test ./operators/task -run TestOneAnswerTwoModesOutputLog -seed=%d -v", seed, seed)
		}
	}
}
