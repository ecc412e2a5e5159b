package main

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// spread is the median and the range of one figure over a contender's timed runs.
type spread struct {
	med, lo, hi float64
	n           int // runs the figure was taken over; 0: none
}

// spreadOf returns the median (the mean of the middle two for an even count), minimum and
// maximum of xs.
func spreadOf(xs []float64) spread {
	if len(xs) == 0 {
		return spread{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return spread{med: med, lo: s[0], hi: s[n-1], n: n}
}

// format renders the median with prec decimals.
func (s spread) format(prec int) string {
	if s.n == 0 {
		return "-"
	}
	return strconv.FormatFloat(s.med, 'f', prec, 64)
}

// formatRange renders "min–max" with prec decimals.
func (s spread) formatRange(prec int) string {
	if s.n == 0 {
		return "-"
	}
	return strconv.FormatFloat(s.lo, 'f', prec, 64) + "–" + strconv.FormatFloat(s.hi, 'f', prec, 64)
}

// figures are a contender's figures over its timed runs.
type figures struct {
	seconds, rate, cpu, netJob spread
	agreed                     int // runs whose status is ok
}

// figures returns r's figures: over its runs when it has several, else its own.
func (r *result) figures() figures {
	runs := r.runs
	if runs == nil {
		runs = []*result{r}
	}
	var sec, rate, cpu, net []float64
	var f figures
	for _, x := range runs {
		if x.ok() {
			f.agreed++
		}
		if !x.timed() {
			continue
		}
		sec = append(sec, x.seconds)
		rate = append(rate, x.rate())
		cpu = append(cpu, x.cpu)
		if x.netJob > 0 {
			net = append(net, x.netJob)
		}
	}
	f.seconds, f.rate, f.cpu, f.netJob = spreadOf(sec), spreadOf(rate), spreadOf(cpu), spreadOf(net)
	return f
}

// medRate is the median records/s over r's timed runs (r's own rate for a single run).
func (r *result) medRate() float64 {
	if r.runs == nil {
		return r.rate()
	}
	return r.figures().rate.med
}

// aggregate folds one contender's runs (in round order) into one result. A single run is
// returned as it is. Otherwise the result carries the median seconds, CPU and net job time over
// the timed runs, the largest peak RSS, the join counts of the median run, and the status of the
// worst run: the first that did not pass (failed, or disagreed), else the first that was not ok,
// else ok; statusRound says which run that was.
func aggregate(runs []*result) *result {
	if len(runs) == 1 {
		return runs[0]
	}
	var timed []*result
	for _, r := range runs {
		if r.timed() {
			timed = append(timed, r)
		}
	}
	base := runs[0]
	if len(timed) > 0 {
		sorted := slices.Clone(timed)
		slices.SortStableFunc(sorted, func(a, b *result) int {
			switch {
			case a.seconds < b.seconds:
				return -1
			case a.seconds > b.seconds:
				return 1
			}
			return 0
		})
		base = sorted[(len(sorted)-1)/2]
	}
	agg := *base
	agg.runs = runs
	f := agg.figures()
	agg.seconds, agg.cpu, agg.netJob = f.seconds.med, f.cpu.med, f.netJob.med
	for _, r := range runs {
		agg.peakKiB = max(agg.peakKiB, r.peakKiB)
	}
	worst := -1
	for i, r := range runs {
		if !r.passed() {
			worst = i
			break
		}
	}
	if worst < 0 {
		for i, r := range runs {
			if !r.ok() {
				worst = i
				break
			}
		}
	}
	if worst >= 0 {
		w := runs[worst]
		agg.status, agg.detail, agg.round = w.status, w.detail, w.round
	} else {
		agg.round = 0
	}
	return &agg
}

// statusCell is r's status for a table: the first line, and with several runs the run it
// comes from.
func (r *result) statusCell() string {
	s, _, _ := strings.Cut(r.status, "\n")
	if r.runs != nil && !r.ok() && r.round > 0 {
		s = fmt.Sprintf("%s (run %d of %d)", s, r.round, len(r.runs))
	}
	return s
}

// netJobLine is the line the Flink contender prints when its job has finished.
var netJobLine = regexp.MustCompile(`flink: job finished in (\d+) ms`)

// netJobSeconds returns the net job runtime a Flink contender printed to its log, in seconds;
// 0 when there is none.
func netJobSeconds(logPath string) float64 {
	b, err := os.ReadFile(logPath)
	if err != nil {
		return 0
	}
	m := netJobLine.FindAllSubmatch(b, -1)
	if len(m) == 0 {
		return 0
	}
	ms, err := strconv.ParseInt(string(m[len(m)-1][1]), 10, 64)
	if err != nil {
		return 0
	}
	return float64(ms) / 1000
}

// javaBytes parses a JVM memory size (-Xmx syntax: 512m, 4g, 1048576k, bytes) into bytes.
func javaBytes(s string) (int64, error) {
	if s == "" {
		return 0, fmt.Errorf("empty size")
	}
	mult := int64(1)
	switch s[len(s)-1] {
	case 'k', 'K':
		mult = 1 << 10
	case 'm', 'M':
		mult = 1 << 20
	case 'g', 'G':
		mult = 1 << 30
	case 't', 'T':
		mult = 1 << 40
	}
	digits := s
	if mult > 1 {
		digits = s[:len(s)-1]
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("size %q: want a positive number with an optional k, m, g or t suffix", s)
	}
	return n * mult, nil
}
