package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
)

// floorName is the name of the no-processing contender of the latency phase.
const floorName = "floor"

// latencyRun is one measured live load: a contender's (or the floor's) latency phase at one
// rate.
type latencyRun struct {
	name   string        // contender, or floorName
	rate   int           // target records/s
	round  int           // 1-based
	load   string        // load averages when it began
	stats  *latencyStats // nil when it failed before measuring
	points []point       // per second of the measured load
	err    string        // why the run failed; "" when every record was seen (and verified)
}

// sustained reports whether the run kept up with its rate: it reached the rate (within 3%),
// every live record became visible, the totals verified, and p99 stayed under limit.
func (r latencyRun) sustained(limit time.Duration) bool {
	s := r.stats
	return r.err == "" && s != nil && s.seen == s.produced && r.reached() && s.p99 < limit
}

// reached reports whether the producer achieved at least 97% of the target rate.
func (r latencyRun) reached() bool {
	return r.stats != nil && r.stats.rate >= 0.97*float64(r.rate)
}

// latencyPhase runs c on its own topic: catch up a small backlog, then a steady live load of
// rate records/s, measuring produce-to-visible latency per record and per second; the final
// totals are verified too. tag makes the run's topics, group and directory its own.
func (h *harness) latencyPhase(ctx context.Context, c contender, rate int, round int, tag string) latencyRun {
	cfg := h.cfg
	run := latencyRun{name: c.name, rate: rate, round: round, load: loadavg()}
	fail := func(format string, args ...any) latencyRun {
		run.err = fmt.Sprintf(format, args...)
		return run
	}
	group := "peers-" + h.runID + "-" + c.name + "-lat" + tag
	l := launch{
		in: group + "-in", out: group + "-out", group: group, dir: filepath.Join(cfg.workDir, c.name+"-lat"+tag),
		enterLag: cfg.latEnterLag, exitLag: cfg.latExitLag,
	}
	spec := workload.Spec{Records: cfg.latBacklog, Keys: cfg.keys, Partitions: int32(cfg.partitions), Seed: cfg.seed + 1}
	if err := createTopic(ctx, h.adm, l.in, int32(cfg.partitions), false); err != nil {
		return fail("%v", err)
	}
	if spec.Records > 0 {
		if err := workload.Produce(ctx, h.cl, l.in, spec); err != nil {
			return fail("prefilling: %v", err)
		}
	}
	want := spec.Expected()
	end, err := endOffsets(ctx, h.adm, l.in)
	if err != nil {
		return fail("%v", err)
	}
	p, logPath, err := h.start(ctx, c, l)
	if err != nil {
		return fail("%v", err)
	}
	defer p.stop(30 * time.Second)
	if _, err := h.waitCaughtUp(ctx, c, p, l, end); err != nil {
		return fail("catching up: %v: %s", err, tail(logPath, 800))
	}
	live, err := kgo.NewClient(kgo.SeedBrokers(h.seeds...), kgo.ProducerLinger(0))
	if err != nil {
		return fail("live producer: %v", err)
	}
	defer live.Close()
	if cfg.latWarmup > 0 {
		// The process is new (not the catch-up run's): warm its JIT and caches with the same
		// live load first, wait until it has caught up with it, and measure only what follows.
		warm := spec
		warm.Seed += 1000
		t0 := time.Now()
		n, _, err := liveLoad(ctx, live, l.in, warm, rate, cfg.latWarmup, want, newTracker())
		if err != nil {
			return fail("warm-up: %v", err)
		}
		end, err := endOffsets(ctx, h.adm, l.in)
		if err != nil {
			return fail("%v", err)
		}
		if _, err := h.waitCaughtUp(ctx, c, p, l, end); err != nil {
			return fail("catching up the warm-up: %v: %s", err, tail(logPath, 800))
		}
		logf("%-18s latency warm-up: %d live records over %s, caught up after %.1fs (not counted)",
			c.name, n, cfg.latWarmup, time.Since(t0).Seconds())
	}
	outEnd, err := endOffsets(ctx, h.adm, l.out)
	if err != nil {
		return fail("%v", err)
	}
	t := newTracker()
	wctx, stopWatch := context.WithCancel(ctx)
	watchErr := make(chan error, 1)
	go func() { watchErr <- watchOutputs(wctx, h.seeds, l.out, outEnd, t, false) }()
	defer func() {
		stopWatch()
		<-watchErr
	}()

	start := time.Now()
	n, achieved, err := liveLoad(ctx, live, l.in, spec, rate, cfg.latDur, want, t)
	if err != nil {
		return fail("%v", err)
	}
	// Wait (bounded) until an output has covered every live record.
	drain := time.Now().Add(30 * time.Second)
	for t.outstanding() > 0 && time.Now().Before(drain) && !p.done() {
		if err := pause(ctx, 50*time.Millisecond); err != nil {
			return fail("%v", err)
		}
	}
	s := t.stats()
	s.produced, s.rate = n, achieved
	run.stats = &s
	run.points = bucket(t.observations(), start)
	if p.done() {
		return fail("exited during the live load: %v", p.exitError())
	}
	if s.seen < n {
		// Behind: the totals are not final yet either, and verifying them would only say so.
		return fail("%d of %d live records never became visible (within 30 s of the load's end)", n-s.seen, n)
	}
	diff, err := h.verify(ctx, l.out, want)
	switch {
	case err != nil:
		return fail("verifying: %v", err)
	case len(diff) > 0:
		return fail("final totals disagree: %s", strings.Join(diff, "; "))
	}
	return run
}

// floorPhase measures the latency floor: the live load produced to a fresh topic and read back
// from that same topic with read_committed, with no processing in between. With eos, the load
// goes through passThrough to a second topic, read back from there: the exactly-once copy,
// committing every -sluice-commit-interval.
func (h *harness) floorPhase(ctx context.Context, rate int, round int, tag string, eos bool) latencyRun {
	cfg := h.cfg
	run := latencyRun{name: floorName, rate: rate, round: round, load: loadavg()}
	if eos {
		run.name = eosCopyName
	}
	fail := func(err error) latencyRun {
		run.err = err.Error()
		return run
	}
	topic := "peers-" + h.runID + "-" + run.name + tag
	if err := createTopic(ctx, h.adm, topic, int32(cfg.partitions), false); err != nil {
		return fail(err)
	}
	read := topic
	if eos {
		read = topic + "-out"
		if err := createTopic(ctx, h.adm, read, int32(cfg.partitions), false); err != nil {
			return fail(err)
		}
	}
	live, err := kgo.NewClient(kgo.SeedBrokers(h.seeds...), kgo.ProducerLinger(0))
	if err != nil {
		return fail(err)
	}
	defer live.Close()
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	passDone := make(chan struct{}) // closed when the pass-through has returned passErr
	var passErr error
	if eos {
		ready := make(chan struct{})
		go func() {
			defer close(passDone)
			passErr = passThrough(wctx, h.seeds, topic, read, topic, cfg.commitInterval, ready)
		}()
		defer func() {
			stopWatch()
			<-passDone
		}()
		select {
		case <-ready:
		case <-passDone:
			return fail(fmt.Errorf("the pass-through stopped before its assignment: %v", passErr))
		case <-time.After(30 * time.Second):
			return fail(errors.New("the pass-through was not assigned its partitions within 30 s"))
		}
		// Warmed as the contenders are: the same load first, not counted; the measured load is
		// read from where the copy of this one ends.
		if cfg.latWarmup > 0 {
			warm := workload.Spec{Keys: cfg.keys, Partitions: int32(cfg.partitions), Seed: cfg.seed + 3}
			if _, _, err := liveLoad(ctx, live, topic, warm, rate, cfg.latWarmup, map[string]workload.Total{}, newTracker()); err != nil {
				return fail(err)
			}
			if err := pause(ctx, 10*cfg.commitInterval+time.Second); err != nil {
				return fail(err)
			}
		}
	}
	from, err := endOffsets(ctx, h.adm, read)
	if err != nil {
		return fail(err)
	}
	t := newTracker()
	watchErr := make(chan error, 1)
	go func() { watchErr <- watchOutputs(wctx, h.seeds, read, from, t, true) }()
	defer func() {
		stopWatch()
		<-watchErr
	}()
	spec := workload.Spec{Keys: cfg.keys, Partitions: int32(cfg.partitions), Seed: cfg.seed + 2}
	start := time.Now()
	n, achieved, err := liveLoad(ctx, live, topic, spec, rate, cfg.latDur, map[string]workload.Total{}, t)
	if err != nil {
		return fail(err)
	}
	drain := time.Now().Add(30 * time.Second)
	for t.outstanding() > 0 && time.Now().Before(drain) {
		if err := pause(ctx, 50*time.Millisecond); err != nil {
			return fail(err)
		}
	}
	s := t.stats()
	s.produced, s.rate = n, achieved
	run.stats = &s
	run.points = bucket(t.observations(), start)
	if s.seen < n {
		run.err = fmt.Sprintf("%d of %d live records never read back", n-s.seen, n)
	}
	select {
	case <-passDone:
		if passErr != nil {
			run.err = fmt.Sprintf("the pass-through stopped: %v", passErr)
		}
	default:
	}
	return run
}

// logRun prints one latency run's figures.
func logRun(r latencyRun) {
	label := r.name
	if r.round > 1 {
		label += " #" + strconv.Itoa(r.round)
	}
	if r.stats == nil {
		logf("%-18s latency at %d rec/s: %s", label, r.rate, r.err)
		return
	}
	s := r.stats
	msg := fmt.Sprintf("%-18s latency at %d rec/s: p50 %s p99 %s max %s (%d/%d live records seen, %.0f rec/s produced; load average %s)",
		label, r.rate, ms(s.p50), ms(s.p99), ms(s.max), s.seen, s.produced, s.rate, r.load)
	if r.err != "" {
		msg += ": " + firstLine(r.err)
	}
	logf("%s", msg)
}

// foldLatency is the figures of one contender's latency runs: a single run's own, or over
// several the median p50, p99, max and produce rate of the runs that measured, with the
// records summed; err is the first failed run's.
func foldLatency(runs []latencyRun) (*latencyStats, string) {
	if len(runs) == 1 {
		return runs[0].stats, runs[0].err
	}
	var p50, p99, most, rate []float64
	agg := latencyStats{}
	errMsg := ""
	for _, r := range runs {
		if r.err != "" && errMsg == "" {
			errMsg = fmt.Sprintf("run %d of %d: %s", r.round, len(runs), r.err)
		}
		if r.stats == nil {
			continue
		}
		agg.produced += r.stats.produced
		agg.seen += r.stats.seen
		p50 = append(p50, float64(r.stats.p50))
		p99 = append(p99, float64(r.stats.p99))
		most = append(most, float64(r.stats.max))
		rate = append(rate, r.stats.rate)
	}
	if len(p50) == 0 {
		return nil, errMsg
	}
	agg.p50 = time.Duration(spreadOf(p50).med)
	agg.p99 = time.Duration(spreadOf(p99).med)
	agg.max = time.Duration(spreadOf(most).med)
	agg.rate = spreadOf(rate).med
	return &agg, errMsg
}

// latencyRows lists latency runs in the order they ran.
func latencyRows(runs []latencyRun) ([]string, [][]string) {
	header := []string{"round", "contender", "target rec/s", "produced rec/s", "seen/live", "p50", "p99", "max", "load average", "status"}
	var rows [][]string
	for _, r := range runs {
		row := []string{strconv.Itoa(r.round), r.name, strconv.Itoa(r.rate), "-", "-", "-", "-", "-", r.load, "ok"}
		if s := r.stats; s != nil {
			row[3] = fmt.Sprintf("%.0f", s.rate)
			row[4] = fmt.Sprintf("%d/%d", s.seen, s.produced)
			row[5], row[6], row[7] = ms(s.p50), ms(s.p99), ms(s.max)
		}
		if r.err != "" {
			row[9] = shorten(firstLine(r.err), 200)
		}
		rows = append(rows, row)
	}
	return header, rows
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

func shorten(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// seriesPath is where the per-second series named name go: beside the Markdown report, or in
// the work directory when there is none, ext appended.
func (h *harness) seriesPath(name, ext string) string {
	base := filepath.Join(h.cfg.workDir, "report")
	if h.cfg.out != "" {
		base = strings.TrimSuffix(h.cfg.out, filepath.Ext(h.cfg.out))
	}
	return base + "-" + name + ext
}

// writeSeries writes runs' per-second figures as CSV (every run) and draws the p99 of each
// line as a PNG; label names a run's line. It returns the two paths.
func (h *harness) writeSeries(runs []latencyRun, name, title string, label func(latencyRun) string) (string, string, error) {
	var b strings.Builder
	b.WriteString("contender,round,rate,second,records,p50_ms,p99_ms,max_ms\n")
	msf := func(d time.Duration) string {
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 3, 64)
	}
	c := chart{title: title, xLabel: "seconds into the measured load", yLabel: "p99 latency (ms, log scale)", logY: true}
	for _, r := range runs {
		var x, y []float64
		for _, p := range r.points {
			fmt.Fprintf(&b, "%s,%d,%d,%d,%d,", r.name, r.round, r.rate, p.second, p.records)
			if p.records == 0 {
				b.WriteString(",,\n")
				x, y = append(x, float64(p.second)), append(y, nan())
				continue
			}
			fmt.Fprintf(&b, "%s,%s,%s\n", msf(p.p50), msf(p.p99), msf(p.max))
			x, y = append(x, float64(p.second)), append(y, float64(p.p99)/float64(time.Millisecond))
		}
		if l := label(r); l != "" && len(x) > 0 {
			c.lines = append(c.lines, series{label: l, x: x, y: y})
		}
	}
	csvPath, pngPath := h.seriesPath(name, ".csv"), h.seriesPath(name, ".png")
	if err := writeFile(csvPath, b.String()); err != nil {
		return "", "", err
	}
	if err := writePNG(pngPath, c.draw(1000, 520)); err != nil {
		return csvPath, "", err
	}
	return csvPath, pngPath, nil
}

func nan() float64 { return math.NaN() }

func writeFile(path, data string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(data), 0o644)
}

// latencyContenders is the contenders of the latency phase among selected.
func latencyContenders(selected []contender) []contender {
	return slices.DeleteFunc(slices.Clone(selected), func(c contender) bool { return !c.latency })
}

// realTime runs the latency phase: -latency-runs rounds, each the floor and then every latency
// contender among selected, at -latency-rate; results[i] gets selected[i]'s figures (the
// median over the rounds). The per-second series go beside the report as CSV and PNG.
func (h *harness) realTime(ctx context.Context, selected []contender, results []*result) {
	cfg := h.cfg
	if !slices.ContainsFunc(selected, func(c contender) bool { return c.latency }) {
		return
	}
	per := make([][]latencyRun, len(selected))
	var floor, eosCopy []latencyRun
	for round := 1; round <= cfg.latRuns; round++ {
		tag := ""
		if cfg.latRuns > 1 {
			tag = "-r" + strconv.Itoa(round)
		}
		if ctx.Err() != nil {
			return
		}
		f := h.floorPhase(ctx, cfg.latRate, round, tag, false)
		logRun(f)
		floor = append(floor, f)
		h.latRuns = append(h.latRuns, f)
		if cfg.eosCopy {
			f := h.floorPhase(ctx, cfg.latRate, round, tag, true)
			logRun(f)
			eosCopy = append(eosCopy, f)
			h.latRuns = append(h.latRuns, f)
		}
		for i, c := range selected {
			if !c.latency || ctx.Err() != nil {
				continue
			}
			if r := results[i]; !r.ok() && r.status != "DISAGREES" {
				r.latErr = "skipped: the catch-up run failed"
				logf("%-18s latency: %s", c.name, r.latErr)
				continue
			}
			lr := h.latencyPhase(ctx, c, cfg.latRate, round, tag)
			logRun(lr)
			per[i] = append(per[i], lr)
			h.latRuns = append(h.latRuns, lr)
		}
	}
	h.floor, h.floorErr = foldLatency(floor)
	if len(eosCopy) > 0 {
		h.eosCopy, h.eosCopyErr = foldLatency(eosCopy)
	}
	for i := range selected {
		if len(per[i]) > 0 {
			results[i].lat, results[i].latErr = foldLatency(per[i])
		}
	}
	title := fmt.Sprintf("p99 per second, %d rec/s, %d keys", cfg.latRate, cfg.keys)
	if cfg.latRuns > 1 {
		title += fmt.Sprintf(" (round 1 of %d)", cfg.latRuns)
	}
	label := func(r latencyRun) string {
		if r.round != 1 {
			return ""
		}
		return r.name
	}
	csvPath, pngPath, err := h.writeSeries(h.latRuns, "latency", title, label)
	if err != nil {
		logf("latency series: %v", err)
		return
	}
	h.seriesFiles = append(h.seriesFiles, csvPath, pngPath)
	logf("latency series written to %s and %s", csvPath, pngPath)
}
