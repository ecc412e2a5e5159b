package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/valyala/fastjson"
)

// This file explains a windows run that lost records: which input records no final counts and
// no dead letter carries, as offset ranges per partition, and what the instances logged about
// those partitions. A failed run's seeds cannot replay its kill moments, so the failure output
// is all there is to go on.

// unaccounted returns the input records that the finals and dead letters leave out, by
// partition, in offset order: every member of a missing final; the members a short final
// leaves out (the subset of its members of the missing count and sum, when exactly that many
// are missing and a search finds it); every late record without its dead letter. ambiguous
// counts the short finals whose left-out members could not be named.
func unaccounted(want windowed, finals, dlq []*kgo.Record, ev eventTime) (out map[int32][]int64, ambiguous int) {
	out = map[int32][]int64{}
	add := func(at srcPos) { out[at.part] = append(out[at.part], at.offset) }
	var parser fastjson.Parser
	seen := map[winKey]bool{}
	for _, r := range finals {
		k, got, _, _, ok := decodeFinal(&parser, r, ev)
		if !ok || seen[k] {
			continue
		}
		seen[k] = true
		w, ok := want.finals[k]
		if !ok || got == w {
			continue
		}
		left, ok := leftOut(want.members[k], int(w.Count-got.Count), w.SumCents-got.SumCents)
		if !ok {
			ambiguous++
			continue
		}
		for _, m := range left {
			add(m.at)
		}
	}
	for k := range want.finals {
		if !seen[k] {
			for _, m := range want.members[k] {
				add(m.at)
			}
		}
	}
	dead := map[srcPos]bool{}
	for _, r := range dlq {
		if _, at, ok := deadLetterSource(r); ok {
			dead[at] = true
		}
	}
	for at := range want.late {
		if !dead[at] {
			add(at)
		}
	}
	for p := range out {
		slices.Sort(out[p])
	}
	return out, ambiguous
}

// leftOut finds n of ms whose amounts sum to cents (a bounded search); ok is false when n is
// out of range or no such subset turns up within the bound.
func leftOut(ms []member, n int, cents int64) (left []member, ok bool) {
	if n <= 0 || n > len(ms) {
		return nil, false
	}
	steps := 0
	pick := make([]member, 0, n)
	var walk func(i int, need int, sum int64) bool
	walk = func(i, need int, sum int64) bool {
		if steps++; steps > 1_000_000 {
			return false
		}
		if need == 0 {
			return sum == cents
		}
		for j := i; j <= len(ms)-need; j++ {
			pick = append(pick, ms[j])
			if walk(j+1, need-1, sum+ms[j].cents) {
				return true
			}
			pick = pick[:len(pick)-1]
		}
		return false
	}
	if !walk(0, n, 0) {
		return nil, false
	}
	return pick, true
}

// offsetRanges writes offs (sorted) as ranges, joining offsets at most gap apart:
// "20901-21187 (212 records)".
func offsetRanges(offs []int64, gap int64) string {
	var b strings.Builder
	for i := 0; i < len(offs); {
		j := i
		for j+1 < len(offs) && offs[j+1]-offs[j] <= gap {
			j++
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		if i == j {
			fmt.Fprintf(&b, "%d", offs[i])
		} else {
			fmt.Fprintf(&b, "%d-%d (%d records)", offs[i], offs[j], j-i+1)
		}
		i = j + 1
	}
	return b.String()
}

// explainLoss logs the input records the finals and dead letters leave out, and, for the
// partitions that hold them, what each instance logged about them.
func (ch *chaos) explainLoss(want windowed, finals, dlq []*kgo.Record, ev eventTime) {
	t := ch.t
	t.Helper()
	lost, ambiguous := unaccounted(want, finals, dlq, ev)
	if len(lost) == 0 && ambiguous == 0 {
		return
	}
	parts := slices.Sorted(func(yield func(int32) bool) {
		for p := range lost {
			if !yield(p) {
				return
			}
		}
	})
	var b strings.Builder
	for _, p := range parts {
		fmt.Fprintf(&b, "\n  partition %d: %s", p, offsetRanges(lost[p], 64))
	}
	t.Logf("input records no final counts and no dead letter carries (%d short finals not explained):%s", ambiguous, b.String())
	for _, in := range ch.ins {
		t.Logf("=== what instance %s logged about partitions %v (and its assignments, aborts, warnings; the last 300 such lines) ===\n%s",
			in.id, parts, in.linesAbout(parts, 300))
	}
}

// linesAbout returns the JSON log lines of every run of in that name one of parts (the field
// "partition") or that are about the whole instance: assignments, aborts, starts, warnings and
// errors. It keeps the last n.
func (in *instance) linesAbout(parts []int32, n int) string {
	in.mu.Lock()
	defer in.mu.Unlock()
	var out []string
	for _, line := range bytes.Split(in.logs.Bytes(), []byte("\n")) {
		var m map[string]any
		if json.Unmarshal(line, &m) != nil {
			continue
		}
		if p, ok := m["partition"].(float64); ok {
			if slices.Contains(parts, int32(p)) {
				out = append(out, string(line))
			}
			continue
		}
		msg, _ := m["msg"].(string)
		level, _ := m["level"].(string)
		if level == "WARN" || level == "ERROR" || strings.Contains(msg, "assigned") || strings.Contains(msg, "abort") ||
			strings.Contains(msg, "revoked") || strings.Contains(msg, "starting") || strings.Contains(msg, "joining") {
			out = append(out, string(line))
		}
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return strings.Join(out, "\n")
}

// TestUnaccountedNamesLostRecords checks the explainer on a run that lost a stretch of input:
// the records a short final and a missing final leave out, and a late record without its dead
// letter, come out as one range.
func TestUnaccountedNamesLostRecords(t *testing.T) {
	ev := eventTime{window: 1000, grace: 50, maxDelay: 100}
	var input []*kgo.Record
	order := func(off int64, key string, cents, ts int64) {
		input = append(input, &kgo.Record{Partition: 3, Offset: off, Key: []byte(key),
			Value: fmt.Appendf(nil, `{"customer_id":%q,"amount":%d.%02d,"ts":%d}`, key, cents/100, cents%100, ts)})
	}
	order(0, "a", 100, 10)
	order(1, "b", 250, 20)
	order(2, "a", 300, 30) // lost
	order(3, "c", 410, 40) // lost: c's only record
	order(4, "a", 120, 1500)
	order(5, "b", 999, 100) // late (watermark 1400 ≥ 1050): lost, no dead letter
	order(6, "a", 500, 2000)
	order(7, "a", 700, 9000) // closes windows 0 and 1000
	want, err := windowOracle(input, ev)
	if err != nil {
		t.Fatal(err)
	}
	final := func(key string, start, cents, n int64) *kgo.Record {
		return &kgo.Record{Key: []byte(key), Value: fmt.Appendf(nil, `{"key":%q,"window_start":%d,"window_end":%d,"amount":%d.%02d,"orders":%d}`,
			key, start, start+1000, cents/100, cents%100, n)}
	}
	finals := []*kgo.Record{final("a", 0, 100, 1), final("b", 0, 250, 1), final("a", 1000, 120, 1), final("a", 2000, 500, 1)}
	lost, ambiguous := unaccounted(want, finals, nil, ev)
	if ambiguous != 0 || len(lost) != 1 || !slices.Equal(lost[3], []int64{2, 3, 5}) {
		t.Fatalf("unaccounted = %v (%d ambiguous), want partition 3: [2 3 5]", lost, ambiguous)
	}
	if got := offsetRanges(lost[3], 64); got != "2-5 (3 records)" {
		t.Fatalf("offsetRanges = %q", got)
	}
}
