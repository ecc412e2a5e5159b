package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/valyala/fastjson"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
	"github.com/sluice-dev/sluice/integration/kafkatest"
)

// envChaosLong selects the long chaos run: at least 30 kills of sluice instances and a broker
// kill in every round.
const envChaosLong = "SLUICE_CHAOS_LONG"

// TestChaos is the exactly-once scenario where production runs sluice: a three-node KRaft
// cluster (replication factor 3, min.insync.replicas 2) and a group of up to three instances
// under live traffic. Sluice instances are killed with SIGKILL during backlog mode, right at a
// switch to real-time mode, during a restore from the changelog (state dir deleted) and at random
// moments; the leader of a busy partition is killed and restarted, twice, and so is the active
// controller; the group scales 1 → 3 → 1 while traffic flows. The verifier reads the sink with
// read_committed and demands every key's sum and count exact (every input counted once), no
// committed input offset going back, and no transaction left open.
//
// The short run is in the CI suite; SLUICE_CHAOS_LONG=1 runs rounds until at least 30 instance
// kills (and three broker kills per round).
func TestChaos(t *testing.T) {
	c := kafkatest.StartCluster(t)
	size := chaosSize{prefill: 120_000, burst: 80_000, keys: 5_000, minKills: 0, timeout: 6 * time.Minute}
	if os.Getenv(envChaosLong) == "1" {
		size = chaosSize{prefill: 400_000, burst: 120_000, keys: 20_000, minKills: 30, timeout: 40 * time.Minute}
	}
	chaosScenario(t, c, size, &aggLoad{keys: size.keys, branch: true})
}

// TestChaosJoin is TestChaos with the stream-table join that waits for its table (FLIP-326):
// every order exactly once, with its customer's row.
func TestChaosJoin(t *testing.T) {
	c := kafkatest.StartCluster(t)
	size := chaosSize{prefill: 120_000, burst: 80_000, keys: 20_000, minKills: 0, timeout: 6 * time.Minute}
	if os.Getenv(envChaosLong) == "1" {
		size = chaosSize{prefill: 400_000, burst: 120_000, keys: 50_000, minKills: 30, timeout: 40 * time.Minute}
	}
	chaosScenario(t, c, size, &joinLoad{aggLoad: aggLoad{keys: size.keys}})
}

// TestChaosWindows is TestChaos with tumbling windows, emit final, and late records: every
// (key, window) final exactly once with its exact sum and count, and every late record exactly
// once in the dead-letter topic, by the oracle of the windows scenario.
func TestChaosWindows(t *testing.T) {
	c := kafkatest.StartCluster(t)
	size := chaosSize{prefill: 120_000, burst: 80_000, keys: 2_000, minKills: 0, timeout: 6 * time.Minute}
	if os.Getenv(envChaosLong) == "1" {
		size = chaosSize{prefill: 400_000, burst: 120_000, keys: 5_000, minKills: 30, timeout: 40 * time.Minute}
	}
	chaosScenario(t, c, size, newWindowsLoad(t, size.keys))
}

type chaosSize struct {
	prefill  int // orders before the first instance starts
	burst    int // orders produced while every instance is down, before the kill at the switch
	keys     int
	minKills int // keep going in rounds until this many instance kills
	timeout  time.Duration
}

// chaosLoad is what a chaos run's pipeline computes and how it is fed and checked. Its methods
// are called from the test goroutine, except that the traffic it starts runs beside it.
type chaosLoad interface {
	// pipeline creates the input topics and writes the config; o has the run's partitions,
	// keys and lags.
	pipeline(t *testing.T, brokers string, o pipelineOpts) *pipeline
	// switchMsg is the log line of the moment the kills at a switch aim at.
	switchMsg() string
	// produce writes n more orders and returns once every one is acknowledged.
	produce(ch *chaos, n int)
	// startTraffic produces orders until the returned function is called, which waits for the
	// batch in flight.
	startTraffic(ch *chaos) (stop func())
	// finish waits, after the traffic stopped, until the group committed every input record.
	finish(ch *chaos, in *instance)
	// verify checks the outputs once every instance stopped; it returns the orders verified.
	verify(ch *chaos, ids []string) int64
}

// chaos is the state of one chaos run: the cluster, the pipeline, its instances and the counts
// the verifier prints. Used from the test goroutine only.
type chaos struct {
	t       *testing.T
	ctx     context.Context
	c       *kafkatest.Cluster
	cl      *kgo.Client // for metadata: leaders, the controller
	p       *pipeline
	ins     []*instance
	rng     *rand.Rand
	load    chaosLoad
	kills   int // SIGKILLs of sluice instances
	brokers int // SIGKILLs of broker nodes (controller included)
	events  []string
}

func chaosScenario(t *testing.T, c *kafkatest.Cluster, size chaosSize, load chaosLoad) {
	ctx, cancel := context.WithTimeout(t.Context(), size.timeout)
	defer cancel()
	seed := testSeed(t)
	ch := &chaos{
		t:    t,
		ctx:  ctx,
		c:    c,
		rng:  rand.New(rand.NewPCG(uint64(seed), 11)),
		load: load,
		cl:   kafkatest.Client(t, c.Addrs),
	}
	ch.p = load.pipeline(t, c.Addrs, pipelineOpts{partitions: chaosParts, keys: size.keys, enterLag: 5000, exitLag: 500})
	ch.ins = []*instance{ch.p.newInstance("i0", true), ch.p.newInstance("i1", true), ch.p.newInstance("i2", true)}
	adm := ch.p.admin()
	watch := ch.p.watchOffsets(ctx, adm)

	load.produce(ch, size.prefill)
	i0 := ch.ins[0]
	i0.start()
	ch.killInBacklog(i0)

	stopTraffic := load.startTraffic(ch)
	for round := 1; ; round++ {
		t.Logf("=== round %d", round)
		// The leader of a busy input partition, while its group is catching up.
		ch.killLeader(ch.p.topic)
		// Scale up: 1 → 3 while traffic flows; tasks move, the new owners restore.
		for _, in := range ch.ins[1:] {
			in.start()
		}
		ch.randomMoment()
		ch.killRandom("random moment")
		// The leader of a partition of the sink, which every checkpoint writes to.
		ch.killLeader(ch.p.sink)
		ch.killController()
		ch.killAtSwitch(size.burst)
		ch.killDuringRestore(ch.ins[ch.rng.IntN(len(ch.ins))])
		ch.randomMoment()
		ch.killRandom("random moment")
		// Scale down: 3 → 1 while traffic flows.
		for _, in := range ch.ins[1:] {
			ch.waitJoined(in)
			in.term()
		}
		ch.events = append(ch.events, "scaled down to 1")
		if ch.kills >= size.minKills {
			break
		}
	}
	stopTraffic()
	start := time.Now()
	load.finish(ch, i0)
	t.Logf("caught up %v after the last fault", time.Since(start).Round(time.Millisecond))
	i0.term()
	if back := watch.stop(); len(back) > 0 {
		t.Errorf("committed input offsets went back: %v", back)
	}
	ids := []string{"i0", "i1", "i2"}
	ch.p.checkTransactions(ctx, ids...)
	records := load.verify(ch, ids)
	var lost, unreachable int
	for _, in := range ch.ins {
		lost += len(in.logLines(0, sessionLostMsg))
		unreachable += len(in.logLines(0, "kafka unreachable for now; retrying"))
	}
	t.Logf("chaos figures: %d instance kills, %d broker kills, %d orders verified, no open transaction; %d Kafka sessions lost and restarted in-process, %d fetch warnings of an unreachable broker",
		ch.kills, ch.brokers, records, lost, unreachable)
	t.Logf("chaos events:\n  %s", strings.Join(ch.events, "\n  "))
}

// sessionLostMsg is the log line of an instance that restarts its Kafka session in-process.
const sessionLostMsg = "Kafka session lost (a broker could not be reached while a transaction ended or began); restarting it as after a crash"

// chaosParts is the partition count of a chaos run's input.
const chaosParts = 8

func (ch *chaos) event(format string, args ...any) {
	ch.t.Helper()
	e := fmt.Sprintf(format, args...)
	ch.events = append(ch.events, e)
	ch.t.Log(e)
}

// kill sends SIGKILL to in and restarts it.
func (ch *chaos) kill(in *instance, why string) {
	ch.t.Helper()
	in.kill()
	ch.kills++
	ch.event("kill -9 #%d: %s (%s)", ch.kills, in.id, why)
	in.start()
}

// killRandom kills a running instance chosen at random.
func (ch *chaos) killRandom(why string) {
	ch.t.Helper()
	var running []*instance
	for _, in := range ch.ins {
		if in.pid() != 0 {
			running = append(running, in)
		}
	}
	ch.kill(running[ch.rng.IntN(len(running))], why)
}

// randomMoment waits a random 300ms–2.3s: the next fault lands wherever the instances are by
// then. It is the scenario's randomness, not a wait for a condition.
func (ch *chaos) randomMoment() {
	select {
	case <-time.After(300*time.Millisecond + time.Duration(ch.rng.Int64N(int64(2*time.Second)))):
	case <-ch.ctx.Done():
		ch.t.Fatal(ch.ctx.Err())
	}
}

// killInBacklog kills in as soon as /status shows one of its tasks in backlog mode (or, if the
// backlog was sorted between two polls, or the load has no backlog mode, just after the load's
// switch).
func (ch *chaos) killInBacklog(in *instance) {
	ch.t.Helper()
	how := "while in backlog"
	msg := ch.load.switchMsg()
	switches := len(in.logLines(0, msg))
	poll(ch.ctx, ch.t, in.id+" to report a task in backlog mode", 20*time.Millisecond, func() (bool, error) {
		in.checkAlive()
		if st, ok := in.status(ch.ctx); ok && st.backlogTasks() > 0 {
			return true, nil
		}
		if len(in.logLines(0, msg)) > switches {
			how = "just after: " + msg
			return true, nil
		}
		return false, nil
	})
	ch.kill(in, how)
}

// killAtSwitch kills every running instance, produces a burst larger than enter_lag on every
// partition, restarts them (every task starts in backlog mode) and kills the first instance that
// logs the load's switch (to real-time mode: its switch transaction holds every key it folded;
// a join: its table's snapshot loaded), right then.
func (ch *chaos) killAtSwitch(burst int) {
	ch.t.Helper()
	var running []*instance
	for _, in := range ch.ins {
		if in.pid() != 0 {
			in.kill()
			ch.kills++
			running = append(running, in)
		}
	}
	ch.event("kill -9 of all %d running instances (kills up to #%d), then a burst of %d orders", len(running), ch.kills, burst)
	ch.load.produce(ch, burst)
	msg := ch.load.switchMsg()
	before := make([]int, len(running))
	for i, in := range running {
		before[i] = len(in.logLines(0, msg))
		in.start()
	}
	var victim *instance
	poll(ch.ctx, ch.t, fmt.Sprintf("an instance to log %q after the burst", msg), 5*time.Millisecond, func() (bool, error) {
		for i, in := range running {
			in.checkAlive()
			if len(in.logLines(0, msg)) > before[i] {
				victim = in
				return true, nil
			}
		}
		return false, nil
	})
	ch.kill(victim, "right at: "+msg)
}

// killDuringRestore stops in cleanly, deletes its state dir, restarts it and kills it as soon as
// it has been assigned partitions, while it restores them from the changelog (a small state may
// be restored before the kill lands; the log line says which).
func (ch *chaos) killDuringRestore(in *instance) {
	ch.t.Helper()
	if in.pid() == 0 {
		in.start()
	}
	in.term()
	if err := os.RemoveAll(in.stateDir); err != nil {
		ch.t.Fatal(err)
	}
	in.start()
	run := in.runs
	poll(ch.ctx, ch.t, in.id+" to be assigned partitions", 5*time.Millisecond, func() (bool, error) {
		in.checkAlive()
		return len(in.logLines(run, "partitions assigned")) > 0, nil
	})
	how := "during its restore from the changelog (state dir deleted)"
	if len(in.logLines(run, "state restored")) > 0 {
		how = "just after its restore from the changelog (state dir deleted)"
	}
	ch.kill(in, how)
}

// waitJoined waits until in's current run has joined the group. Its transactional producer is
// initialized then, which fences (and aborts) the transaction a kill -9 of its previous run left
// open; an instance stopped before that leaves it Ongoing until the broker's transaction
// timeout, which is Kafka's behaviour, not a leak of sluice's.
func (ch *chaos) waitJoined(in *instance) {
	ch.t.Helper()
	run := in.runs
	poll(ch.ctx, ch.t, in.id+" to join the group", 10*time.Millisecond, func() (bool, error) {
		in.checkAlive()
		return len(in.logLines(run, "partitions assigned")) > 0, nil
	})
}

// killLeader kills the node leading a random partition of topic, waits a random moment and
// restarts it.
func (ch *chaos) killLeader(topic string) {
	ch.t.Helper()
	part := ch.rng.Int32N(ch.p.keys.Partitions)
	var node int32
	poll(ch.ctx, ch.t, "the leader of "+topic, 100*time.Millisecond, func() (bool, error) {
		n, err := ch.c.Leader(ch.ctx, ch.cl, topic, part)
		node = n
		return err == nil, nil
	})
	ch.killNode(node, fmt.Sprintf("leader of %s partition %d", short(topic), part))
}

// killController kills the active controller, waits a random moment and restarts it.
func (ch *chaos) killController() {
	ch.t.Helper()
	var node int32
	poll(ch.ctx, ch.t, "the active controller", 100*time.Millisecond, func() (bool, error) {
		n, err := ch.c.Controller(ch.ctx, ch.cl)
		node = n
		return err == nil, nil
	})
	ch.killNode(node, "active controller")
}

func (ch *chaos) killNode(node int32, what string) {
	ch.t.Helper()
	ch.c.Kill(node)
	ch.brokers++
	ch.event("broker kill -9 #%d: node %d (%s)", ch.brokers, node, what)
	ch.randomMoment()
	start := time.Now()
	ch.c.Restart()
	ch.t.Logf("node %d restarted in %v", node, time.Since(start).Round(time.Millisecond))
	for _, in := range ch.ins {
		in.checkAlive()
	}
}

// short trims a test topic name to its prefix for the log.
func short(topic string) string {
	if i := strings.IndexByte(topic, '-'); i > 0 {
		return topic[:i]
	}
	return topic
}

// aggLoad is the orders-totals aggregate of workload.Pipeline: orders in batches of
// workload.Spec, exact totals per key.
type aggLoad struct {
	keys   int
	specs  []workload.Spec // every batch produced outside the live traffic
	live   []workload.Spec // the live traffic's batches, once stopped
	seed   int64           // of the next batch
	branch bool            // a filter beside the aggregate on the orders (pipelineOpts.branch)
	big    string          // its sink topic
}

func (a *aggLoad) pipeline(t *testing.T, brokers string, o pipelineOpts) *pipeline {
	if a.branch {
		a.big = kafkatest.UniqueName(t, "big")
		o.branch = a.big
	}
	return newPipeline(t, brokers, o)
}

func (a *aggLoad) switchMsg() string { return "switch to real-time mode" }

func (a *aggLoad) produce(ch *chaos, n int) {
	ch.t.Helper()
	s := workload.Spec{Records: int64(n), Keys: a.keys, Partitions: chaosParts, Seed: 31 + a.seed}
	a.seed++
	if err := ch.p.produce(ch.ctx, s); err != nil {
		ch.t.Fatal(err)
	}
	a.specs = append(a.specs, s)
}

func (a *aggLoad) startTraffic(ch *chaos) func() {
	tr := ch.p.startTraffic(ch.ctx, a.keys, chaosParts)
	return func() { a.live = tr.stop(ch.t) }
}

// finish nudges partitions whose committed offset stands still (see waitCommitted).
func (a *aggLoad) finish(ch *chaos, in *instance) {
	ch.t.Helper()
	ch.p.waitCaughtUp(ch.ctx, 3*time.Minute, in)
}

// verify reads the sink with read_committed and demands exact totals; it counts lost and
// duplicated orders per key.
func (a *aggLoad) verify(ch *chaos, ids []string) int64 {
	t := ch.t
	t.Helper()
	specs := append(a.specs, a.live...)
	want := ch.p.expected(specs...)
	copies := inputCopies(ch.ctx, t, ch.p.brokers, ch.p.topic, ch.p.produced(specs...))
	for _, c := range copies {
		cents, err := orderCents(c.value)
		if err != nil {
			t.Fatal(err)
		}
		w := want[string(c.key)]
		w.SumCents += cents
		w.Count++
		want[string(c.key)] = w
	}
	got, err := workload.ReadTotals(ch.ctx, kafkatest.SplitBrokers(ch.p.brokers), ch.p.sink, "amount", "orders")
	if err != nil {
		t.Fatalf("reading totals: %v", err)
	}
	var records, lost, dup int64
	for k, w := range want {
		records += w.Count
		g := got[k]
		lost += max(w.Count-g.Count, 0)
		dup += max(g.Count-w.Count, 0)
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			dup += g.Count
		}
	}
	t.Logf("totals: %d orders over %d keys, lost %d, duplicated %d", records, len(want), lost, dup)
	if d := workload.Diff(want, got, 20); d != nil {
		diagnoseTotals(ch.ctx, t, ch.p.brokers, ch.p.topic, want, got)
		t.Fatalf("totals differ from expected (%d keys expected, %d read):\n%s", len(want), len(got), strings.Join(d, "\n"))
	}
	if a.branch {
		a.verifyBranch(ch, copies)
	}
	return records
}

// verifyBranch checks the filter beside the aggregate: its sink holds each order it keeps
// exactly once (order ids repeat across batches: they are counted).
func (a *aggLoad) verifyBranch(ch *chaos, copies []inputCopy) {
	t := ch.t
	t.Helper()
	n, lost, dup := checkKept(ch.ctx, t, ch.p.brokers, a.big, branchCents, copies, append(a.specs, a.live...)...)
	t.Logf("branch (filter beside the aggregate): %d orders kept, lost %d, duplicated %d", n, lost, dup)
	if lost+dup > 0 {
		t.Fatalf("the filter beside the aggregate: %d of %d orders lost, %d duplicated", lost, n, dup)
	}
}

// windowsLoad is the windows scenario's pipeline (tumbling windows of one second, emit final,
// stragglers that are late) fed by its timed orders: its verifier is the windows oracle.
type windowsLoad struct {
	ev   eventTime
	prod *kgo.Client // keeps each record's partition

	mu  sync.Mutex // guards gen: the live traffic and the test goroutine both draw orders
	gen *timedOrders
}

func newWindowsLoad(t *testing.T, keys int) *windowsLoad {
	ev := eventTime{window: 1000, grace: winGraceMS, maxDelay: winDelayMS}
	seed := testSeed(t)
	return &windowsLoad{ev: ev, gen: newTimedOrders(uint64(seed), keys, chaosParts, ev)}
}

func (w *windowsLoad) pipeline(t *testing.T, brokers string, o pipelineOpts) *pipeline {
	o.window = fmt.Sprintf("{tumbling: %dms, grace: %dms}", w.ev.window, w.ev.grace)
	o.watermark = fmt.Sprintf("{max_delay: %dms}", w.ev.maxDelay)
	o.emit = "final"
	return newPipeline(t, brokers, o)
}

func (w *windowsLoad) switchMsg() string { return "switch to real-time mode" }

// orders draws the next n orders (or closing ones), under the lock.
func (w *windowsLoad) orders(n int, closing bool) []*kgo.Record {
	w.mu.Lock()
	defer w.mu.Unlock()
	if closing {
		return w.gen.closing()
	}
	return w.gen.orders(n)
}

func (w *windowsLoad) client(ch *chaos) *kgo.Client {
	if w.prod == nil {
		w.prod = kafkatest.Client(ch.t, ch.c.Addrs, append(workload.ProducerOpts(), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	}
	return w.prod
}

func (w *windowsLoad) produce(ch *chaos, n int) {
	ch.t.Helper()
	if err := produceRecords(ch.ctx, w.client(ch), ch.p.topic, w.orders(n, false)); err != nil {
		ch.t.Fatal(err)
	}
}

func (w *windowsLoad) startTraffic(ch *chaos) func() {
	ctx, cancel := context.WithCancel(ch.ctx)
	cl := w.client(ch)
	done := make(chan error, 1)
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			// A batch is produced whole; the stop waits for the one in flight.
			if err := produceRecords(context.WithoutCancel(ctx), cl, ch.p.topic, w.orders(200, false)); err != nil {
				done <- err
				return
			}
			select {
			case <-ctx.Done():
				done <- nil
				return
			case <-tick.C:
			}
		}
	}()
	return func() {
		cancel()
		if err := <-done; err != nil {
			ch.t.Fatalf("traffic: %v", err)
		}
	}
}

// finish produces one order per partition past its last window, which closes every other
// window, and waits without nudges: every partition's last order must be committed by itself.
func (w *windowsLoad) finish(ch *chaos, in *instance) {
	ch.t.Helper()
	if err := produceRecords(ch.ctx, w.client(ch), ch.p.topic, w.orders(0, true)); err != nil {
		ch.t.Fatal(err)
	}
	ch.p.waitCommitted(ch.ctx, 3*time.Minute, false, in)
}

// verify demands every (key, window) final exactly once with its exact sum and count, and every
// late record exactly once in the dead-letter topic, as the oracle computes them from the input
// read back (lateness follows its offsets).
func (w *windowsLoad) verify(ch *chaos, _ []string) int64 {
	t := ch.t
	t.Helper()
	input, err := readCommitted(ch.ctx, ch.p.brokers, ch.p.topic)
	if err != nil {
		t.Fatal(err)
	}
	want, err := windowOracle(input, w.ev)
	if err != nil {
		t.Fatal(err)
	}
	// Each order's value is unique (its id): a value read twice is a producer's resend across a
	// leader change (see inputCopies), which the oracle counts like any record.
	distinct := make(map[string]bool, len(input))
	for _, r := range input {
		distinct[string(r.Value)] = true
	}
	if len(distinct) != w.gen.produced {
		t.Fatalf("input holds %d distinct records, want the %d produced", len(distinct), w.gen.produced)
	}
	if n := len(input) - len(distinct); n > 0 {
		t.Logf("the input holds %d records twice (a producer's resend across a leader change); the oracle counts each copy", n)
	}
	if len(want.late) == 0 || want.open != chaosParts {
		t.Fatalf("the workload must have late records and exactly one open window per partition: %d late, %d open", len(want.late), want.open)
	}
	finals, err := readCommitted(ch.ctx, ch.p.brokers, ch.p.sink)
	if err != nil {
		t.Fatal(err)
	}
	if d := diffFinals(want, finals, w.ev, 20); d != nil {
		t.Errorf("windowed finals differ from the oracle (%d expected, %d read):\n%s", len(want.finals), len(finals), strings.Join(d, "\n"))
	}
	dlq, err := readCommitted(ch.ctx, ch.p.brokers, ch.p.group+"-dlq")
	if err != nil {
		t.Fatal(err)
	}
	if d := diffLate(want, dlq, ch.p.topic, 20); d != nil {
		t.Errorf("dead letters differ from the oracle's late records (%d expected, %d read):\n%s", len(want.late), len(dlq), strings.Join(d, "\n"))
	}
	if t.Failed() {
		ch.explainLoss(want, finals, dlq, w.ev)
	}
	t.Logf("windows: %d orders, %d (key, window) finals exactly once, %d late records exactly once in the DLQ", len(input), len(finals), len(dlq))
	return int64(len(input))
}

// joinLoad is the inner stream-table join of joinPipeline: the customers table is produced
// after the prefill of orders (every order must still find its row), orders come in batches of
// workload.Spec, and the verifier demands each order exactly once with its customer's row.
type joinLoad struct {
	aggLoad
	customers string
}

func (j *joinLoad) pipeline(t *testing.T, brokers string, o pipelineOpts) *pipeline {
	p, customers := joinPipeline(t, brokers, o.partitions, false)
	p.keys = workload.Spec{Keys: o.keys, Partitions: o.partitions}
	j.customers = customers
	return p
}

func (j *joinLoad) switchMsg() string { return "table snapshot loaded; its streams go on" }

// produce writes n orders; the first time, the customers table after them.
func (j *joinLoad) produce(ch *chaos, n int) {
	ch.t.Helper()
	j.aggLoad.produce(ch, n)
	if len(j.specs) == 1 {
		cl := kafkatest.Client(ch.t, ch.p.brokers, workload.ProducerOpts()...)
		if err := workload.ProduceEach(ch.ctx, cl, j.customers, j.specs[0].EachCustomer); err != nil {
			ch.t.Fatal(err)
		}
	}
}

// finish waits without nudges: a nudge's order is not in the workload.
func (j *joinLoad) finish(ch *chaos, in *instance) {
	ch.t.Helper()
	ch.p.waitCommitted(ch.ctx, 3*time.Minute, false, in)
}

func (j *joinLoad) verify(ch *chaos, _ []string) int64 {
	t := ch.t
	t.Helper()
	specs := append(j.specs, j.live...)
	var want int64
	for _, s := range specs {
		want += s.Records
	}
	var copied []string
	for _, c := range inputCopies(ch.ctx, t, ch.p.brokers, ch.p.topic, ch.p.produced(specs...)) {
		v, err := fastjson.ParseBytes(c.value)
		if err != nil {
			t.Fatal(err)
		}
		copied = append(copied, string(v.GetStringBytes("order_id")))
		want++
	}
	got, err := workload.VerifyJoinedCopies(ch.ctx, kafkatest.SplitBrokers(ch.p.brokers), ch.p.sink, "customers", copied, specs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("join output: %v", got)
	if !got.OK() || got.Orders != want {
		t.Fatalf("join output: %v; want each of the %d orders exactly once with its customer's row", got, want)
	}
	return want
}
