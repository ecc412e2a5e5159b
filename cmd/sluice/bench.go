package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/cmd/sluice/procstat"
	"github.com/sluice-dev/sluice/cmd/sluice/workload"
	"github.com/sluice-dev/sluice/configs"
)

// benchBinaryEnv names the sluice binary bench runs as its children. Unset, bench runs itself
// (os.Executable); tests set it, since their executable is the test binary.
const benchBinaryEnv = "SLUICE_BENCH_BINARY"

// benchOpts are bench's flags.
type benchOpts struct {
	workload       string
	window         time.Duration
	rollup         time.Duration
	span           time.Duration
	records        int64
	keys           int
	partitions     int
	sortMemory     configs.Size
	cache          int
	enterLag       int64
	brokers        string
	keep           bool
	only           string
	commitInterval time.Duration
	timeout        time.Duration
	stall          time.Duration
	changelog      string    // --workload orders: the aggregate's changelog (topic or output)
	instances      int       // child processes per run, one group
	pprof          bool      // serve /debug/pprof/ on each child's HTTP port
	stderr         io.Writer // where a child's pprof address is printed
}

// benchRun is the measurement of one child run.
type benchRun struct {
	mode    string
	seconds float64
	rssKiB  int64
	cpu     float64 // the child's user+system seconds
	broker  float64 // this process's user+system seconds during the run: the embedded broker's
	sink    string
	log     string
}

// benchWorkload is what differs between bench's workloads (--workload): the pipeline the
// children run, the backlog they catch up on, and how a run's results are read and checked.
// Results are keyed as workload.Diff compares them: by customer, by customer and window, or by
// customer and side (cogroup); the join has none (its read checks every order itself).
type benchWorkload struct {
	// header is appended to bench's first line.
	header string
	// streams are the roles of the input topics a run must consume to their end (the run is
	// done when the group has committed their end offsets); tables those it reads as tables,
	// whose offsets are not waited for. benchTopics names their topics.
	streams, tables []string
	// records is the number of stream records the runs process: the rate's numerator.
	records int64
	// operator is the stateful operator whose changelog topic ("<group>-<operator>-changelog")
	// a run writes, or "" for a stateless chain.
	operator string
	// results names an operator whose results a later one reads through its output topic
	// ("<group>-<results>-output", with its own changelog): a run is done once the group has
	// also consumed that topic to its end. "" for a pipeline of one stage.
	results string
	// pipeline returns the tables, sources, operators and sinks of a child's config, given the
	// topic of each role.
	pipeline func(topics map[string]string, sink string) string
	// prefill produces the backlog (every table and stream, in the order the workload wants
	// them in the log) and returns how many records it wrote to each role's topic.
	prefill func(ctx context.Context, cl *kgo.Client, topics map[string]string) (map[string]int64, error)
	// want computes the results every run must produce; nil when read checks them itself.
	want func() map[string]workload.Total
	// read reads a run's results from sink. problems are what is wrong besides the values (a
	// (key, window) with more than one final, an order not joined); extra is appended to the
	// run's line.
	read func(ctx context.Context, brokers []string, sink string) (got map[string]workload.Total, extra string, problems []string, err error)
}

// Bench workloads.
const (
	benchOrders  = "orders"
	benchWindows = "windows"
	benchJoin    = "join"
	benchCogroup = "cogroup"
	benchRollup  = "rollup"
)

// Roles of bench's input topics; each role's topic is named after it (benchTopics).
const (
	roleOrders    = "orders"
	roleCustomers = workload.JoinTable
	roleRefunds   = "refunds"
)

// benchDefaults are --records and --keys of the join workload when they are not given: its full
// size (10M orders joined with 1M customers), not the aggregate's 2M over 100k keys.
const (
	benchJoinRecords = 10_000_000
	benchJoinKeys    = 1_000_000
)

// newBenchWorkload returns the workload o asks for. All generate the orders of the same spec.
//
// orders: the aggregate per customer, verified against the exact totals.
//
// windows: the aggregate per customer and tumbling window of o.window (grace 0, emit: final,
// watermark max_delay 0), over orders whose event times spread evenly and without jitter over
// o.span, so no order is late. After the orders, one record per partition with an event time at
// the end of the last window closes every window of the backlog (its own window stays open and
// its key is no customer's); each run must then have written exactly one final per (customer,
// window), equal to the totals computed from the generator.
//
// join: the orders joined (inner, as_of processing) with the customers table, one row per
// customer (o.keys rows) produced after every order; both are in the log before a run starts,
// and each run must write every order exactly once with its customer's row
// (workload.VerifyJoined). The chain is stateless: backlog mode has nothing to fold, so never
// and auto should take about the same time.
//
// rollup: windows over windows, the windows workload's totals per customer and window of
// o.window rolled up into windows of o.rollup (workload.RollupPipeline), closed the same way
// (the closers' event time is the end of the last rollup window); each run must write one final
// per (customer, rollup window), equal to the totals computed from the generator.
//
// cogroup: orders and refunds (two specs of o.records records over the same customers and
// partitions, seeds 1 and 2) co-grouped per customer into a balance: the sum and count of each
// input, equal to each spec's exact totals.
func newBenchWorkload(o benchOpts) benchWorkload {
	spec := workload.Spec{Records: o.records, Keys: o.keys, Partitions: int32(o.partitions), Seed: 1}
	switch o.workload {
	case benchOrders:
		return benchWorkload{
			streams:  []string{roleOrders},
			records:  spec.Records,
			operator: workload.PipelineOperator,
			pipeline: func(t map[string]string, sink string) string {
				return workload.PipelineChangelog(t[roleOrders], sink, o.changelog)
			},
			prefill: func(ctx context.Context, cl *kgo.Client, t map[string]string) (map[string]int64, error) {
				return map[string]int64{roleOrders: spec.Records}, workload.Produce(ctx, cl, t[roleOrders], spec)
			},
			want: spec.Expected,
			read: func(ctx context.Context, brokers []string, sink string) (map[string]workload.Total, string, []string, error) {
				g, err := workload.ReadTotals(ctx, brokers, sink, "amount", "orders")
				return g, "", nil, err
			},
		}
	case benchJoin:
		return benchWorkload{
			header:  fmt.Sprintf(" workload=join table_rows=%d", o.keys),
			streams: []string{roleOrders},
			tables:  []string{roleCustomers},
			records: spec.Records,
			pipeline: func(t map[string]string, sink string) string {
				return workload.JoinPipeline(t[roleOrders], t[roleCustomers], sink)
			},
			prefill: func(ctx context.Context, cl *kgo.Client, t map[string]string) (map[string]int64, error) {
				// Every order is acknowledged before the first row is produced: each row comes
				// after every order in the log, as in the peers' join workload.
				if err := workload.Produce(ctx, cl, t[roleOrders], spec); err != nil {
					return nil, err
				}
				n := map[string]int64{roleOrders: spec.Records, roleCustomers: int64(spec.Keys)}
				return n, workload.ProduceEach(ctx, cl, t[roleCustomers], spec.EachCustomer)
			},
			read: func(ctx context.Context, brokers []string, sink string) (map[string]workload.Total, string, []string, error) {
				j, err := workload.VerifyJoined(ctx, brokers, sink, workload.JoinTable, spec)
				var problems []string
				if err == nil && !j.OK() {
					problems = []string{j.String()}
				}
				return nil, fmt.Sprintf(" joined=%d", j.Orders-j.WrongRow), problems, err
			},
		}
	case benchCogroup:
		refunds := spec
		refunds.Seed = 2
		return benchWorkload{
			header:   fmt.Sprintf(" workload=cogroup refunds=%d", refunds.Records),
			streams:  []string{roleOrders, roleRefunds},
			records:  spec.Records + refunds.Records,
			operator: workload.CogroupOperator,
			pipeline: func(t map[string]string, sink string) string {
				return workload.CogroupPipeline(t[roleOrders], t[roleRefunds], sink)
			},
			prefill: func(ctx context.Context, cl *kgo.Client, t map[string]string) (map[string]int64, error) {
				if err := workload.Produce(ctx, cl, t[roleOrders], spec); err != nil {
					return nil, err
				}
				n := map[string]int64{roleOrders: spec.Records, roleRefunds: refunds.Records}
				return n, workload.Produce(ctx, cl, t[roleRefunds], refunds)
			},
			want: func() map[string]workload.Total { return workload.ExpectedCogroup(spec, refunds) },
			read: func(ctx context.Context, brokers []string, sink string) (map[string]workload.Total, string, []string, error) {
				g, customers, err := workload.ReadCogroup(ctx, brokers, sink)
				return g, fmt.Sprintf(" customers=%d", customers), nil, err
			},
		}
	}
	spec.Span = o.span
	closing, header, results := o.window, fmt.Sprintf(" workload=%s window=%v span=%v", o.workload, o.window, o.span), ""
	pipeline := func(t map[string]string, sink string) string {
		return workload.WindowedPipeline(t[roleOrders], sink, o.window)
	}
	if o.workload == benchRollup {
		closing, results = o.rollup, workload.RollupOperator
		header = fmt.Sprintf(" workload=rollup window=%v rollup=%v span=%v", o.window, o.rollup, o.span)
		pipeline = func(t map[string]string, sink string) string {
			return workload.RollupPipeline(t[roleOrders], sink, o.window, o.rollup)
		}
	}
	return benchWorkload{
		header:   header,
		streams:  []string{roleOrders},
		records:  spec.Records,
		operator: workload.PipelineOperator,
		results:  results,
		pipeline: pipeline,
		prefill: func(ctx context.Context, cl *kgo.Client, t map[string]string) (map[string]int64, error) {
			if err := workload.Produce(ctx, cl, t[roleOrders], spec); err != nil {
				return nil, err
			}
			size := closing.Milliseconds()
			closeAt := workload.WindowStart(spec.MaxTS(), size) + size // the last window's end + grace 0
			n := map[string]int64{roleOrders: spec.Records + int64(spec.Partitions)}
			return n, workload.ProduceClosers(ctx, cl, t[roleOrders], spec, closeAt)
		},
		want: func() map[string]workload.Total { return spec.ExpectedWindows(closing) },
		read: func(ctx context.Context, brokers []string, sink string) (map[string]workload.Total, string, []string, error) {
			g, problems, err := workload.ReadWindows(ctx, brokers, sink, "amount", "orders", closing)
			return g, fmt.Sprintf(" windows=%d", len(g)), problems, err
		},
	}
}

// roles returns every input role of w: its tables, then its streams.
func (w benchWorkload) roles() []string {
	return append(append([]string(nil), w.tables...), w.streams...)
}

// benchTopics names the topic of each of w's roles: the role itself on the embedded broker,
// "<prefix>-<role>" on a real cluster.
func benchTopics(w benchWorkload, prefix string, embedded bool) map[string]string {
	t := map[string]string{}
	for _, r := range w.roles() {
		t[r] = r
		if !embedded {
			t[r] = prefix + "-" + r
		}
	}
	return t
}

// cmdBench prefills a backlog, reads its input topics once without processing (the ceiling:
// readCeiling), runs the same pipeline as a child `sluice run` with backlog.mode=never and then
// auto, verifies both runs' results against each other and against the workload's expected
// results, and prints a line for the ceiling, one per run, and a last line with the speedup and
// auto's rate over the ceiling's (ceiling_ratio).
func cmdBench(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	o := benchOpts{sortMemory: 256 * configs.MiB, stderr: stderr}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.StringVar(&o.workload, "workload", benchOrders, "orders (a total per customer), windows (a total per customer and tumbling window, emit: final), "+
		"rollup (windows over windows: those totals rolled up into windows of --rollup), "+
		"join (the orders joined with a customers table of --keys rows produced after them) or cogroup (orders and refunds, --records each, co-grouped per customer)")
	fs.DurationVar(&o.window, "window", time.Hour, "--workload windows, rollup: the tumbling window size (of the first stage)")
	fs.DurationVar(&o.rollup, "rollup", 2*time.Hour, "--workload rollup: the tumbling window size of the second stage, a multiple of --window")
	fs.DurationVar(&o.span, "span", 2*time.Hour, "--workload windows, rollup: the event time the orders span, evenly")
	fs.Int64Var(&o.records, "records", 2_000_000, fmt.Sprintf("orders in the backlog (--workload join: %d unless given; cogroup: and as many refunds)", benchJoinRecords))
	fs.IntVar(&o.keys, "keys", 100_000, fmt.Sprintf("distinct customers (keys; --workload join: the table's rows, %d unless given)", benchJoinKeys))
	fs.IntVar(&o.partitions, "partitions", 8, "partitions of every input topic")
	fs.TextVar(&o.sortMemory, "sort-memory", o.sortMemory, "backlog.sort_memory of each run")
	fs.IntVar(&o.cache, "cache", 0, "processing.cache_keys per task (0: 100000/partitions, i.e. 100000 keys in all)")
	fs.Int64Var(&o.enterLag, "enter-lag", 0, "backlog.enter_lag (0: 50000, or less for a small backlog so that auto enters backlog mode)")
	fs.StringVar(&o.brokers, "brokers", "", "comma-separated brokers of a real cluster (default: an embedded broker)")
	fs.BoolVar(&o.keep, "keep", false, "keep the temp dir (configs, state, child logs)")
	fs.StringVar(&o.only, "only", "", "run one mode only (never or auto), checked against the produced totals; no speedup, and ceiling_ratio is that mode's")
	fs.DurationVar(&o.commitInterval, "commit-interval", 100*time.Millisecond, "processing.commit_interval of each run")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Minute, "give up on a run after this long")
	fs.IntVar(&o.instances, "instances", 1, "child sluice processes per run, in one group (each with its own state dir): a scale-out run")
	fs.StringVar(&o.changelog, "changelog", configs.ChangelogOwnTopic, "--workload orders: the aggregate's changelog: topic (its own topic) or output (its sink's topic, one write per key)")
	fs.BoolVar(&o.pprof, "pprof", false, "serve /debug/pprof/ on each child's HTTP port (http.pprof), printed when the child starts, to profile a run")
	fs.DurationVar(&o.stall, "stall", 10*time.Minute, "give up on a run whose /status shows no progress for this long (status moves per fetched batch, which can take minutes with a small cache)")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if o.workload == benchJoin {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["records"] {
			o.records = benchJoinRecords
		}
		if !set["keys"] {
			o.keys = benchJoinKeys
		}
	}
	if o.records < 1 || o.keys < 1 || o.partitions < 1 || o.instances < 1 || o.cache < 0 || o.enterLag < 0 || o.commitInterval <= 0 || o.timeout <= 0 || o.stall <= 0 {
		return &usageError{"bench: --records, --keys, --partitions and --instances must be >= 1; --cache and --enter-lag >= 0; --commit-interval, --timeout and --stall > 0"}
	}
	if o.changelog != configs.ChangelogOwnTopic && o.changelog != configs.ChangelogOutput {
		return &usageError{fmt.Sprintf("bench: --changelog %q: want topic or output", o.changelog)}
	}
	if o.changelog != configs.ChangelogOwnTopic && o.workload != benchOrders {
		return &usageError{fmt.Sprintf("bench: --changelog applies to --workload orders, not %s", o.workload)}
	}
	if o.only != "" && o.only != configs.ModeNever && o.only != configs.ModeAuto {
		return &usageError{fmt.Sprintf("bench: --only %q: want never or auto", o.only)}
	}
	switch o.workload {
	case benchOrders, benchWindows, benchRollup, benchJoin, benchCogroup:
	default:
		return &usageError{fmt.Sprintf("bench: --workload %q: want orders, windows, rollup, join or cogroup", o.workload)}
	}
	if (o.workload == benchWindows || o.workload == benchRollup) && (o.window < time.Millisecond || o.window%time.Millisecond != 0 || o.span < time.Millisecond) {
		return &usageError{fmt.Sprintf("bench: --window %v and --span %v: want a whole number of milliseconds and at least 1ms", o.window, o.span)}
	}
	if o.workload == benchRollup && (o.rollup < o.window || o.rollup%o.window != 0) {
		return &usageError{fmt.Sprintf("bench: --rollup %v: want a multiple of --window %v", o.rollup, o.window)}
	}
	wl := newBenchWorkload(o)
	if o.cache == 0 {
		o.cache = max(1, (100_000+o.partitions-1)/o.partitions)
	}
	if o.enterLag == 0 {
		// A task is in backlog when its lag exceeds enter_lag; keep the product default unless
		// the backlog per partition is too small to ever count as one.
		o.enterLag = min(50_000, max(1_000, o.records/int64(o.partitions)/4))
	}
	bin := os.Getenv(benchBinaryEnv)
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
	}

	dir, err := os.MkdirTemp("", "sluice-bench-")
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer func() {
		// A failure names a child's log in the temp dir: keep it to be read.
		if o.keep || err != nil {
			fmt.Fprintf(stderr, "bench: keeping %s\n", dir)
			return
		}
		os.RemoveAll(dir)
	}()

	// The broker, and names that cannot collide with an earlier bench on a real cluster.
	prefix := "bench"
	if o.brokers != "" {
		prefix = "sluice-bench-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	topics := benchTopics(wl, prefix, o.brokers == "")
	var inputs []string
	for _, r := range wl.roles() {
		inputs = append(inputs, topics[r])
	}
	modes := []string{configs.ModeNever, configs.ModeAuto}
	if o.only != "" {
		modes = []string{o.only}
	}

	// The children's binary must accept the pipeline before anything is produced: a sluice
	// that refuses it (an operator it does not have yet) fails here with its own error.
	for _, mode := range modes {
		if err := benchValidate(ctx, o, wl, bin, mode, dir, prefix, topics); err != nil {
			return err
		}
	}

	var brokers []string
	if o.brokers == "" {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(o.partitions), inputs...))
		if err != nil {
			return fmt.Errorf("bench: embedded broker: %w", err)
		}
		defer c.Close()
		brokers = c.ListenAddrs()
	} else {
		brokers = strings.Split(o.brokers, ",")
	}
	cl, err := kgo.NewClient(append(workload.ProducerOpts(), kgo.SeedBrokers(brokers...))...)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if o.brokers != "" {
		for _, topic := range inputs {
			if _, err := adm.CreateTopic(ctx, int32(o.partitions), -1, nil, topic); err != nil {
				return fmt.Errorf("bench: create %s: %w", topic, err)
			}
			if err := topicReady(ctx, adm, topic, o.partitions); err != nil {
				return err
			}
		}
		if !o.keep {
			defer func() {
				dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				adm.DeleteTopics(dctx, append(inputs, prefix+"-never-totals", prefix+"-auto-totals")...)
			}()
		}
	}

	broker := "embedded"
	if o.brokers != "" {
		broker = o.brokers
	}
	if o.instances > 1 {
		wl.header += fmt.Sprintf(" instances=%d", o.instances)
	}
	if o.changelog != configs.ChangelogOwnTopic {
		wl.header += " changelog=" + o.changelog
	}
	fmt.Fprintf(stdout, "bench: broker=%s records=%d keys=%d partitions=%d cache_keys=%d/task sort_memory=%v enter_lag=%d commit_interval=%v%s\n",
		broker, o.records, o.keys, o.partitions, o.cache, o.sortMemory, o.enterLag, o.commitInterval, wl.header)

	produced, err := wl.prefill(ctx, cl, topics)
	if err != nil {
		return fmt.Errorf("bench: prefill: %w", err)
	}
	// ends holds the end offsets of the streams: a run is done when its group committed them.
	// inputEnds those of every input topic, tables too: the ceiling reads them all.
	ends := map[string]map[int32]int64{}
	inputEnds := map[string]map[int32]int64{}
	var inputRecords int64
	for _, role := range wl.roles() {
		topic := topics[role]
		listed, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return fmt.Errorf("bench: end offsets of %s: %w", topic, err)
		}
		end := map[int32]int64{}
		var total int64
		var endErr error
		listed.Each(func(l kadm.ListedOffset) {
			if l.Err != nil {
				endErr = l.Err
			}
			end[l.Partition] = l.Offset
			total += l.Offset
		})
		if endErr != nil || total != produced[role] {
			return fmt.Errorf("bench: %s holds %d records after the prefill, want %d: %v", topic, total, produced[role], endErr)
		}
		inputEnds[topic], inputRecords = end, inputRecords+total
		if slices.Contains(wl.streams, role) {
			ends[topic] = end
		}
	}

	// The ceiling: the same topics read on the same broker with the same fetch options, and no
	// processing. Its rate has the runs' numerator (the stream records), so that ceiling_ratio
	// is the ceiling's time over auto's.
	runtime.GC()
	ceiling, err := readCeiling(ctx, brokers, inputEnds)
	if err != nil {
		return err
	}
	if ceiling.records != inputRecords {
		return fmt.Errorf("bench: ceiling: read %d records of the inputs, want %d", ceiling.records, inputRecords)
	}
	fmt.Fprintf(stdout, "ceiling records=%d seconds=%.2f rate=%.0f/s read=%d bytes=%d cpu=%.1fs\n",
		wl.records, ceiling.seconds, float64(wl.records)/ceiling.seconds, ceiling.records, ceiling.bytes, ceiling.cpu)

	// Each run is verified as soon as it ends, and (unless --keep) its output, changelog and
	// dead-letter topics are deleted, so that the next run meets the same broker: with the
	// embedded one, the first run's 20M output and changelog records stayed in this process's
	// heap and its collections slowed the second run down by a third.
	var want map[string]workload.Total
	if wl.want != nil {
		want = wl.want()
	}
	equivalent := true
	var (
		runs []benchRun
		got  []map[string]workload.Total
	)
	for _, mode := range modes {
		// Collect the prefill's (or the previous run's) garbage now rather than during the run.
		runtime.GC()
		before := selfCPU()
		r, err := benchChild(ctx, o, wl, bin, mode, dir, prefix, topics, brokers, adm, ends)
		if err != nil {
			return err
		}
		r.broker = selfCPU() - before
		runs = append(runs, r)
		// cpu is what the run cost in CPU seconds (2 cores give 2 per second); broker_cpu, with
		// the embedded broker, what serving it cost this process.
		line := fmt.Sprintf("mode=%s records=%d seconds=%.2f rate=%.0f/s peak_rss=%dMiB cpu=%.1fs",
			mode, wl.records, r.seconds, float64(wl.records)/r.seconds, (r.rssKiB+512)/1024, r.cpu)
		if o.brokers == "" {
			line += fmt.Sprintf(" broker_cpu=%.1fs", r.broker)
		}

		// Verify: the run's final results equal exactly what was produced.
		vctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		g, extra, problems, err := wl.read(vctx, brokers, r.sink)
		cancel()
		fmt.Fprintln(stdout, line+extra)
		if err != nil {
			return fmt.Errorf("bench: verify mode=%s: %w", r.mode, err)
		}
		got = append(got, g)
		if len(problems) > 0 {
			equivalent = false
			fmt.Fprintf(stderr, "bench: mode=%s wrote wrong outputs (log %s):\n  %s\n", r.mode, r.log, strings.Join(problems, "\n  "))
		}
		if d := workload.Diff(want, g, 5); wl.want != nil && len(d) > 0 {
			equivalent = false
			fmt.Fprintf(stderr, "bench: mode=%s differs from the produced totals (log %s):\n  %s\n", r.mode, r.log, strings.Join(d, "\n  "))
		}
		if !o.keep {
			group := prefix + "-" + mode
			drop := []string{r.sink, group + "-dlq"}
			if wl.operator != "" {
				drop = append(drop, group+"-"+wl.operator+"-changelog")
			}
			if wl.results != "" {
				drop = append(drop, group+"-"+wl.results+"-changelog", group+"-"+wl.results+"-output")
			}
			dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			adm.DeleteTopics(dctx, drop...)
			cancel()
		}
	}
	// ceiling_ratio: the last run's rate (auto's, or the --only mode's) over the ceiling's.
	ratio := ceiling.seconds / runs[len(runs)-1].seconds
	if len(runs) == 1 {
		// One mode (--only): no speedup, but its totals were checked against the workload.
		fmt.Fprintf(stdout, "equivalent=%t ceiling_ratio=%.2f\n", equivalent, ratio)
	} else {
		if d := workload.Diff(got[0], got[1], 5); len(d) > 0 {
			equivalent = false
			fmt.Fprintf(stderr, "bench: mode=auto differs from mode=never:\n  %s\n", strings.Join(d, "\n  "))
		}
		fmt.Fprintf(stdout, "speedup=%.2f equivalent=%t ceiling_ratio=%.2f\n", runs[0].seconds/runs[1].seconds, equivalent, ratio)
	}
	if !equivalent {
		return errors.New("bench: the runs are not equivalent")
	}
	return nil
}

// benchConfig returns the config of a child run in mode: the workload's pipeline with the
// run's group, sink, state dir and settings. port is its HTTP port (0 for any).
func benchConfig(o benchOpts, wl benchWorkload, mode, dir, group, sink string, topics map[string]string, port int) string {
	return fmt.Sprintf(`# sluice bench, mode=%[1]s
group: %[2]s
instance_id: %[1]s-0
processing: {guarantee: exactly_once, commit_interval: %[3]s, state_dir: %[4]q, cache_keys: %[5]d}
backlog: {mode: %[1]s, enter_lag: %[6]d, exit_lag: %[7]d, sort_memory: %[8]q}
http: {listen: "127.0.0.1:%[9]d", pprof: %[10]t}
log: {level: info, format: text}
`, mode, group, o.commitInterval, filepath.Join(dir, mode+"-state"), o.cache, o.enterLag, min(500, o.enterLag/2),
		o.sortMemory.String(), port, o.pprof) + wl.pipeline(topics, sink)
}

// benchValidate runs `bin validate` on the config of a run in mode, so that a sluice that
// refuses the workload's pipeline says why, in its own words, before anything is produced.
func benchValidate(ctx context.Context, o benchOpts, wl benchWorkload, bin, mode, dir, prefix string, topics map[string]string) error {
	group := prefix + "-" + mode
	path := filepath.Join(dir, mode+"-validate.yaml")
	if err := os.WriteFile(path, []byte(benchConfig(o, wl, mode, dir, group, group+"-totals", topics, 0)), 0o644); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	cmd := exec.CommandContext(ctx, bin, "validate", "-c", path)
	cmd.Env = childEnv(os.Environ(), "SLUICE_KAFKA__BROKERS=127.0.0.1:9092")
	out, err := cmd.CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if i := strings.Index(msg, "\n\nusage:"); i >= 0 {
			msg = msg[:i] // a usage error repeats the usage text
		}
		return fmt.Errorf("bench: --workload %s: the sluice that runs the children (%s) refuses the pipeline of mode=%s (%v; config %s):\n  %s",
			o.workload, bin, mode, err, path, strings.ReplaceAll(msg, "\n", "\n  "))
	}
	return nil
}

// benchChild runs the pipeline in mode as o.instances child `sluice run` processes of one group
// (instance ids <mode>-0, <mode>-1, ..., each with its own state dir, port and log) until the
// group has committed the end offsets of every stream (ends, by topic), then stops them with
// SIGTERM and returns the time (start to done), the largest peak RSS and the CPU of them all.
func benchChild(ctx context.Context, o benchOpts, wl benchWorkload, bin, mode, dir, prefix string, topics map[string]string, brokers []string, adm *kadm.Client, ends map[string]map[int32]int64) (benchRun, error) {
	group := prefix + "-" + mode
	r := benchRun{mode: mode, sink: group + "-totals", log: filepath.Join(dir, mode+".log")}
	env := childEnv(os.Environ(), "SLUICE_KAFKA__BROKERS="+strings.Join(brokers, ","))
	kids := make([]*benchKid, max(o.instances, 1))
	defer func() {
		for _, k := range kids {
			if k != nil {
				k.stop() // harmless once stopped
			}
		}
	}()
	start := time.Now()
	for i := range kids {
		name := mode
		if len(kids) > 1 {
			name = fmt.Sprintf("%s-%d", mode, i)
		}
		k, err := startKid(o, wl, bin, mode, name, i, dir, group, r.sink, topics, env)
		if err != nil {
			return r, err
		}
		kids[i] = k
	}
	if len(kids) > 1 {
		r.log = filepath.Join(dir, mode+"-*.log")
	}

	tctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var (
		lastProgress int64 = -1
		progressAt         = start
		nextStatus         = start
		status       string
	)
	for done := false; !done; {
		select {
		case <-tctx.Done():
			return r, fmt.Errorf("bench: mode=%s did not commit the whole input: %w; last status: %s (log %s)%s", mode, tctx.Err(), status, r.log, kidErrors(kids))
		case now := <-tick.C:
			for _, k := range kids {
				if k.exitedEarly() {
					return r, fmt.Errorf("bench: mode=%s (%s) exited before the group committed the whole input: %v (log %s)%s", mode, k.name, k.err, k.log, logErrors(k.log))
				}
			}
			done = committedAll(tctx, adm, group, ends) && (wl.results == "" || consumedResults(tctx, adm, group, group+"-"+wl.results+"-output"))
			if done || now.Before(nextStatus) {
				continue
			}
			nextStatus = now.Add(time.Second)
			var sum int64
			var parts []string
			for _, k := range kids {
				p, st := childStatus(tctx, k.port)
				sum += p
				parts = append(parts, st)
			}
			status = strings.Join(parts, "; ")
			if sum != lastProgress {
				lastProgress, progressAt = sum, now
			} else if now.Sub(progressAt) > o.stall {
				return r, fmt.Errorf("bench: mode=%s made no progress for %v: %s (log %s)%s", mode, o.stall, status, r.log, kidErrors(kids))
			}
		}
	}
	r.seconds = time.Since(start).Seconds()
	for _, k := range kids {
		// The child's own peak, read before it stops (wait4's maxrss would include the RSS this
		// process, with the embedded broker's data, had when it forked the child).
		rss, _ := procstat.PeakRSS(k.cmd.Process.Pid)
		r.rssKiB = max(r.rssKiB, rss)
	}
	for _, k := range kids {
		if err := k.stop(); err != nil {
			return r, fmt.Errorf("bench: mode=%s (%s) on SIGTERM: %w (log %s)%s", mode, k.name, err, k.log, logErrors(k.log))
		}
		r.cpu += (k.cmd.ProcessState.UserTime() + k.cmd.ProcessState.SystemTime()).Seconds()
	}
	return r, nil
}

// benchKid is one child process of a bench run.
type benchKid struct {
	name, log string
	port      int
	cmd       *exec.Cmd
	logf      *os.File
	exited    chan struct{}
	err       error // Wait's, once exited is closed
	stopped   bool
	stopErr   error
}

// startKid writes the config of child i (named name) and starts it.
func startKid(o benchOpts, wl benchWorkload, bin, mode, name string, i int, dir, group, sink string, topics map[string]string, env []string) (*benchKid, error) {
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	k := &benchKid{name: name, log: filepath.Join(dir, name+".log"), port: port, exited: make(chan struct{})}
	cfg := benchConfig(o, wl, mode, dir, group, sink, topics, port)
	if name != mode {
		cfg = strings.Replace(cfg, "instance_id: "+mode+"-0", fmt.Sprintf("instance_id: %s-%d", mode, i), 1)
		cfg = strings.Replace(cfg, strconv.Quote(filepath.Join(dir, mode+"-state")), strconv.Quote(filepath.Join(dir, name+"-state")), 1)
	}
	cfgPath := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if k.logf, err = os.Create(k.log); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	k.cmd = exec.Command(bin, "run", "-c", cfgPath)
	k.cmd.Env = env
	k.cmd.Stdout, k.cmd.Stderr = k.logf, k.logf
	if err := k.cmd.Start(); err != nil {
		k.logf.Close()
		return nil, fmt.Errorf("bench: start %s: %w", bin, err)
	}
	go func() { k.err = k.cmd.Wait(); close(k.exited) }()
	if o.pprof {
		fmt.Fprintf(o.stderr, "bench: %s (pid %d) serves http://127.0.0.1:%d/debug/pprof/\n", name, k.cmd.Process.Pid, port)
	}
	return k, nil
}

// exitedEarly reports whether the child exited without being stopped.
func (k *benchKid) exitedEarly() bool {
	select {
	case <-k.exited:
		return !k.stopped
	default:
		return false
	}
}

// stop sends SIGTERM and waits for the child (a minute at most, then SIGQUIT, which dumps its
// goroutines to its log, and SIGKILL); it returns Wait's error, and the same on later calls.
func (k *benchKid) stop() error {
	if k.stopped {
		return k.stopErr
	}
	k.stopped = true
	defer k.logf.Close()
	select {
	case <-k.exited:
		k.stopErr = k.err
		return k.stopErr
	default:
	}
	k.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-k.exited:
		k.stopErr = k.err
	case <-time.After(time.Minute):
		// SIGQUIT makes the Go runtime write every goroutine's stack to the child's log before
		// it exits: where it hung.
		k.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-k.exited:
		case <-time.After(5 * time.Second):
			k.cmd.Process.Kill()
			<-k.exited
		}
		k.stopErr = fmt.Errorf("did not stop within a minute of SIGTERM; killed after SIGQUIT (its goroutines are in %s)", k.log)
	}
	return k.stopErr
}

// kidErrors is logErrors of every child, each under its name when there are several.
func kidErrors(kids []*benchKid) string {
	if len(kids) == 1 && kids[0] != nil {
		return logErrors(kids[0].log)
	}
	var b strings.Builder
	for _, k := range kids {
		if k != nil {
			if e := logErrors(k.log); e != "" {
				fmt.Fprintf(&b, "\n  %s:%s", k.name, strings.ReplaceAll(e, "\n", "\n  "))
			}
		}
	}
	return b.String()
}

// logErrors returns the lines of a child's log that say what went wrong, each on a line of its
// own after ":\n  ": its errors (level=ERROR, or the "sluice: ..." line it prints when it
// exits with an error), at most the last 5; else its last 3 lines; "" for an empty log.
func logErrors(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(b) > 1<<20 {
		b = b[len(b)-1<<20:]
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	var pick []string
	for _, l := range lines {
		if strings.Contains(l, "level=ERROR") || strings.HasPrefix(l, "sluice: ") || strings.HasPrefix(l, "panic: ") {
			pick = append(pick, l)
		}
	}
	if len(pick) > 5 {
		pick = pick[len(pick)-5:]
	}
	if len(pick) == 0 {
		pick = lines[max(0, len(lines)-3):]
	}
	if len(pick) == 0 || (len(pick) == 1 && pick[0] == "") {
		return ""
	}
	return ":\n  " + strings.Join(pick, "\n  ")
}

// committedAll reports whether group's committed offsets reach ends (by topic and partition)
// on every partition.
func committedAll(ctx context.Context, adm *kadm.Client, group string, ends map[string]map[int32]int64) bool {
	offs, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return false // the group may not exist yet
	}
	for topic, end := range ends {
		for p, e := range end {
			c, ok := offs.Lookup(topic, p)
			if e > 0 && (!ok || c.Err != nil || c.At < e) {
				return false
			}
		}
	}
	return true
}

// consumedResults reports whether group has consumed the internal topic that carries a first
// stage's results to its end: on every partition its committed offset reaches the end offset
// less one (the topic is written in transactions only, so its last offset is a commit marker,
// which a committed offset may stop before). Called once the inputs are committed: the first
// stage wrote its last results in the transaction that committed them.
func consumedResults(ctx context.Context, adm *kadm.Client, group, topic string) bool {
	listed, err := adm.ListEndOffsets(ctx, topic)
	if err != nil || listed.Error() != nil {
		return false
	}
	offs, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return false
	}
	done := true
	listed.Each(func(l kadm.ListedOffset) {
		if c, ok := offs.Lookup(topic, l.Partition); l.Offset > 0 && (!ok || c.Err != nil || c.At < l.Offset-1) {
			done = false
		}
	})
	return done
}

// childStatus reads the child's /status and returns a progress measure (records read plus
// offsets committed, over every task) and a one-line summary of its tasks.
func childStatus(ctx context.Context, port int) (int64, string) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/status", port), nil)
	if err != nil {
		return -1, err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1, "no /status: " + err.Error()
	}
	defer resp.Body.Close()
	var st struct {
		Ready bool `json:"ready"`
		Tasks []struct {
			Partition int32 `json:"partition"`
			Chains    []struct {
				Mode      string `json:"mode"`
				Lag       int64  `json:"lag"`
				Next      int64  `json:"next_offset"`
				Committed int64  `json:"committed_offset"`
				In        int64  `json:"records_in"`
			} `json:"chains"`
		} `json:"tasks"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return -1, "bad /status: " + err.Error()
	}
	var progress int64
	parts := []string{fmt.Sprintf("ready=%t", st.Ready)}
	for _, t := range st.Tasks {
		for _, c := range t.Chains {
			progress += c.In + max(c.Committed, 0)
			parts = append(parts, fmt.Sprintf("p%d{mode=%s in=%d next=%d committed=%d lag=%d}", t.Partition, c.Mode, c.In, c.Next, c.Committed, c.Lag))
		}
	}
	return progress, strings.Join(parts, " ")
}

// childEnv returns environ without its sluice configuration variables (a child's config is
// exactly what bench wrote), plus extra.
func childEnv(environ []string, extra ...string) []string {
	out := make([]string, 0, len(environ)+len(extra))
	for _, kv := range environ {
		if strings.HasPrefix(kv, "SLUICE_") && !strings.HasPrefix(kv, "SLUICE_TEST_") && !strings.HasPrefix(kv, "SLUICE_REQUIRE_") {
			continue
		}
		out = append(out, kv)
	}
	return append(out, extra...)
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// selfCPU is this process's user+system CPU time so far, in seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// topicReady waits until every partition of a new topic has a leader in the metadata: a
// produce right after CreateTopic can otherwise meet UNKNOWN_TOPIC_OR_PARTITION.
func topicReady(ctx context.Context, adm *kadm.Client, topic string, partitions int) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		td, err := adm.ListTopics(ctx, topic)
		if err == nil {
			if d, ok := td[topic]; ok && d.Err == nil && len(d.Partitions) == partitions {
				ready := true
				for _, p := range d.Partitions {
					ready = ready && p.Err == nil && p.Leader >= 0
				}
				if ready {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench: topic %s has no leader for every partition after 30s", topic)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
