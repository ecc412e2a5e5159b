package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// report is the rendered results: a plain table for the terminal and a Markdown document.
type report struct {
	table    string
	markdown string
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }

func mib(kib int64) string {
	if kib <= 0 {
		return "?"
	}
	return fmt.Sprintf("%.0f MiB", float64(kib)/1024)
}

func ratio(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

func (h *harness) report(results []*result) report {
	byName := map[string]*result{}
	for _, r := range results {
		byName[r.name] = r
	}
	header, rows := catchUpRows(results, h.cfg.runs > 1)
	if h.cfg.workload == "join" {
		header, rows = joinRows(results)
	}
	latHeader := []string{"contender", "live records", "produced rec/s", "p50", "p99", "max", "status"}
	var latRows [][]string
	floorRow := func(label string, f *latencyStats, ferr string) {
		if f == nil && ferr == "" {
			return
		}
		row := []string{label, "-", "-", "-", "-", "-", "ok"}
		if f != nil {
			row[1], row[2] = fmt.Sprint(f.produced), fmt.Sprintf("%.0f", f.rate)
			row[3], row[4], row[5] = ms(f.p50), ms(f.p99), ms(f.max)
		}
		if ferr != "" {
			row[6] = ferr
		}
		latRows = append(latRows, row)
	}
	floorRow("floor (no processing)", h.floor, h.floorErr)
	floorRow(fmt.Sprintf("exactly-once copy (no processing; a transaction every %s)", h.cfg.commitInterval), h.eosCopy, h.eosCopyErr)
	for _, r := range results {
		if r.lat == nil && r.latErr == "" {
			continue
		}
		row := []string{r.name, "-", "-", "-", "-", "-", "ok"}
		if r.lat != nil {
			row[1] = fmt.Sprint(r.lat.produced)
			row[2] = fmt.Sprintf("%.0f", r.lat.rate)
			row[3], row[4], row[5] = ms(r.lat.p50), ms(r.lat.p99), ms(r.lat.max)
		}
		if r.latErr != "" {
			row[6] = r.latErr
			if len(row[6]) > 200 {
				row[6] = row[6][:200] + "..."
			}
		}
		latRows = append(latRows, row)
	}

	var t strings.Builder
	t.WriteString(plain(header, rows))
	if len(latRows) > 0 {
		fmt.Fprintf(&t, "\nreal-time latency (produce to visible, read_committed; %d rec/s for %s after a %d-record catch-up and a %s warm-up",
			h.cfg.latRate, h.cfg.latDur, h.cfg.latBacklog, h.cfg.latWarmup)
		if h.cfg.latRuns > 1 {
			fmt.Fprintf(&t, "; median of %d rounds", h.cfg.latRuns)
		}
		t.WriteString("):\n")
		t.WriteString(plain(latHeader, latRows))
	}
	crit := h.criteria(byName)
	if len(crit) > 0 {
		t.WriteString("\nissue 4 criteria:\n")
		for _, c := range crit {
			t.WriteString("  " + c + "\n")
		}
	}

	var m strings.Builder
	fmt.Fprintf(&m, "# sluice peer benchmark\n\n")
	fmt.Fprintf(&m, "Run %s (UTC %s).\n\n", h.runID, time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(&m, "Command: `%s`\n\n", h.commandLine())
	switch h.cfg.workload {
	case "join":
		when := "the workload's start, at or before every order's timestamp"
		if h.cfg.rowsAfter {
			when = "after every order's timestamp"
		}
		fmt.Fprintf(&m, "Workload `join` (FLIP-326): topic `%s`, %d partitions, %d orders over %d customers, seed %d, "+
			"then, once every order was acknowledged, topic `%s` (%d partitions): one row per customer "+
			"`{\"customer_id\":..,\"region\":..,\"tier\":..}` keyed by customer_id, timestamp %d (%s). "+
			"Both are in Kafka before any contender starts. Every contender joins each order with its customer's row "+
			"(stream-table inner join) and writes the order's JSON object with the row under `\"%s\"`, keyed by customer_id.\n\n",
			h.cfg.topic, h.cfg.partitions, h.cfg.records, h.cfg.keys, h.cfg.seed, h.cfg.tableTopic, h.cfg.partitions,
			h.join.rowsTS(), when, joinTable)
	case "windows":
		fmt.Fprintf(&m, "Workload `windows`: topic `%s`, %d partitions, %d records, %d keys (customer_id), seed %d, "+
			"event time `ts` growing with the record index over %s (no record late), then one closing record per partition "+
			"at ts %d (the end of the last window, so every window of the backlog closes); every contender computes "+
			"%s tumbling windows, grace 0, per key sum(amount) and count, and writes one final per (key, window) as "+
			"`{\"key\":..,\"window_start\":..,\"window_end\":..,\"amount\":..,\"orders\":..}`: %d finals expected.\n\n",
			h.cfg.topic, h.cfg.partitions, h.inputRecords(), h.cfg.keys, h.cfg.seed, yamlDuration(h.cfg.windowSpan), h.win.closeTS(),
			yamlDuration(h.cfg.windowSize), len(h.wantWin))
	default:
		fmt.Fprintf(&m, "Workload: topic `%s`, %d partitions, %d records, %d keys (customer_id), seed %d; "+
			"every contender computes per key sum(amount) and count and writes `{\"key\":..,\"amount\":..,\"orders\":..}`.\n\n",
			h.cfg.topic, h.cfg.partitions, h.cfg.records, h.cfg.keys, h.cfg.seed)
	}
	m.WriteString("## Machine\n\n")
	for _, l := range machine() {
		m.WriteString("- " + l + "\n")
	}
	m.WriteString("\n## Versions\n\n")
	for _, l := range h.versions() {
		m.WriteString("- " + l + "\n")
	}
	m.WriteString("\n## Catch-up\n\n")
	switch h.cfg.workload {
	case "join":
		m.WriteString("Wall time from process start until the contender's consumer group has committed the end " +
			"offsets of the orders (or, if its outputs became visible later, until their count stopped growing). " +
			"The output topic is then read read_committed: an order is joined when it has exactly one output, " +
			"keyed by its customer_id, whose `customers` row is its customer's, with the region `workload.Region` gives. " +
			"`missed joins`: the only difference is orders without output (an inner join that processed them " +
			"before their customer's row); for a peer that is the measurement, for sluice a failure.\n\n")
	case "windows":
		m.WriteString("Wall time from process start until the contender's consumer group has committed the end " +
			"offsets of the input and every final is visible read_committed (Kafka Streams, sluice), or the bounded " +
			"job has exited (Flink, ceiling); every contender's finals are then checked exactly against the " +
			"generator's: each (key, window) once, with the exact sum and count (a duplicate final is a disagreement).\n\n")
	default:
		m.WriteString("Wall time from process start until the contender's consumer group has committed the end " +
			"offsets of the input (Kafka Streams, sluice) or the bounded job has exited (Flink, ceiling); every " +
			"contender's final per-key totals are then checked exactly against the generator's.\n\n")
	}
	m.WriteString("`CPU s`: the contender's user+system CPU seconds (every thread) when it had caught up " +
		"(/proc/<pid>/stat; a bounded job's whole run); 2 cores give 2 per second. `net job s` (Flink): the job's " +
		"net runtime as Flink reports it (JobExecutionResult.getNetRuntime), without JVM and MiniCluster start-up " +
		"and shut-down, beside the process time in `seconds`.\n\n")
	if h.cfg.runs > 1 {
		fmt.Fprintf(&m, "Every contender ran %d times, interleaved round by round (each round runs every contender once, "+
			"in the order of the table), each run with a fresh output topic, group and state. Medians and ranges "+
			"(min–max) are over the runs that were timed; `runs ok` counts the runs that agreed exactly. "+
			"Ratios are of median records/s. The latency phase runs -latency-runs times per contender (below).\n\n", h.cfg.runs)
	}
	m.WriteString(markdown(header, rows))
	if h.cfg.runs > 1 {
		rh, rr := runRows(results)
		m.WriteString("\nEvery run, in the order they ran:\n\n")
		m.WriteString(markdown(rh, rr))
	}
	m.WriteString("\nSettings:\n\n")
	for _, r := range results {
		fmt.Fprintf(&m, "- **%s**: %s\n", r.name, r.setup)
	}
	for _, r := range results {
		if len(r.detail) > 0 {
			fmt.Fprintf(&m, "\n%s (%s):\n\n```\n%s\n```\n", r.name, r.status, strings.Join(r.detail, "\n"))
		}
	}
	if len(latRows) > 0 {
		warm := "no warm-up"
		if h.cfg.latWarmup > 0 {
			warm = fmt.Sprintf("then, to warm the new process (JIT, caches), the same live load for %s, not counted, until "+
				"the contender has committed it", h.cfg.latWarmup)
		}
		fmt.Fprintf(&m, "\n## Real-time latency\n\nEach contender first catches up a %d-record backlog on its own "+
			"topic, %s; then %d records/s are produced for %s (keys uniform over the workload's %d); a record's "+
			"latency is from its produce call to the first read_committed output of its key whose count covers it. "+
			"Each contender's commit settings are in Settings above. The floor row is the same load read back from its own topic with "+
			"no processing: what the broker, the client and this machine cost by themselves. The exactly-once copy row (when measured) is "+
			"the same load copied unprocessed to a second topic by a consumer group (franz-go's GroupTransactSession) in transactions "+
			"that commit every -sluice-commit-interval with their offsets, and read back from there: what a plain exactly-once loop "+
			"pays to make its outputs visible (a reference, not a bound: a processor that pipelines its transactions can beat it).\n\n", h.cfg.latBacklog, warm, h.cfg.latRate, h.cfg.latDur, h.cfg.keys)
		if h.cfg.latRuns > 1 {
			fmt.Fprintf(&m, "The phase ran %d times, interleaved round by round (the floor, then every contender); the table "+
				"gives the median p50, p99 and max over the rounds, the records summed.\n\n", h.cfg.latRuns)
		}
		m.WriteString(markdown(latHeader, latRows))
		if len(h.latRuns) > 0 {
			rh, rr := latencyRows(h.latRuns)
			m.WriteString("\nEvery latency run, in the order they ran (load average when it began):\n\n")
			m.WriteString(markdown(rh, rr))
		}
		if len(h.seriesFiles) > 0 {
			m.WriteString("\nPer second of the measured load, the p50/p99/max of the records that became visible in that second " +
				"(CSV, every run) and the p99 per second (PNG): " + strings.Join(h.seriesFiles, ", ") + "\n")
		}
	}
	if len(crit) > 0 {
		m.WriteString("\n## Issue 4 criteria\n\n")
		for _, c := range crit {
			m.WriteString("- " + c + "\n")
		}
	}
	if h.cfg.smoke {
		m.WriteString("\nSmoke run: the figures are dominated by process start-up (JVM, MiniCluster, group join) " +
			"and say nothing about throughput; the run only shows that every contender starts and agrees.\n")
	}
	return report{table: t.String(), markdown: m.String()}
}

// catchUpRows is the catch-up table of the orders and windows workloads: one row per
// contender, with (multi) the median and range over its runs and how many agreed. The "net job
// s" columns appear when a contender reported its job's net runtime (Flink). Ratios are of
// median records/s, and only between contenders that agreed in every run.
func catchUpRows(results []*result, multi bool) ([]string, [][]string) {
	var ceiling, auto float64
	net := false
	for _, r := range results {
		switch {
		case r.name == "ceiling" && r.ok():
			ceiling = r.medRate()
		case r.name == "sluice-auto" && r.ok():
			auto = r.medRate()
		}
		if r.figures().netJob.n > 0 {
			net = true
		}
	}
	var header []string
	if multi {
		header = []string{"contender", "records", "runs ok", "seconds (median)", "seconds (range)", "records/s (median)", "records/s (range)",
			"CPU s (median)", "CPU s (range)"}
		if net {
			header = append(header, "net job s (median)", "net job s (range)")
		}
		header = append(header, "peak RSS (max)")
	} else {
		header = []string{"contender", "records", "seconds", "records/s", "CPU s"}
		if net {
			header = append(header, "net job s")
		}
		header = append(header, "peak RSS")
	}
	header = append(header, "vs ceiling", "sluice(auto)/peer", "status")
	var rows [][]string
	for _, r := range results {
		f := r.figures()
		row := []string{r.name, fmt.Sprint(r.records)}
		cell := func(s spread, prec int) {
			if multi {
				row = append(row, s.format(prec), s.formatRange(prec))
			} else if r.ok() {
				row = append(row, s.format(prec))
			} else {
				row = append(row, "-")
			}
		}
		if multi {
			row = append(row, fmt.Sprintf("%d/%d", f.agreed, len(r.runs)))
		}
		cell(f.seconds, 2)
		cell(f.rate, 0)
		cell(f.cpu, 1)
		if net {
			cell(f.netJob, 2)
		}
		row = append(row, mib(r.peakKiB))
		vs, peer := "-", "-"
		if r.ok() {
			vs = ratio(r.medRate(), ceiling)
			if !strings.HasPrefix(r.name, "sluice-auto") {
				peer = ratio(auto, r.medRate())
			}
		}
		row = append(row, vs, peer, r.statusCell())
		rows = append(rows, row)
	}
	return header, rows
}

// runRows lists every run of every contender in the order they ran.
func runRows(results []*result) ([]string, [][]string) {
	header := []string{"round", "contender", "seconds", "records/s", "CPU s", "net job s", "peak RSS", "status"}
	var all []*result
	for _, r := range results {
		all = append(all, r.runs...)
	}
	slices.SortStableFunc(all, func(a, b *result) int { return a.round - b.round })
	var rows [][]string
	for _, r := range all {
		row := []string{fmt.Sprint(r.round), r.name, "-", "-", "-", "-", mib(r.peakKiB), r.statusCell()}
		if r.timed() {
			row[2], row[3], row[4] = fmt.Sprintf("%.2f", r.seconds), fmt.Sprintf("%.0f", r.rate()), fmt.Sprintf("%.1f", r.cpu)
			if r.netJob > 0 {
				row[5] = fmt.Sprintf("%.2f", r.netJob)
			}
		}
		rows = append(rows, row)
	}
	return header, rows
}

// joinRows is the catch-up table of the join workload.
func joinRows(results []*result) ([]string, [][]string) {
	header := []string{"contender", "orders", "joined right", "missing", "wrong", "duplicated", "seconds", "CPU s", "peak RSS", "status"}
	var rows [][]string
	for _, r := range results {
		row := []string{r.name, fmt.Sprint(r.records), "-", "-", "-", "-", "-", "-", mib(r.peakKiB), r.status}
		if k := r.join; k != nil {
			row[2], row[3], row[4], row[5] = fmt.Sprint(k.joined), fmt.Sprint(k.missing), fmt.Sprint(k.wrong), fmt.Sprint(k.duplicated)
		}
		if f := r.figures(); f.seconds.n > 0 {
			row[6], row[7] = f.seconds.format(2), f.cpu.format(1)
			if r.runs != nil {
				row[6] += fmt.Sprintf(" (%s, %d runs)", f.seconds.formatRange(2), f.seconds.n)
				row[7] += " (" + f.cpu.formatRange(1) + ")"
			}
		}
		row[9] = r.statusCell()
		rows = append(rows, row)
	}
	return header, rows
}

// criteria evaluates issue 4's targets on the figures at hand.
func (h *harness) criteria(by map[string]*result) []string {
	auto := by["sluice-auto"]
	if h.cfg.smoke || auto == nil || !auto.ok() || h.cfg.workload != "orders" {
		return nil // smoke figures are start-up times: judging them would mislead; issue 4 is about totals
	}
	var out []string
	check := func(peer string, factor float64, what string) {
		p := by[peer]
		if p == nil || !p.ok() {
			return
		}
		got := auto.medRate() / p.medRate()
		verdict := "met"
		if got < factor {
			verdict = "NOT met"
		}
		out = append(out, fmt.Sprintf("sluice(auto) >= %s: %.2fx (%s)", what, got, verdict))
	}
	check("kstreams", 5, "5x Kafka Streams (default cache)")
	check("kstreams-cache512", 5, "5x Kafka Streams (512 MiB cache)")
	check("flink-batch", 1, "Flink BATCH")
	check("ceiling", 0.5, "50% of the consume-only ceiling")
	if ks := by["kstreams"]; ks != nil && ks.lat != nil && auto.lat != nil && auto.latErr == "" && ks.latErr == "" {
		verdict := "met"
		if auto.lat.p99 > ks.lat.p99 {
			verdict = "NOT met"
		}
		out = append(out, fmt.Sprintf("real-time p99 sluice %s <= Kafka Streams %s (%s)", ms(auto.lat.p99), ms(ks.lat.p99), verdict))
	}
	return out
}

func (h *harness) commandLine() string {
	if h.cfg.command != "" {
		return h.cfg.command
	}
	return strings.Join(os.Args, " ")
}

// machine describes the host.
func machine() []string {
	var out []string
	cpu := "?"
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	out = append(out, fmt.Sprintf("CPU: %s, %d logical CPUs available", cpu, runtime.NumCPU()))
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if l, _, ok := strings.Cut(string(b), "\n"); ok {
			var kib int64
			if _, err := fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(l, "MemTotal:")), "%d", &kib); err == nil {
				out = append(out, fmt.Sprintf("Memory: %.1f GiB", float64(kib)/(1<<20)))
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		out = append(out, "Kernel: Linux "+strings.TrimSpace(string(b)))
	}
	out = append(out, "Load average at the end of the run (other work on the host skews every figure): "+loadavg())
	out = append(out, "Go: "+runtime.Version())
	out = append(out, "Java: "+commandLine("java", "-version"))
	return out
}

// loadavg returns the 1, 5 and 15 minute load averages.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// versions lists the contenders' versions from their classpaths and the sluice binary.
func (h *harness) versions() []string {
	c := h.cfg
	jar := func(dir, prefix string) string {
		m, _ := filepath.Glob(filepath.Join(dir, prefix+"-*.jar"))
		for _, f := range m {
			v := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), prefix+"-"), ".jar")
			if v != "" && v[0] >= '0' && v[0] <= '9' {
				return v
			}
		}
		return "?"
	}
	kstreamsLib := filepath.Join(c.kstreamsDir, "target", "lib")
	flinkLib := filepath.Join(c.flinkDir, "target", "lib")
	sluiceV := "not built"
	if _, err := os.Stat(c.sluiceBin); err == nil {
		sluiceV = commandLine(c.sluiceBin, "version")
	}
	return []string{
		"Kafka broker: " + jar(c.kafkaLib, "kafka_2.13") + " (KRaft, single node, integration/kafka/kafka.sh)",
		"Kafka Streams: " + jar(kstreamsLib, "kafka-streams") + " (RocksDB " + jar(kstreamsLib, "rocksdbjni") + ")",
		"Flink: " + jar(flinkLib, "flink-streaming-java") + ", flink-connector-kafka " + jar(flinkLib, "flink-connector-kafka") +
			" (kafka-clients " + jar(flinkLib, "kafka-clients") + ")",
		"sluice: " + sluiceV,
		"ceiling: franz-go (this harness)",
	}
}

// commandLine runs argv (bounded) and returns the first line of its combined output.
func commandLine(argv ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	s := strings.TrimSpace(string(out))
	if l, _, ok := strings.Cut(s, "\n"); ok {
		s = l
	}
	if err != nil && s == "" {
		return "? (" + err.Error() + ")"
	}
	return s
}

func plain(header []string, rows [][]string) string {
	w := make([]int, len(header))
	for i, h := range header {
		w[i] = len(h)
	}
	for _, r := range rows {
		for i, c := range r {
			w[i] = max(w[i], len(c))
		}
	}
	var b strings.Builder
	line := func(cells []string) {
		for i, c := range cells {
			if i > 0 {
				b.WriteString("  ")
			}
			if i == len(cells)-1 {
				b.WriteString(c)
			} else {
				fmt.Fprintf(&b, "%-*s", w[i], c)
			}
		}
		b.WriteString("\n")
	}
	line(header)
	for _, r := range rows {
		line(r)
	}
	return b.String()
}

func markdown(header []string, rows [][]string) string {
	var b strings.Builder
	b.WriteString("| " + strings.Join(header, " | ") + " |\n|")
	for range header {
		b.WriteString(" --- |")
	}
	b.WriteString("\n")
	for _, r := range rows {
		cells := make([]string, len(r))
		for i, c := range r {
			cells[i] = strings.ReplaceAll(c, "|", "\\|")
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	return b.String()
}
