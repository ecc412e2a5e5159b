package nexmark

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/integration/kafkatest"
	"github.com/sluice-dev/sluice/operators/plan"
)

// sluiceBin is the sluice binary TestMain builds once (when a real broker is configured), or
// $SLUICE_E2E_BIN. Set before any test runs, never written again; "" without a broker.
var sluiceBin string

// moduleDir is the module's root (go.mod's directory), where configs/nexmark lives.
var moduleDir string

// envLogDir, if set, names a directory where each run's log is written (<test name>.log).
const envLogDir = "SLUICE_TEST_NEXMARK_LOGDIR"

// envBin names a prebuilt sluice binary to use instead of building one (as integration/e2e).
const envBin = "SLUICE_E2E_BIN"

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

// buildAndRun builds cmd/sluice into a temporary directory, only if the broker tests can run
// (the generator's tests need no binary), then runs the tests.
func buildAndRun(m *testing.M) int {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if mod := strings.TrimSpace(string(out)); err != nil || mod == "" || mod == os.DevNull {
		fmt.Fprintln(os.Stderr, "nexmark: not inside a Go module:", err)
		return 1
	} else {
		moduleDir = filepath.Dir(mod)
	}
	if bin := os.Getenv(envBin); bin != "" {
		sluiceBin = bin
		return m.Run()
	}
	if os.Getenv(kafkatest.EnvBrokers) == "" {
		return m.Run() // the broker tests skip (or fail, as kafkatest.Brokers decides)
	}
	dir, err := os.MkdirTemp("", "sluice-nexmark-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "nexmark:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	sluiceBin = filepath.Join(dir, "sluice")
	build := exec.Command("go", "build", "-o", sluiceBin, "./cmd/sluice")
	build.Dir = moduleDir
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "nexmark: go build ./cmd/sluice: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// dataset is the Nexmark events produced once for every query run: their topics and, for the
// references, the bids in generation order. Read-only once built.
type dataset struct {
	brokers string
	topics  Topics
	cfg     Config
	counts  Counts
	bids    []Bid
	// auctions and persons are the generated auctions and persons.
	auctions []Auction
	persons  []Person
}

// newDataset generates cfg's events (cfg.MaxEvents of them), creates the three topics (8
// partitions, unique names) and produces the events to them.
func newDataset(t testing.TB, brokers string, cfg Config) *dataset {
	t.Helper()
	ds := &dataset{
		brokers: brokers,
		topics: Topics{
			Person:    kafkatest.UniqueName(t, "nexmark-person"),
			Auction:   kafkatest.UniqueName(t, "nexmark-auction"),
			Bid:       kafkatest.UniqueName(t, "nexmark-bid"),
			SideInput: kafkatest.UniqueName(t, "nexmark-side-input"),
		},
		cfg: cfg,
	}
	for _, topic := range ds.topics.All() {
		kafkatest.CreateTopic(t, brokers, topic, 8, TopicConfigs())
	}
	g, err := NewGenerator(ds.cfg)
	if err != nil {
		t.Fatal(err)
	}
	events := make([]Event, 0, cfg.MaxEvents)
	for ev, ok := g.Next(); ok; ev, ok = g.Next() {
		events = append(events, ev)
		switch ev.Kind {
		case KindBid:
			ds.bids = append(ds.bids, ev.Bid)
		case KindAuction:
			ds.auctions = append(ds.auctions, ev.Auction)
		case KindPerson:
			ds.persons = append(ds.persons, ev.Person)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cl := kafkatest.Client(t, brokers, ProducerOpts()...)
	if err := ProduceSideInput(ctx, cl, ds.topics, cfg.BaseTime); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ds.counts, err = ProduceEach(ctx, cl, ds.topics, func(yield func(*Event) error) error {
		for i := range events {
			if err := yield(&events[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	first, last := ds.bids[0].DateTime, ds.bids[len(ds.bids)-1].DateTime
	t.Logf("produced %d events (%d persons, %d auctions, %d bids; seed %d, %d events/s: %v of event time) in %v to %s",
		ds.counts.Total(), ds.counts.Persons, ds.counts.Auctions, ds.counts.Bids, cfg.Seed, cfg.FirstEventRate,
		time.Duration(last-first)*time.Millisecond, time.Since(start).Round(time.Millisecond), ds.topics.Bid)
	return ds
}

// runOpts is one run of a query's pipeline.
type runOpts struct {
	query   string // "q0": configs/nexmark/q0.yaml
	mode    string // backlog.mode: never, always, auto
	bounded bool   // sluice run --bounded
	// enterLag and exitLag set backlog.enter_lag and exit_lag when > 0.
	enterLag, exitLag int64
	timeout           time.Duration // the run is killed after this
	// kills: an unbounded run is killed (SIGKILL) this many times, each 0.1–0.6 s after its
	// process started (mid-run: the test's events take about a second), and started again on
	// the same state directory and group; the last one runs until it has caught up.
	kills int
}

// runResult is what one run of sluice left: its output topic, group, exit and duration.
type runResult struct {
	group, output string
	duration      time.Duration // from the start of the process to its exit
	err           error         // the process's exit error, or a timeout
	timedOut      bool
	logs          []byte // stderr: JSON log lines
	kills         int    // how many times the process was killed and started again
}

// logLines returns the run's log lines whose msg is msg, decoded.
func (r *runResult) logLines(msg string) []map[string]any {
	var out []map[string]any
	for _, line := range bytes.Split(r.logs, []byte("\n")) {
		var m map[string]any
		if json.Unmarshal(line, &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// tail returns the last n lines of the run's log.
func (r *runResult) tail(n int) string {
	lines := strings.Split(strings.TrimRight(string(r.logs), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// runQuery runs the shipped binary on configs/nexmark/<query>.yaml over ds's bids, with a
// unique group, output topic and state dir, and waits for it to exit (a bounded run exits by
// itself; an unbounded one is stopped with SIGTERM once its group has committed the bids'
// end offsets). It returns the run's duration: usable as a benchmark.
func runQuery(t testing.TB, ds *dataset, o runOpts) *runResult {
	t.Helper()
	if sluiceBin == "" {
		t.Fatal("nexmark: no sluice binary (TestMain builds one only when " + kafkatest.EnvBrokers + " is set)")
	}
	res := &runResult{
		group:  kafkatest.UniqueName(t, "nexmark-"+o.query),
		output: kafkatest.UniqueName(t, "nexmark-"+o.query+"-out"),
	}
	args := []string{"run", "-c", filepath.Join(moduleDir, "configs", "nexmark", o.query+".yaml")}
	if o.bounded {
		args = append(args, "--bounded")
	}
	cmd := exec.Command(sluiceBin, args...)
	// The config file and these settings define the run: none of the test's own SLUICE_*
	// variables reaches it.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLUICE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env,
		"SLUICE_KAFKA__BROKERS="+ds.brokers,
		"SLUICE_GROUP="+res.group,
		"SLUICE_INSTANCE_ID=nexmark-test",
		"SLUICE_PROCESSING__STATE_DIR="+t.TempDir(),
		"SLUICE_HTTP__LISTEN=off",
		"SLUICE_LOG__FORMAT=json",
		"SLUICE_SOURCES__BID__TOPIC="+ds.topics.Bid,
		"SLUICE_SINKS__OUT__TOPIC="+res.output,
		"SLUICE_BACKLOG__MODE="+o.mode,
	)
	// The auction and person sources only where the pipeline has them (an unused source is
	// still a source of the run).
	cfgText, err := os.ReadFile(args[2])
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(cfgText, []byte("topic: nexmark-auction")) {
		cmd.Env = append(cmd.Env, "SLUICE_SOURCES__AUCTION__TOPIC="+ds.topics.Auction)
	}
	if bytes.Contains(cfgText, []byte("topic: nexmark-person")) {
		cmd.Env = append(cmd.Env, "SLUICE_SOURCES__PERSON__TOPIC="+ds.topics.Person)
	}
	if bytes.Contains(cfgText, []byte("topic: nexmark-side-input")) {
		cmd.Env = append(cmd.Env, "SLUICE_TABLES__SIDE_INPUT__TOPIC="+ds.topics.SideInput)
	}
	if o.enterLag > 0 {
		cmd.Env = append(cmd.Env, "SLUICE_BACKLOG__ENTER_LAG="+strconv.FormatInt(o.enterLag, 10),
			"SLUICE_BACKLOG__EXIT_LAG="+strconv.FormatInt(o.exitLag, 10))
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	done := make(chan error, 1)
	var launched time.Time
	launch := func() {
		launched = time.Now()
		kafkatest.DieWithTest(cmd)
		if err := cmd.Start(); err != nil {
			t.Fatalf("starting sluice: %v", err)
		}
		go func(c *exec.Cmd) { done <- c.Wait() }(cmd)
	}
	launch()
	var kill <-chan time.Time
	rng := rand.New(rand.NewPCG(uint64(start.UnixNano()), 9))
	killAfter := func() <-chan time.Time {
		return time.After(100*time.Millisecond + time.Duration(rng.Int64N(int64(500*time.Millisecond))))
	}
	kills := 0
	if o.kills > 0 && !o.bounded {
		kill = killAfter()
	}
	timeout := time.NewTimer(o.timeout)
	defer timeout.Stop()
	var caughtUp <-chan struct{}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	// watch closes the channel it returns once the group has committed every input to its end.
	watch := func() <-chan struct{} {
		ch := make(chan struct{})
		go func() {
			var topics []string
			if bytes.Contains(cfgText, []byte("topic: nexmark-bid")) {
				topics = append(topics, ds.topics.Bid)
			}
			if bytes.Contains(cfgText, []byte("topic: nexmark-auction")) {
				topics = append(topics, ds.topics.Auction)
			}
			if bytes.Contains(cfgText, []byte("topic: nexmark-person")) {
				topics = append(topics, ds.topics.Person)
			}
			if q, ok := queryNamed(o.query); ok { // its later chains read internal topics
				for _, suffix := range q.internal {
					topics = append(topics, res.group+suffix)
				}
			}
			if waitCommitted(ctx, ds.brokers, res.group, topics) == nil {
				close(ch)
			}
		}()
		return ch
	}
	if !o.bounded && o.kills == 0 {
		caughtUp = watch()
	}
	for res.duration == 0 {
		select {
		case <-kill:
			// kill -9 mid-run, then the same instance again: what it committed stays, what it
			// had not is done again, exactly once.
			_ = cmd.Process.Kill()
			<-done
			kills++
			res.kills = kills
			fmt.Fprintf(&stderr, "--- kill -9 number %d after %v; restarting\n", kills, time.Since(start).Round(time.Millisecond))
			next := exec.Command(cmd.Path, cmd.Args[1:]...)
			next.Env, next.Stderr = cmd.Env, cmd.Stderr
			cmd = next
			launch()
			kill = nil
			if kills < o.kills {
				kill = killAfter()
			} else {
				caughtUp = watch() // the last one runs to the end
			}
		case res.err = <-done:
			res.duration = time.Since(start)
		case <-caughtUp:
			caughtUp = nil
			if d := time.Since(launched); kills > 0 && d < 2*time.Second {
				// A process started again after a kill may find everything committed already;
				// let it install its signal handler (it does before joining) first.
				time.Sleep(2*time.Second - d)
			}
			_ = cmd.Process.Signal(os.Interrupt) // checkpoint and leave; exits 0
		case <-timeout.C:
			// SIGQUIT first: the Go runtime writes every goroutine's stack to the log kept
			// below, which is what a hang needs to be understood; then kill.
			_ = cmd.Process.Signal(syscall.SIGQUIT)
			select {
			case res.err = <-done:
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
				res.err = <-done
			}
			res.duration = time.Since(start)
			res.timedOut = true
			res.err = fmt.Errorf("killed after %v: %w", o.timeout, res.err)
		}
	}
	res.logs = stderr.Bytes()
	if dir := os.Getenv(envLogDir); dir != "" {
		name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()) + ".log"
		if err := os.WriteFile(filepath.Join(dir, name), res.logs, 0o644); err != nil {
			t.Logf("keeping the log: %v", err)
		}
	}
	return res
}

// waitCommitted polls until group has committed every partition of topics at its end offset.
func waitCommitted(ctx context.Context, brokers, group string, topics []string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkatest.SplitBrokers(brokers)...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if caughtUp(ctx, adm, brokers, group, topics) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// caughtUp reports whether group has committed every partition of topics at its end offset,
// or (for a topic written in transactions, such as a repartition topic) before nothing but
// control records (the commit markers a consumer never hands out, so never commits past).
func caughtUp(ctx context.Context, adm *kadm.Client, brokers, group string, topics []string) bool {
	committed, err := adm.FetchOffsets(ctx, group)
	if err != nil || committed.Error() != nil {
		return false
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil || ends.Error() != nil || len(ends) != len(topics) {
		return false
	}
	type gap struct {
		topic     string
		part      int32
		from, end int64
	}
	var gaps []gap
	ends.Each(func(lo kadm.ListedOffset) {
		c, ok := committed.Lookup(lo.Topic, lo.Partition)
		if !ok {
			gaps = append(gaps, gap{lo.Topic, lo.Partition, 0, lo.Offset})
		} else if c.At < lo.Offset {
			gaps = append(gaps, gap{lo.Topic, lo.Partition, c.At, lo.Offset})
		}
	})
	for _, g := range gaps {
		// A transaction leaves one marker per partition it wrote: a wider gap holds records.
		if g.end-g.from > 16 || !onlyControl(ctx, brokers, g.topic, g.part, g.from, g.end) {
			return false
		}
	}
	return true
}

// onlyControl reports whether the records of topic's partition part from offset from to end
// are all control records, read read_committed (within a second: an open transaction is not).
func onlyControl(ctx context.Context, brokers, topic string, part int32, from, end int64) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkatest.SplitBrokers(brokers)...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {part: kgo.NewOffset().At(from)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		return false
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil || fs.Err() != nil {
			return false
		}
		data, last := false, int64(-1)
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset < end && !r.Attrs.IsControl() {
				data = true
			}
			last = max(last, r.Offset)
		})
		if data {
			return false
		}
		if last >= end-1 {
			return true
		}
	}
}

// readOutput reads the run's output topic read_committed from its start to its end (once no
// transaction is open on it), every data record in offset order per partition.
func readOutput(ctx context.Context, brokers, topic string) ([]*kgo.Record, error) {
	var out []*kgo.Record
	err := workload.ReadEach(ctx, kafkatest.SplitBrokers(brokers), topic, func(r *kgo.Record) error {
		out = append(out, r)
		return nil
	})
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return nil, nil // never created: no output
	}
	return out, err
}

// deadLetters summarizes the group's dead-letter topic: how many, and their sluice.error
// headers by count (the most frequent first, at most 5).
func deadLetters(ctx context.Context, brokers, group string) (int, string, error) {
	recs, err := readOutput(ctx, brokers, group+"-dlq")
	if err != nil {
		return 0, "", err
	}
	why := map[string]int{}
	for _, r := range recs {
		reason := "?"
		for _, h := range r.Headers {
			if h.Key == "sluice.error" {
				reason = string(h.Value)
			}
		}
		why[reason]++
	}
	reasons := make([]string, 0, len(why))
	for k := range why {
		reasons = append(reasons, k)
	}
	slices.SortFunc(reasons, func(a, b string) int { return why[b] - why[a] })
	var sb strings.Builder
	for i, k := range reasons {
		if i == 5 {
			fmt.Fprintf(&sb, "; ...")
			break
		}
		if i > 0 {
			sb.WriteString("; ")
		}
		fmt.Fprintf(&sb, "%d× %q", why[k], k)
	}
	return len(recs), sb.String(), nil
}

// queryNamed returns the query called name.
func queryNamed(name string) (query, bool) {
	for _, q := range queries {
		if q.name == name {
			return q, true
		}
	}
	return query{}, false
}

// TestInternalTopicsOfPlans: each query's internal topics are those its plan's later chains
// read (a name missing would let an unbounded run be judged caught up too early; a name the
// plan has not would wait for a topic that never comes).
func TestInternalTopicsOfPlans(t *testing.T) {
	for _, q := range queries {
		b, err := os.ReadFile(filepath.Join(moduleDir, "configs", "nexmark", q.name+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := configs.Parse(b, nil)
		if err != nil {
			t.Fatalf("%s: %v", q.name, err)
		}
		p, err := plan.NewPlan(cfg)
		if err != nil {
			t.Fatalf("%s: %v", q.name, err)
		}
		var read []string
		for _, c := range p.Chains {
			if s, ok := strings.CutPrefix(c.Source.Topic, cfg.Group); ok && !slices.Contains(read, s) {
				read = append(read, s)
			}
		}
		slices.Sort(read)
		want := slices.Sorted(slices.Values(q.internal))
		if !slices.Equal(read, want) {
			t.Errorf("%s: the plan's later chains read %v; the query lists %v", q.name, read, want)
		}
	}
}
