package task

import (
	"strings"
	"testing"
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
	if doc := testConfigOutputLog("auto", 5, 1, 10, "0s"); !strings.Contains(doc, "changelog: output") || strings.Contains(doc, "avg") {
		t.Fatalf("the pipeline is not the one meant:\n%s", doc)
	}
	eachSeed(t, seedCounts{normal: 30, short: 5, long: 400}, func(t *testing.T, seed uint64, i int) {
		for _, r := range oneAnswerWith(t, seed, i == 0, testConfigOutputLog) {
			if len(r.clLast) != len(r.state) {
				t.Errorf("%s: %d keys rebuilt from the results, %d in state", r.name, len(r.clLast), len(r.state))
			}
		}
	})
}
