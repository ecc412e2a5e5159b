package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
	"github.com/sluice-dev/sluice/integration/kafkatest"
)

// sluiceBin is the path of the sluice binary TestMain builds once for every test. It is set
// before any test runs and never written again.
var sluiceBin string

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

// envBin names a prebuilt sluice binary to use instead of building one.
const envBin = "SLUICE_E2E_BIN"

func buildAndRun(m *testing.M) int {
	if bin := os.Getenv(envBin); bin != "" {
		sluiceBin = bin
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "sluice-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	sluiceBin = filepath.Join(dir, "sluice")
	build := exec.Command("go", "build", "-o", sluiceBin, "./cmd/sluice")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: go build ./cmd/sluice: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// moduleRoot returns the directory holding go.mod, found from the test's working directory.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside a Go module")
	}
	return filepath.Dir(mod), nil
}

// pipeline is one deployment of the orders-totals pipeline: its topics, group, config file and
// instances. Not safe for concurrent use, except instance methods noted as such.
type pipeline struct {
	t       *testing.T
	brokers string
	topic   string // input, "orders-<unique>"
	sink    string // aggregate output
	group   string
	cfgPath string
	env     []string      // extra SLUICE_* settings for every instance
	keys    workload.Spec // key space of the workload (Keys, Partitions), for nudge records

	nudged    map[string]workload.Total // totals of the nudge records produced so far
	nudges    int64
	nudgeRecs [][2][]byte // key and value of each nudge record
}

// pipelineOpts tunes newPipeline.
type pipelineOpts struct {
	partitions int32
	keys       int // key space of the workload, for nudge records
	enterLag   int64
	exitLag    int64
	extraEnv   []string
	// Event time: with window set (a YAML flow mapping such as "{tumbling: 5s, grace: 50ms}"),
	// the pipeline is windowedPipeline's, with the source's watermark ("{max_delay: 100ms}")
	// and the aggregate's emit mode ("final" or "updates").
	window, watermark, emit string
	// branch, if set, is the sink topic of a second operator reading the orders: a filter
	// (branchExpr) beside the aggregate, whose records go straight to it.
	branch string
	// changelog is the aggregate's changelog setting ("": topic; output: its sink topic).
	changelog string
}

// branchExpr is the filter of pipelineOpts.branch: about a tenth of the workload's orders,
// those of at least branchCents.
const (
	branchExpr  = "amount >= 900"
	branchCents = 90_000
)

// newPipeline creates the input topic and writes the config file. Sluice creates the sink,
// changelog and dead-letter topics itself.
func newPipeline(t *testing.T, brokers string, o pipelineOpts) *pipeline {
	t.Helper()
	p := configuredPipeline(t, brokers, o.partitions, "totals", "commit_interval: 100ms",
		fmt.Sprintf("enter_lag: %d, exit_lag: %d, checkpoint_interval: 0s", o.enterLag, o.exitLag), func(p *pipeline) string {
			body := workload.Pipeline(p.topic, p.sink)
			if o.changelog != "" {
				body = workload.PipelineChangelog(p.topic, p.sink, o.changelog)
			}
			if o.window != "" {
				body = windowedPipeline(p.topic, p.sink, o)
			}
			if o.branch != "" {
				body = strings.Replace(body, "sinks:\n", fmt.Sprintf(`  - name: big
    filter: {input: orders, expr: %q}
    output: big_out
sinks:
  big_out: {topic: %s, format: json}
`, branchExpr, o.branch), 1)
			}
			return body
		})
	p.env = o.extraEnv
	p.keys = workload.Spec{Keys: max(o.keys, 1), Partitions: o.partitions}
	return p
}

// stagedPipeline creates the orders topic (parts partitions) and writes a config of one
// instance's settings (exactly once, commit every commitInterval, backlog mode auto) followed
// by body(orders topic, sink topic): the sources, operators and sinks of a pipeline of several
// stages. The sink topic's name starts with sink.
func stagedPipeline(t *testing.T, brokers string, parts int32, sink, commitInterval string, body func(orders, sink string) string) *pipeline {
	t.Helper()
	return configuredPipeline(t, brokers, parts, sink, "commit_interval: "+commitInterval, "enter_lag: 5000, exit_lag: 500",
		func(p *pipeline) string { return body(p.topic, p.sink) })
}

// configuredPipeline creates the orders topic (parts partitions) and writes a config of one
// instance's settings, exactly once with processing's and backlog's further settings (YAML flow
// mapping members), followed by body(p): the sources, operators and sinks. The sink topic's
// name starts with sink.
func configuredPipeline(t *testing.T, brokers string, parts int32, sink, processing, backlog string, body func(p *pipeline) string) *pipeline {
	t.Helper()
	p := &pipeline{
		t: t, brokers: brokers,
		topic:   kafkatest.UniqueName(t, "orders"),
		sink:    kafkatest.UniqueName(t, sink),
		group:   kafkatest.UniqueName(t, "g"),
		cfgPath: filepath.Join(t.TempDir(), "sluice.yaml"),
		nudged:  map[string]workload.Total{},
	}
	kafkatest.CreateTopic(t, brokers, p.topic, parts, nil)
	cfg := fmt.Sprintf(`# written by the e2e test %s
kafka:
  brokers: [%s]
group: %s
instance_id: unset
processing: {guarantee: exactly_once, state_dir: ./unset, %s}
backlog: {%s, sort_memory: 64MiB, mode: auto}
http: {listen: "off"}
log: {level: info, format: json}
`, t.Name(), strings.Join(kafkatest.SplitBrokers(brokers), ", "), p.group, processing, backlog) + body(p)
	if err := os.WriteFile(p.cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *pipeline) admin() *kadm.Client {
	return kadm.NewClient(kafkatest.Client(p.t, p.brokers))
}

// produce writes s to the input topic.
func (p *pipeline) produce(ctx context.Context, s workload.Spec) error {
	cl := kafkatest.Client(p.t, p.brokers, workload.ProducerOpts()...)
	return workload.Produce(ctx, cl, p.topic, s)
}

// instance is one sluice process identity: its instance id and state dir survive restarts.
// Its methods are called from the test goroutine only, except logs/hasLog, which are safe for
// concurrent use.
type instance struct {
	p        *pipeline
	id       string
	stateDir string
	http     bool // serve HTTP on a random loopback port (for /status)

	mu      sync.Mutex
	logs    bytes.Buffer // stderr of every run, in order
	addr    string       // HTTP address of the current run, from its "http listening" line
	running *proc
	runs    int
	runAt   []int // offset in logs where each run's output starts
}

// proc is one run of the binary.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and its stderr is drained
	err  error         // cmd.Wait's result, valid after done
}

func (p *pipeline) newInstance(id string, withHTTP bool) *instance {
	in := &instance{p: p, id: id, stateDir: filepath.Join(p.t.TempDir(), id), http: withHTTP}
	p.t.Cleanup(func() {
		in.mu.Lock()
		r := in.running
		in.mu.Unlock()
		if r != nil {
			_ = r.cmd.Process.Kill()
			<-r.done
		}
		if p.t.Failed() {
			p.t.Logf("=== logs of instance %s (last 60 lines; whole log%s) ===\n%s", id, in.saveLogs(), in.tail(60))
		} else if os.Getenv("SLUICE_E2E_LOG_DIR") != "" {
			in.saveLogs() // kept for a run that passed too: what paths it took
		}
	})
	return in
}

// start runs the binary for this instance. It does not wait for anything.
func (in *instance) start() {
	t := in.p.t
	t.Helper()
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.running != nil {
		t.Fatalf("instance %s started twice", in.id)
	}
	listen := "off"
	if in.http {
		listen = "127.0.0.1:0"
	}
	cmd := exec.Command(sluiceBin, "run", "-c", in.p.cfgPath)
	// The config file and the settings below fully define the instance: no SLUICE_* variable of
	// the test's own environment (SLUICE_TEST_KAFKA, SLUICE_E2E_BIN, ...) reaches it.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLUICE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env,
		"SLUICE_INSTANCE_ID="+in.id,
		"SLUICE_PROCESSING__STATE_DIR="+in.stateDir,
		"SLUICE_HTTP__LISTEN="+listen,
	)
	cmd.Env = append(cmd.Env, in.p.env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = io.Discard
	kafkatest.DieWithTest(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting instance %s: %v", in.id, err)
	}
	in.runs++
	in.addr = ""
	in.runAt = append(in.runAt, in.logs.Len())
	fmt.Fprintf(&in.logs, "--- run %d (pid %d) ---\n", in.runs, cmd.Process.Pid)
	r := &proc{cmd: cmd, done: make(chan struct{})}
	in.running = r
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
		for sc.Scan() {
			in.logLine(sc.Bytes())
		}
		r.err = cmd.Wait()
		close(r.done)
	}()
}

func (in *instance) logLine(line []byte) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.logs.Write(line)
	in.logs.WriteByte('\n')
	var m struct {
		Msg  string `json:"msg"`
		Addr string `json:"addr"`
	}
	if json.Unmarshal(line, &m) == nil && m.Msg == "http listening" {
		in.addr = m.Addr
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (in *instance) kill() {
	in.stop(syscall.SIGKILL, 10*time.Second)
}

// termAll stops every instance of ins (term) and returns their instance ids, for
// checkTransactions.
func termAll(ins []*instance) []string {
	ids := make([]string, len(ins))
	for i, in := range ins {
		in.term()
		ids[i] = in.id
	}
	return ids
}

// term sends SIGTERM (checkpoint and leave) and waits up to a minute for a clean exit 0. A
// process that was just (re)started gets the signal only once it has logged its first line: a
// SIGTERM before the Go runtime has installed its handler kills it like any unhandled signal.
func (in *instance) term() {
	in.p.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		in.mu.Lock()
		started := len(in.runAt) > 0 && in.logs.Len() > in.runAt[len(in.runAt)-1]+64
		in.mu.Unlock()
		if started || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond) // polling the child's log; bounded by deadline
	}
	if err := in.stop(syscall.SIGTERM, time.Minute); err != nil {
		in.p.t.Errorf("instance %s after SIGTERM: %v", in.id, err)
	}
}

func (in *instance) stop(sig syscall.Signal, wait time.Duration) error {
	t := in.p.t
	t.Helper()
	in.mu.Lock()
	r := in.running
	in.mu.Unlock()
	if r == nil {
		t.Fatalf("instance %s is not running", in.id)
	}
	select {
	case <-r.done:
		t.Fatalf("instance %s exited before %v: %v", in.id, sig, r.err)
	default:
	}
	if err := r.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signalling instance %s: %v", in.id, err)
	}
	// The process must react to the signal; wait bounds how long that may take.
	select {
	case <-r.done:
	case <-time.After(wait):
		_ = r.cmd.Process.Kill()
		<-r.done
		t.Fatalf("instance %s did not exit within %v of %v", in.id, wait, sig)
	}
	in.mu.Lock()
	in.running = nil
	in.mu.Unlock()
	return r.err
}

// checkAlive fails the test if the instance's process has exited on its own.
func (in *instance) checkAlive() {
	in.p.t.Helper()
	in.mu.Lock()
	r := in.running
	in.mu.Unlock()
	if r == nil {
		return
	}
	select {
	case <-r.done:
		in.p.t.Fatalf("instance %s exited on its own: %v", in.id, r.err)
	default:
	}
}

func (in *instance) tail(n int) string {
	in.mu.Lock()
	defer in.mu.Unlock()
	lines := strings.Split(strings.TrimRight(in.logs.String(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// logLines returns the JSON log lines whose msg is msg, decoded, of run number run (1-based;
// 0 for every run).
func (in *instance) logLines(run int, msg string) []map[string]any {
	in.mu.Lock()
	defer in.mu.Unlock()
	b := in.logs.Bytes()
	if run > 0 {
		b = b[in.runAt[run-1]:]
		if run < len(in.runAt) {
			b = b[:in.runAt[run]-in.runAt[run-1]]
		}
	}
	var out []map[string]any
	for _, line := range bytes.Split(b, []byte("\n")) {
		var m map[string]any
		if json.Unmarshal(line, &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// status fetches GET /status; ok is false while the server is not up yet.
func (in *instance) status(ctx context.Context) (st statusDoc, ok bool) {
	in.mu.Lock()
	addr := in.addr
	in.mu.Unlock()
	if addr == "" {
		return st, false
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/status", nil)
	if err != nil {
		return st, false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, false
	}
	defer resp.Body.Close()
	if json.NewDecoder(resp.Body).Decode(&st) != nil {
		return st, false
	}
	return st, true
}

// statusDoc is the part of /status the tests read.
type statusDoc struct {
	Ready bool `json:"ready"`
	Tasks []struct {
		Partition int32 `json:"partition"`
		Chains    []struct {
			Topic string `json:"topic"` // the chain's source topic
			Mode  string `json:"mode"`
			Lag   int64  `json:"lag"`
		} `json:"chains"`
	} `json:"tasks"`
}

func (s statusDoc) backlogTasks() int {
	n := 0
	for _, tk := range s.Tasks {
		for _, c := range tk.Chains {
			if c.Mode == "backlog" {
				n++
			}
		}
	}
	return n
}

// poll calls cond every interval until it returns true, an error, or ctx ends; what names the
// condition in the failure message. It is the only way these tests wait for sluice.
func poll(ctx context.Context, t *testing.T, what string, interval time.Duration, cond func() (bool, error)) {
	t.Helper()
	pollf(ctx, t, func() string { return what }, interval, cond)
}

// pollf is poll with a description computed when it fails.
func pollf(ctx context.Context, t *testing.T, what func() string, interval time.Duration, cond func() (bool, error)) {
	t.Helper()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		done, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what(), err)
		}
		if done {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what(), context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// caughtUp reports whether the group's committed offset equals the input's end offset on every
// partition, how many records are still uncommitted, and which behind partitions have not
// moved for nudgeAfter (tracked in progress, which it updates).
func (p *pipeline) caughtUp(ctx context.Context, adm *kadm.Client, progress map[int32]*partProgress) (bool, int64, []int32, error) {
	ends, err := adm.ListEndOffsets(ctx, p.topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return false, 0, nil, fmt.Errorf("end offsets: %w", err)
	}
	committed, err := adm.FetchOffsets(ctx, p.group)
	if err == nil {
		err = committed.Error()
	}
	if err != nil {
		return false, 0, nil, fmt.Errorf("committed offsets: %w", err)
	}
	now := time.Now()
	var (
		behind int64
		stuck  []int32
	)
	ends.Each(func(lo kadm.ListedOffset) {
		c, ok := committed.Lookup(p.topic, lo.Partition)
		at := int64(0)
		if ok {
			at = c.At
		}
		behind += max(lo.Offset-at, 0)
		pp := progress[lo.Partition]
		if pp == nil || pp.at != at || at >= lo.Offset {
			progress[lo.Partition] = &partProgress{at: at, since: now}
			return
		}
		if now.Sub(pp.since) >= nudgeAfter {
			stuck = append(stuck, lo.Partition)
			pp.since = now
		}
	})
	return behind == 0, behind, stuck, nil
}

// waitCaughtUp polls until the group has committed every input record, checking that the
// instances stay alive. It nudges partitions that stop making progress (see nudge).
func (p *pipeline) waitCaughtUp(ctx context.Context, within time.Duration, ins ...*instance) {
	p.t.Helper()
	p.waitCommitted(ctx, within, true, ins...)
}

// pollRequestTimeout bounds the requests of one poll of waitCommitted.
const pollRequestTimeout = 15 * time.Second

// nudgeAfter is how long a partition may stay behind without its committed offset moving
// before waitCommitted produces a nudge record to it.
const nudgeAfter = 2 * time.Second

// waitCommitted is waitCaughtUp; with nudge false it never produces nudge records.
//
// Nudging dates from a bug since fixed (TestBacklogExitsWhenInputStops, which never nudges,
// guards it): a task whose last batch was larger than exit_lag stayed in backlog mode until
// more input arrived. A nudge is one extra order (1 cent) for a key of the stuck partition; its
// total is added to the expected totals by expected. It cannot hide a partition nobody owns or
// a task that stopped (a nudge on it is not processed either), and each is logged ("nudged
// partition"): a partition stands still for 2 s while an instance restarts or a killed broker
// is fenced, and the nudge then only adds an order to count.
func (p *pipeline) waitCommitted(ctx context.Context, within time.Duration, nudge bool, ins ...*instance) {
	p.t.Helper()
	ctx, cancel := context.WithTimeoutCause(ctx, within, fmt.Errorf("not caught up after %v", within))
	defer cancel()
	adm := p.admin()
	progress := make(map[int32]*partProgress)
	var (
		behind        int64
		lastErr       error
		polls, failed int
	)
	what := func() string {
		msg := fmt.Sprintf("the group to commit every input offset (last seen: %d behind, error %v; %d of %d polls failed)", behind, lastErr, failed, polls)
		for _, in := range ins {
			if st, ok := in.status(context.Background()); ok {
				b, _ := json.Marshal(st)
				msg += fmt.Sprintf("\n/status of %s: %s", in.id, b)
			}
		}
		return msg
	}
	pollf(ctx, p.t, what, 200*time.Millisecond, func() (bool, error) {
		for _, in := range ins {
			in.checkAlive()
		}
		// Errors are expected while the group is forming (no coordinator, no group yet): keep
		// polling and report the last one if the deadline passes.
		// Each poll's requests have a bound of their own, so that one request the broker
		// never answers fails its poll, not the whole wait (a CI run's wait once ended on a
		// ListOffsets cut by the wait's deadline, every instance caught up by its /status).
		pctx, pcancel := context.WithTimeout(ctx, pollRequestTimeout)
		ok, b, stuck, err := p.caughtUp(pctx, adm, progress)
		pcancel()
		polls++
		if err != nil {
			// A fresh client for the next poll: a CI run's wait once saw every ListOffsets of
			// its client time out for two minutes while every instance reported no lag.
			failed++
			adm = p.admin()
		} else {
			behind = b
		}
		lastErr = err
		if nudge && err == nil {
			for _, part := range stuck {
				if err := p.nudge(ctx, part); err != nil {
					return false, err
				}
			}
		}
		return ok && err == nil, nil
	})
}

// partProgress is the last committed offset of a partition and when it last moved.
type partProgress struct {
	at    int64
	since time.Time
}

// nudge produces one order of 1 cent, keyed to land on partition part, and records its total.
func (p *pipeline) nudge(ctx context.Context, part int32) error {
	var key []byte
	for n := int(p.nudges) % p.keys.Keys; ; n = (n + 1) % p.keys.Keys {
		if k := p.keys.Key(n); workload.Partition(k, p.keys.Partitions) == part {
			key = k
			break
		}
		if n+1 == int(p.nudges)%p.keys.Keys+p.keys.Keys {
			return fmt.Errorf("no key of %d lands on partition %d", p.keys.Keys, part)
		}
	}
	p.nudges++
	ts := workload.DefaultStartTS + p.nudges
	val := fmt.Sprintf(`{"order_id":"nudge-%d","customer_id":%q,"amount":0.01,"ts":%d}`, p.nudges, key, ts)
	cl := kafkatest.Client(p.t, p.brokers)
	rec := &kgo.Record{Topic: p.topic, Key: key, Value: []byte(val), Timestamp: time.UnixMilli(ts)}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("nudge record: %w", err)
	}
	if rec.Partition != part {
		return fmt.Errorf("nudge record for partition %d landed on %d", part, rec.Partition)
	}
	p.nudgeRecs = append(p.nudgeRecs, [2][]byte{key, []byte(val)})
	tot := p.nudged[string(key)]
	tot.SumCents++
	tot.Count++
	p.nudged[string(key)] = tot
	p.t.Logf("nudged partition %d (stuck for %v): one order for %s", part, nudgeAfter, key)
	return nil
}

// expected returns the totals of specs plus those of the nudge records.
func (p *pipeline) expected(specs ...workload.Spec) map[string]workload.Total {
	out := sum(specs...)
	for k, v := range p.nudged {
		o := out[k]
		o.SumCents += v.SumCents
		o.Count += v.Count
		out[k] = o
	}
	return out
}

// produced enumerates the records the test wrote to the input: the orders of specs and the
// nudge records (for inputCopies).
func (p *pipeline) produced(specs ...workload.Spec) func(yield func(key, value []byte) error) error {
	return func(yield func(key, value []byte) error) error {
		for _, s := range specs {
			if err := s.Each(func(key, value []byte, _ int64) error { return yield(key, value) }); err != nil {
				return err
			}
		}
		for _, r := range p.nudgeRecs {
			if err := yield(r[0], r[1]); err != nil {
				return err
			}
		}
		return nil
	}
}

// verify reads the sink with read_committed and demands exact totals, and that none of the
// given instances' transactional ids has a transaction open.
func (p *pipeline) verify(ctx context.Context, want map[string]workload.Total, instanceIDs ...string) {
	t := p.t
	t.Helper()
	p.checkTransactions(ctx, instanceIDs...)
	got, err := workload.ReadTotals(ctx, kafkatest.SplitBrokers(p.brokers), p.sink, "amount", "orders")
	if err != nil {
		t.Fatalf("reading totals: %v", err)
	}
	if d := workload.Diff(want, got, 20); d != nil {
		diagnoseTotals(ctx, t, p.brokers, p.topic, want, got)
		t.Fatalf("totals differ from expected (%d keys expected, %d read):\n%s", len(want), len(got), strings.Join(d, "\n"))
	}
	t.Logf("verified %d keys exactly", len(want))
}

// checkTransactions demands that none of the given instances' transactional ids has a
// transaction open once every instance has stopped (Prepare* states may take the broker's
// marker round trip to settle; Ongoing is a leak).
func (p *pipeline) checkTransactions(ctx context.Context, instanceIDs ...string) {
	t := p.t
	t.Helper()
	adm := p.admin()
	var ids []string
	for _, id := range instanceIDs {
		ids = append(ids, p.group+"-"+id)
	}
	// Prepare* states settle within the broker's marker round trip; Ongoing after every
	// instance exited cleanly is a leak.
	var last kadm.DescribedTransactions
	poll(ctx, t, "transactions to settle", 100*time.Millisecond, func() (bool, error) {
		d, err := adm.DescribeTransactions(ctx, ids...)
		if err != nil {
			return false, err
		}
		last = d
		for _, tx := range d {
			if tx.Err != nil {
				return false, fmt.Errorf("describe %s: %w", tx.TxnID, tx.Err)
			}
			switch tx.State {
			case "Ongoing":
				return false, fmt.Errorf("transaction %s is still Ongoing (partitions %v) after every instance stopped", tx.TxnID, tx.Topics)
			case "PrepareCommit", "PrepareAbort", "PrepareEpochFence":
				return false, nil
			}
		}
		return true, nil
	})
	for _, tx := range last.Sorted() {
		t.Logf("transaction %s: %s (producer %d epoch %d)", tx.TxnID, tx.State, tx.ProducerID, tx.ProducerEpoch)
	}
}

// sum returns the per-key totals of several workloads together.
func sum(specs ...workload.Spec) map[string]workload.Total {
	out := make(map[string]workload.Total)
	for _, s := range specs {
		for k, v := range s.Expected() {
			o := out[k]
			o.SumCents += v.SumCents
			o.Count += v.Count
			out[k] = o
		}
	}
	return out
}
