// Command harness runs sluice's side-by-side benchmark against its peers on one real Kafka
// broker: a consume-only ceiling, Kafka Streams, Apache Flink (STREAMING and BATCH) and sluice
// (backlog.mode never and auto). It prefills the "orders" workload of cmd/sluice/workload once,
// starts each contender alone from offset 0, measures wall time from process start until the
// contender has caught up (its group's committed offsets reach the end offsets, or the bounded
// job exits) and its peak RSS, verifies its final per-key totals exactly, and prints one table
// (also written as Markdown with machine info and versions). With -runs N every contender runs N
// times, interleaved round by round, and the table gives the median and range of each figure. A real-time phase then measures
// produce-to-visible latency at a steady rate for sluice and Kafka Streams.
//
// It is normally started by integration/peers/run.sh, which starts the broker and builds the
// contenders; see integration/peers/README.md. "harness ceiling ..." is the ceiling contender
// itself, run as a child process.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
)

// config is the harness's command line.
type config struct {
	brokers    string
	records    int64
	keys       int
	partitions int
	seed       int64
	smoke      bool
	topic      string
	reuse      bool
	only       string
	out        string
	workDir    string
	warmDir    string // the broker's data directory: the input read into the page cache before every run
	command    string
	timeout    time.Duration
	runs       int // catch-up runs of every contender, interleaved round by round

	workload   string        // "orders" (per-key totals), "windows" (tumbling windows, emit final) or "join"
	windowSpan time.Duration // windows: event time covered by the backlog
	windowSize time.Duration // windows: tumbling window size
	tableTopic string        // join: the customers table's topic
	rowsAfter  bool          // join: the customer rows timestamped after every order
	ksIdleMS   int64         // join: max.task.idle.ms of the kstreams-idle contender

	latency     bool
	latRate     int
	latDur      time.Duration
	latBacklog  int64
	latContends string
	latWarmup   time.Duration // a live load before the measured one, not counted
	latRuns     int           // rounds of the latency phase, interleaved
	sweepRates  []int         // -latency-sweep: the rates of the sweep, in order; none: no sweep
	sweepFloor  bool          // -latency-sweep: measure the floor at every rate too
	eosCopy     bool          // the latency phase measures the exactly-once copy too
	sweepLimit  time.Duration // -latency-sweep: a rate is sustained while p99 stays under it

	sluiceBin        string
	kstreamsDir      string
	flinkDir         string
	kafkaLib         string
	javaHeap         string
	javaHeapTuned    string
	kstreamsThreads  int
	flinkParallelism int
	enterLag         int64
	exitLag          int64
	latEnterLag      int64
	latExitLag       int64
	sortMemory       string
	commitInterval   time.Duration // sluice processing.commit_interval
	commitOnCatchUp  bool          // sluice processing.commit_on_catch_up
	variants         []variant     // -sluice-variants: extra sluice-auto contenders
	ksEmitInterval   int64
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "ceiling" {
		if err := runCeiling(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "harness:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ok, err := run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "harness:", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

func parseFlags(args []string) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("harness", flag.ContinueOnError)
	fs.StringVar(&c.brokers, "brokers", "", "bootstrap address of the Kafka broker (127.0.0.1 only)")
	fs.Int64Var(&c.records, "records", 1_000_000, "records in the backlog")
	fs.IntVar(&c.keys, "keys", 100_000, "distinct customer_id keys")
	fs.IntVar(&c.partitions, "partitions", 8, "partitions of the input and output topics")
	fs.Int64Var(&c.seed, "seed", 1, "workload seed")
	fs.StringVar(&c.workload, "workload", "orders", "orders (per-key totals), windows (tumbling windows per key, one final per key and window) "+
		"or join (the orders joined with a customers table written after them)")
	fs.DurationVar(&c.windowSpan, "window-span", 2*time.Hour, "windows: event time the backlog spans (ts grows with the record index)")
	fs.DurationVar(&c.windowSize, "window-size", time.Hour, "windows: tumbling window size (grace 0)")
	fs.StringVar(&c.tableTopic, "table-topic", "customers", "join: the customers table's topic (recreated and prefilled with -keys rows)")
	customersTS := fs.String("customers-ts", "start", "join: the customer rows' timestamp: start (the workload's start, at or before every order) "+
		"or after (after every order)")
	fs.Int64Var(&c.ksIdleMS, "kstreams-idle", 10_000, "join: max.task.idle.ms of the kstreams-idle contender")
	fs.BoolVar(&c.smoke, "smoke", false, "20k records, 1k keys, 5 s latency phase: every contender must start and agree")
	fs.StringVar(&c.topic, "topic", "orders", "input topic (recreated and prefilled unless -reuse-topic)")
	fs.BoolVar(&c.reuse, "reuse-topic", false, "reuse the input topic when it already holds exactly -records records")
	fs.StringVar(&c.only, "contenders", "", "comma-separated subset of contenders to run (default all)")
	fs.StringVar(&c.out, "out", "", "write the report as Markdown to this file")
	fs.StringVar(&c.workDir, "work", "", "directory for logs, configs and state (default a new temp dir)")
	fs.StringVar(&c.warmDir, "warm-dir", "", "the broker's data directory: before every catch-up run, the input topics' log segments are read "+
		"into the page cache (and dirty pages written out), so that no contender reads its input from disk because the one before it "+
		"(a JVM with a large heap) pushed it out")
	fs.StringVar(&c.command, "command", "", "the command line to print in the report")
	fs.DurationVar(&c.timeout, "timeout", 0, "per-contender limit (default 90s + records/2000 s; smoke 1m)")
	fs.IntVar(&c.runs, "runs", 1, "catch-up runs of every contender, interleaved (A B C, A B C, ...); the report gives the median and range")
	fs.BoolVar(&c.latency, "latency", true, "run the real-time latency phase")
	fs.IntVar(&c.latRate, "latency-rate", 20_000, "live records per second in the latency phase")
	fs.DurationVar(&c.latDur, "latency-duration", 30*time.Second, "length of the latency phase")
	fs.Int64Var(&c.latBacklog, "latency-backlog", -1, "records caught up before the latency phase (default min(records, 200k))")
	fs.IntVar(&c.latRuns, "latency-runs", 1, "rounds of the latency phase (floor and every latency contender, interleaved); the table gives medians")
	sweep := fs.String("latency-sweep", "", "comma-separated rates (records/s): instead of the catch-up table, run the latency phase of the "+
		"latency contenders (default sluice-auto) at each rate in turn and report which rates are sustained (p99 under -latency-sweep-limit, "+
		"every record seen, the rate reached); stops after two rates in a row that no contender sustains")
	fs.BoolVar(&c.sweepFloor, "latency-sweep-floor", true, "-latency-sweep: measure the no-processing floor at every rate too")
	fs.BoolVar(&c.eosCopy, "latency-eos-copy", true, "latency phase: measure the exactly-once copy too, after the floor in each round: the live load "+
		"copied unprocessed by a transactional pass-through (a consumer group whose transactions commit every -sluice-commit-interval) and read back")
	fs.DurationVar(&c.sweepLimit, "latency-sweep-limit", time.Second, "-latency-sweep: the p99 a sustained rate stays under")
	fs.DurationVar(&c.commitInterval, "sluice-commit-interval", 100*time.Millisecond, "sluice processing.commit_interval")
	fs.BoolVar(&c.commitOnCatchUp, "sluice-commit-on-catch-up", false, "sluice processing.commit_on_catch_up")
	variants := fs.String("sluice-variants", "", "comma-separated commit settings, each an extra sluice-auto contender (in the catch-up runs and the "+
		"latency phase): a commit_interval, +catchup for commit_on_catch_up, never: before it for backlog.mode never "+
		"(e.g. 10ms,10ms+catchup,never:100ms); without -contenders only these run")
	fs.DurationVar(&c.latWarmup, "latency-warmup", 10*time.Second, "latency phase: live load at the same rate before the measured one, not counted (smoke 2s; 0: none)")
	fs.StringVar(&c.sluiceBin, "sluice", "bin/sluice", "sluice binary")
	fs.StringVar(&c.kstreamsDir, "kstreams-dir", "integration/peers/kstreams", "built Kafka Streams app (target/classes, target/lib)")
	fs.StringVar(&c.flinkDir, "flink-dir", "integration/peers/flink", "built Flink app (target/classes, target/lib, jvm.args)")
	fs.StringVar(&c.kafkaLib, "kafka-lib", "integration/kafka/lib", "the broker's classpath folder, for its version")
	fs.StringVar(&c.javaHeap, "java-heap", "2g", "-Xmx of the Java contenders")
	fs.StringVar(&c.javaHeapTuned, "java-heap-tuned", "4g", "-Xmx of the tuned Java contenders (kstreams-tuned, flink-batch-tuned)")
	fs.IntVar(&c.kstreamsThreads, "kstreams-threads", 2, "num.stream.threads")
	fs.IntVar(&c.flinkParallelism, "flink-parallelism", 2, "Flink parallelism")
	fs.Int64Var(&c.enterLag, "sluice-enter-lag", -1, "sluice backlog.enter_lag (default 50000; smoke 1000)")
	fs.Int64Var(&c.exitLag, "sluice-exit-lag", -1, "sluice backlog.exit_lag (default 500; smoke 100)")
	fs.Int64Var(&c.latEnterLag, "sluice-latency-enter-lag", 50_000, "sluice backlog.enter_lag in the latency phase")
	fs.Int64Var(&c.latExitLag, "sluice-latency-exit-lag", 500, "sluice backlog.exit_lag in the latency phase")
	fs.StringVar(&c.sortMemory, "sluice-sort-memory", "256MiB", "sluice backlog.sort_memory")
	fs.Int64Var(&c.ksEmitInterval, "kstreams-emit-interval", 0,
		"windows: Kafka Streams' internal __emit.interval.ms.kstreams.windowed.aggregation__ (-1: its default, 1000 ms of wall time between emit checks)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if c.smoke {
		if !set["records"] {
			c.records = 20_000
		}
		if !set["keys"] {
			c.keys = 1_000
		}
		if !set["latency-duration"] {
			c.latDur = 5 * time.Second
		}
		if !set["timeout"] {
			c.timeout = time.Minute
		}
		if !set["latency-warmup"] {
			c.latWarmup = 2 * time.Second
		}
		if c.enterLag < 0 {
			c.enterLag = 1000
		}
		if c.exitLag < 0 {
			c.exitLag = 100
		}
	}
	if c.enterLag < 0 {
		c.enterLag = 50_000
	}
	if c.exitLag < 0 {
		c.exitLag = 500
	}
	if c.workload == "windows" || c.workload == "join" {
		if set["latency"] && c.latency {
			return nil, errors.New("-latency: the real-time latency phase needs -workload orders")
		}
		c.latency = false
	}
	if *sweep != "" {
		for _, f := range strings.Split(*sweep, ",") {
			r, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || r <= 0 {
				return nil, fmt.Errorf("-latency-sweep %q: want positive records/s", f)
			}
			c.sweepRates = append(c.sweepRates, r)
		}
	}
	if *variants != "" {
		var err error
		if c.variants, err = parseVariants(*variants); err != nil {
			return nil, fmt.Errorf("-sluice-variants: %w", err)
		}
	}
	switch *customersTS {
	case "start":
	case "after":
		c.rowsAfter = true
	default:
		return nil, fmt.Errorf("-customers-ts %q: want start or after", *customersTS)
	}
	if c.latBacklog < 0 {
		c.latBacklog = min(c.records, 200_000)
	}
	if c.timeout == 0 {
		c.timeout = 90*time.Second + time.Duration(c.records/2000)*time.Second
	}
	switch {
	case c.brokers == "":
		return nil, errors.New("-brokers is required (run.sh starts a broker)")
	case c.records <= 0 || c.keys <= 0 || c.partitions <= 0:
		return nil, errors.New("-records, -keys and -partitions must be positive")
	case c.latRate <= 0 || c.latDur <= 0:
		return nil, errors.New("-latency-rate and -latency-duration must be positive")
	case c.latWarmup < 0:
		return nil, errors.New("-latency-warmup must not be negative")
	case c.runs < 1 || c.latRuns < 1:
		return nil, errors.New("-runs and -latency-runs must be at least 1")
	case len(c.sweepRates) > 0 && c.workload != "orders":
		return nil, errors.New("-latency-sweep needs -workload orders")
	case c.commitInterval < time.Millisecond || c.commitInterval%time.Millisecond != 0:
		return nil, errors.New("-sluice-commit-interval must be a positive whole number of milliseconds")
	case c.workload != "orders" && c.workload != "windows" && c.workload != "join":
		return nil, fmt.Errorf("-workload %q: want orders, windows or join", c.workload)
	case c.workload == "join" && (c.tableTopic == "" || c.tableTopic == c.topic):
		return nil, errors.New("-table-topic must name a topic other than -topic")
	case c.windowSize < time.Millisecond || c.windowSize%time.Millisecond != 0 || c.windowSpan <= 0 || c.windowSpan%time.Millisecond != 0:
		return nil, errors.New("-window-size and -window-span must be positive whole milliseconds")
	}
	for _, f := range []struct{ name, v string }{{"java-heap", c.javaHeap}, {"java-heap-tuned", c.javaHeapTuned}} {
		if _, err := javaBytes(f.v); err != nil {
			return nil, fmt.Errorf("-%s: %w", f.name, err)
		}
	}
	for _, b := range strings.Split(c.brokers, ",") {
		if !strings.HasPrefix(b, "127.0.0.1:") && !strings.HasPrefix(b, "localhost:") {
			return nil, fmt.Errorf("-brokers %q: only 127.0.0.1 is allowed", b)
		}
	}
	for _, p := range []*string{&c.sluiceBin, &c.kstreamsDir, &c.flinkDir, &c.kafkaLib} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return nil, err
		}
		*p = abs
	}
	return c, nil
}

// harness holds one benchmark run. Not safe for concurrent use.
type harness struct {
	cfg      *config
	runID    string
	seeds    []string
	cl       *kgo.Client
	adm      *kadm.Client
	spec     workload.Spec
	want     map[string]workload.Total // orders: the per-key totals
	win      windowed                  // windows: the workload
	wantWin  map[window]workload.Total // windows: the finals
	join     joined                    // join: the workload
	joinCust []int32                   // join: the customer of every order (order i+1 at i)
	floor    *latencyStats             // the broker's own produce-to-consume latency at the live rate
	floorErr string
	// eosCopy is the exactly-once copy's (passThrough), when measured.
	eosCopy    *latencyStats
	eosCopyErr string
	// latRuns is every latency run (floor included) in the order they ran; sweep the sweep's.
	latRuns     []latencyRun
	sweep       []latencyRun
	seriesFiles []string // the per-second series written (CSV, PNG)
}

// result is one contender's catch-up measurement.
type result struct {
	name    string
	setup   string
	records int64
	seconds float64
	peakKiB int64
	cpu     float64  // the contender's user+system CPU seconds when it had caught up
	netJob  float64  // Flink: the job's net runtime in seconds (JobExecutionResult.getNetRuntime); 0 if none
	round   int      // the round of this run (1-based)
	status  string   // "ok", or why the row is not timed
	detail  []string // mismatches or log tail
	lat     *latencyStats
	latErr  string
	join    *joinCounts // join: what the outputs held
	// runs is every run of the contender in round order when -runs > 1; the fields above are
	// then the aggregate (see aggregate).
	runs []*result
}

func (r *result) ok() bool { return r.status == "ok" }

// timed reports whether the row has a catch-up time: it is ok, or a join that ran to the end
// and only missed orders.
func (r *result) timed() bool { return r.ok() || r.status == statusMissed }

// passed reports whether the row lets the run succeed: a peer that missed joins is the
// measurement, not a failure; sluice must join every order.
func (r *result) passed() bool {
	return r.ok() || (r.status == statusMissed && !strings.HasPrefix(r.name, "sluice"))
}

func (r *result) rate() float64 {
	if !r.timed() || r.seconds <= 0 {
		return 0
	}
	return float64(r.records) / r.seconds
}

func run(ctx context.Context, cfg *config) (bool, error) {
	if cfg.workDir == "" {
		d, err := os.MkdirTemp("", "sluice-peers-")
		if err != nil {
			return false, err
		}
		cfg.workDir = d
	}
	if err := os.MkdirAll(cfg.workDir, 0o755); err != nil {
		return false, err
	}
	h := &harness{
		cfg:   cfg,
		runID: time.Now().UTC().Format("20060102t150405"),
		seeds: strings.Split(cfg.brokers, ","),
		spec: workload.Spec{
			Records: cfg.records, Keys: cfg.keys, Partitions: int32(cfg.partitions), Seed: cfg.seed,
		},
	}
	h.win = windowed{spec: h.spec, span: cfg.windowSpan, size: cfg.windowSize}
	h.join = joined{spec: h.spec, rowsAfter: cfg.rowsAfter}
	cl, err := kgo.NewClient(append(workload.ProducerOpts(), kgo.SeedBrokers(h.seeds...))...)
	if err != nil {
		return false, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	h.cl, h.adm = cl, kadm.NewClient(cl)

	var selected []contender
	all := h.contenders()
	switch {
	case cfg.only == "" && len(cfg.variants) > 0:
		selected = all[len(all)-len(cfg.variants):]
	case cfg.only == "" && len(cfg.sweepRates) > 0:
		selected = slices.DeleteFunc(all, func(c contender) bool { return c.name != "sluice-auto" })
	case cfg.only == "":
		selected = all
	default:
		for _, name := range strings.Split(cfg.only, ",") {
			found := false
			for _, c := range all {
				if c.name == name {
					selected = append(selected, c)
					found = true
				}
			}
			if !found {
				return false, fmt.Errorf("-contenders: unknown %q", name)
			}
		}
	}

	logf("work dir %s; run id %s; load average %s", cfg.workDir, h.runID, loadavg())
	if len(cfg.sweepRates) > 0 {
		return h.runSweep(ctx, selected)
	}
	t0 := time.Now()
	if err := h.prefill(ctx); err != nil {
		return false, err
	}
	logf("prefilled %s with %d records over %d keys in %.1fs", cfg.topic, h.inputRecords(), cfg.keys, time.Since(t0).Seconds())
	switch cfg.workload {
	case "join":
		if h.joinCust, err = h.join.customers(); err != nil {
			return false, err
		}
		logf("join: %d customer rows in %s (timestamp %d), written after the %d orders of %s",
			cfg.keys, cfg.tableTopic, h.join.rowsTS(), cfg.records, cfg.topic)
	case "windows":
		if h.wantWin, err = h.win.expected(); err != nil {
			return false, err
		}
		logf("windows: event time %s over the backlog, %s tumbling windows, closing records at ts %d; %d finals expected",
			yamlDuration(cfg.windowSpan), yamlDuration(cfg.windowSize), h.win.closeTS(), len(h.wantWin))
	default:
		h.want = h.spec.Expected()
	}

	runs := make([][]*result, len(selected))
	for round := 1; round <= cfg.runs; round++ {
		for i, c := range selected {
			if ctx.Err() != nil {
				return false, ctx.Err()
			}
			label := c.name
			if cfg.runs > 1 {
				label = fmt.Sprintf("%s #%d/%d", c.name, round, cfg.runs)
			}
			logf("%-18s starting (load average %s)", label, loadavg())
			r := h.catchUp(ctx, c, round)
			logf("%-18s %s", label, r.summary())
			runs[i] = append(runs[i], r)
		}
	}
	results := make([]*result, len(selected))
	for i, rs := range runs {
		results[i] = aggregate(rs)
		if cfg.runs > 1 {
			logf("%-18s %d runs: %s", selected[i].name, cfg.runs, results[i].summary())
		}
	}
	if cfg.latency {
		h.realTime(ctx, selected, results)
	}
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	rep := h.report(results)
	fmt.Println(rep.table)
	if err := writeReport(cfg.out, rep.markdown); err != nil {
		return false, err
	}
	allOK := true
	for _, r := range results {
		if !r.passed() || (cfg.latency && r.latErr != "") {
			allOK = false
		}
	}
	return allOK, nil
}

// inputRecords is the number of records in the input topic: the orders, plus the closing
// records of the windows workload.
func (h *harness) inputRecords() int64 {
	if h.cfg.workload == "windows" {
		return h.cfg.records + int64(h.cfg.partitions)
	}
	return h.cfg.records
}

// prefill creates the input topic and writes the workload once.
func (h *harness) prefill(ctx context.Context) error {
	c := h.cfg
	want := h.inputRecords()
	join := c.workload == "join"
	if c.reuse {
		holds := func(topic string, n int64) bool {
			end, err := endOffsets(ctx, h.adm, topic)
			return err == nil && end.total() == n && len(end) == c.partitions
		}
		if holds(c.topic, want) && (!join || holds(c.tableTopic, int64(c.keys))) {
			logf("reusing %s (%d records)", c.topic, want)
			return nil
		}
	}
	if err := recreateTopic(ctx, h.adm, c.topic, int32(c.partitions)); err != nil {
		return err
	}
	if join {
		if err := recreateTopic(ctx, h.adm, c.tableTopic, int32(c.partitions)); err != nil {
			return err
		}
	}
	var err error
	switch c.workload {
	case "windows":
		err = h.win.produce(ctx, h.cl, c.topic)
	case "join":
		err = h.join.produce(ctx, h.cl, c.topic, c.tableTopic)
	default:
		err = workload.Produce(ctx, h.cl, c.topic, h.spec)
	}
	if err != nil {
		return fmt.Errorf("prefilling %s: %w", c.topic, err)
	}
	end, err := endOffsets(ctx, h.adm, c.topic)
	if err != nil {
		return err
	}
	if end.total() != want {
		return fmt.Errorf("prefilling %s: end offsets sum to %d, want %d", c.topic, end.total(), want)
	}
	if join {
		end, err := endOffsets(ctx, h.adm, c.tableTopic)
		if err != nil {
			return err
		}
		if end.total() != int64(c.keys) {
			return fmt.Errorf("prefilling %s: end offsets sum to %d, want %d", c.tableTopic, end.total(), c.keys)
		}
	}
	return nil
}

// settle writes the page cache's dirty pages out and, with -warm-dir, reads the input topics' log
// segments into it, before a run starts its clock: no run pays for the writes of the one before
// it, nor reads its input from disk because the one before it (Flink or Kafka Streams with a
// heap of gigabytes) pushed it out of memory (integration/peers/nexmark.sh does the same: a
// sluice run of Nexmark q4 right after Flink's took 20.3 s, 15.5-17 s on its own).
func (h *harness) settle() {
	syscall.Sync()
	if h.cfg.warmDir == "" {
		return
	}
	topics := []string{h.cfg.topic}
	if h.cfg.workload == "join" {
		topics = append(topics, h.cfg.tableTopic)
	}
	var read int64
	defer func() { logf("settle: read %d MiB of %v's log segments", read>>20, topics) }()
	dirs, err := os.ReadDir(h.cfg.warmDir)
	if err != nil {
		logf("settle: %v", err)
		return
	}
	buf := make([]byte, 1<<20)
	for _, d := range dirs {
		name := d.Name()
		i := strings.LastIndexByte(name, '-')
		if _, err := strconv.Atoi(name[i+1:]); !d.IsDir() || i < 0 || err != nil || !slices.Contains(topics, name[:i]) {
			continue // not a partition of an input topic (topic-N)
		}
		segs, _ := os.ReadDir(filepath.Join(h.cfg.warmDir, name))
		for _, seg := range segs {
			if !strings.HasSuffix(seg.Name(), ".log") {
				continue
			}
			if f, err := os.Open(filepath.Join(h.cfg.warmDir, name, seg.Name())); err == nil {
				n, _ := io.CopyBuffer(io.Discard, struct{ io.Reader }{f}, buf)
				read += n
				_ = f.Close()
			}
		}
	}
}

// catchUp runs one contender over the prefilled topic and measures it: the run of round
// (1-based), with an output topic, group and state of its own.
func (h *harness) catchUp(ctx context.Context, c contender, round int) *result {
	r := &result{name: c.name, setup: c.setup, records: h.inputRecords(), round: round}
	name := c.name
	if h.cfg.runs > 1 {
		name += "-r" + strconv.Itoa(round)
	}
	group := "peers-" + h.runID + "-" + name
	l := launch{
		in: h.cfg.topic, table: h.cfg.tableTopic, out: group + "-out", group: group, dir: filepath.Join(h.cfg.workDir, name),
		enterLag: h.cfg.enterLag, exitLag: h.cfg.exitLag,
	}
	end, err := endOffsets(ctx, h.adm, l.in)
	if err != nil {
		r.status = "failed: " + err.Error()
		return r
	}
	h.settle()
	p, logPath, err := h.start(ctx, c, l)
	if err != nil {
		r.status = "failed: " + err.Error()
		return r
	}
	defer p.stop(30 * time.Second)
	elapsed, err := h.waitCaughtUp(ctx, c, p, l, end)
	r.peakKiB = p.peakKiB.Load()
	r.cpu = p.cpuSeconds()
	if err != nil {
		r.status = "failed: " + err.Error()
		if p.done() {
			if l := lastLine(logPath); l != "" {
				r.status += ": " + l
			}
		}
		r.detail = []string{tail(logPath, 1500)}
		return r
	}
	r.seconds = elapsed.Seconds()
	if c.done == doneExit {
		r.netJob = netJobSeconds(logPath)
	}
	if c.name == "ceiling" {
		r.status = "ok"
		return r
	}
	var diff []string
	switch h.cfg.workload {
	case "join":
		var check *joinCheck
		var grown time.Time
		check, grown, err = h.verifyJoin(ctx, l.out)
		if err == nil {
			k := check.counts()
			r.join = &k
			// The outputs of a contender that commits its input offsets before writing them
			// become visible later: it has caught up when the output count stopped growing.
			if c.done == doneGroup && grown.Sub(p.start) > elapsed {
				logf("%-18s caught up at %.2fs, outputs stopped growing at %.2fs", c.name, elapsed.Seconds(), grown.Sub(p.start).Seconds())
				r.seconds = grown.Sub(p.start).Seconds()
				r.cpu = p.cpuSeconds() // since then it only verified: idle
			}
			p.stop(30 * time.Second)
			r.peakKiB = p.peakKiB.Load()
			r.status = joinStatus(k)
			r.detail = check.diff(10)
			return r
		}
	case "windows":
		var visible time.Time
		diff, visible, err = h.verifyFinals(ctx, l.out)
		// The finals of a contender that commits its input offsets before writing them become
		// visible later: it has caught up when the read that saw them all began.
		if err == nil && len(diff) == 0 && c.done == doneGroup && visible.Sub(p.start) > elapsed {
			logf("%-18s caught up at %.2fs, every final visible at %.2fs", c.name, elapsed.Seconds(), visible.Sub(p.start).Seconds())
			r.seconds = visible.Sub(p.start).Seconds()
		}
	default:
		diff, err = h.verify(ctx, l.out, h.want)
	}
	p.stop(30 * time.Second)
	r.peakKiB = p.peakKiB.Load()
	switch {
	case err != nil:
		r.status = "failed: verifying: " + err.Error()
	case len(diff) > 0:
		r.status = "DISAGREES"
		r.detail = diff
	default:
		r.status = "ok"
	}
	return r
}

// start creates the output topic and starts the contender.
func (h *harness) start(ctx context.Context, c contender, l launch) (*proc, string, error) {
	if err := os.MkdirAll(l.dir, 0o755); err != nil {
		return nil, "", err
	}
	if err := createTopic(ctx, h.adm, l.out, int32(h.cfg.partitions), false); err != nil {
		return nil, "", err
	}
	argv, env, err := c.argv(l)
	if err != nil {
		return nil, "", err
	}
	logPath := filepath.Join(l.dir, "output.log")
	p, err := startProc(argv, env, l.dir, logPath)
	if err != nil {
		return nil, "", err
	}
	return p, logPath, nil
}

// waitCaughtUp waits until the contender has caught up with end, per its done rule, and
// returns the time from process start.
func (h *harness) waitCaughtUp(ctx context.Context, c contender, p *proc, l launch, end offsets) (time.Duration, error) {
	deadline := time.NewTimer(h.cfg.timeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var committed int64
	for {
		switch c.done {
		case doneExit:
			if p.done() {
				if err := p.exitError(); err != nil {
					return 0, err
				}
				return p.exitAt.Sub(p.start), nil
			}
		case doneGroup:
			if p.done() {
				return 0, fmt.Errorf("exited before catching up (%d of %d committed): %v", committed, end.total(), p.exitError())
			}
			qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			ok, n, err := groupCaughtUp(qctx, h.adm, l.group, l.in, end)
			cancel()
			now := time.Now()
			if err == nil {
				committed = n
				if ok {
					return now.Sub(p.start), nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-deadline.C:
			return 0, fmt.Errorf("not caught up after %s (%d of %d committed)", h.cfg.timeout, committed, end.total())
		case <-tick.C:
		}
	}
}

// verify reads the output topic's final totals and compares them with want, retrying for a
// few seconds while they differ.
func (h *harness) verify(ctx context.Context, topic string, want map[string]workload.Total) ([]string, error) {
	deadline := time.Now().Add(15 * time.Second)
	for {
		got, err := workload.ReadTotals(ctx, h.seeds, topic, "amount", "orders")
		if err != nil {
			return nil, err
		}
		diff := workload.Diff(want, got, 5)
		if len(diff) == 0 || time.Now().After(deadline) {
			return diff, nil
		}
		if err := pause(ctx, time.Second); err != nil {
			return nil, err
		}
	}
}

// verifyFinals reads the windowed finals of topic and compares them with the expected ones,
// retrying for a few seconds while some finals are only missing. visible is when the read that
// found no difference began (the zero time if none did): a time at which every final was visible.
func (h *harness) verifyFinals(ctx context.Context, topic string) (diff []string, visible time.Time, err error) {
	deadline := time.Now().Add(15 * time.Second)
	first := true
	for {
		began := time.Now()
		f, err := readFinals(ctx, h.seeds, topic, h.win, h.wantWin)
		if err != nil {
			return nil, time.Time{}, err
		}
		diff, onlyMissing := f.diff(8)
		if len(diff) == 0 {
			if first {
				// Every final was visible before this read's first request: at the latest when
				// the contender was seen caught up.
				return nil, time.Time{}, nil
			}
			return nil, began, nil
		}
		if !onlyMissing || time.Now().After(deadline) {
			return diff, time.Time{}, nil
		}
		first = false
		if err := pause(ctx, time.Second); err != nil {
			return nil, time.Time{}, err
		}
	}
}

func (r *result) summary() string {
	if r.runs != nil {
		f := r.figures()
		s := fmt.Sprintf("%d of %d runs ok; median %ss (%s)  %s rec/s (%s)  cpu %ss (%s)",
			f.agreed, len(r.runs), f.seconds.format(2), f.seconds.formatRange(2), f.rate.format(0), f.rate.formatRange(0),
			f.cpu.format(1), f.cpu.formatRange(1))
		if f.netJob.n > 0 {
			s += fmt.Sprintf("  net job %ss (%s)", f.netJob.format(2), f.netJob.formatRange(2))
		}
		if !r.ok() {
			s += "; " + r.statusCell()
		}
		return s
	}
	if r.join != nil {
		s := fmt.Sprintf("%s: %s", r.status, r.join)
		if r.timed() {
			s += fmt.Sprintf("; %.2fs, cpu %.1fs, peak RSS %s", r.seconds, r.cpu, mib(r.peakKiB))
		}
		if !r.ok() && len(r.detail) > 1 {
			s += "\n    " + strings.Join(r.detail[1:], "\n    ")
		}
		return s
	}
	if !r.ok() {
		s := r.status
		if len(r.detail) > 0 {
			s += "\n    " + strings.ReplaceAll(strings.Join(r.detail, "\n"), "\n", "\n    ")
		}
		return s
	}
	s := fmt.Sprintf("%.2fs  %.0f rec/s  cpu %.1fs  peak RSS %s", r.seconds, r.rate(), r.cpu, mib(r.peakKiB))
	if r.netJob > 0 {
		s += fmt.Sprintf("  net job %.2fs", r.netJob)
	}
	return s
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "harness: "+format+"\n", args...)
}

// writeReport writes the report's markdown to out (nothing when out is empty) and says where.
func writeReport(out, markdown string) error {
	if out == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(out, []byte(markdown), 0o644); err != nil {
		return fmt.Errorf("writing report: %w", err)
	}
	logf("report written to %s", out)
	return nil
}
