package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

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
// kills (and a broker kill per round).
func TestChaos(t *testing.T) {
	c := kafkatest.StartCluster(t)
	size := chaosSize{prefill: 120_000, burst: 80_000, keys: 5_000, minKills: 0, timeout: 6 * time.Minute}
	if os.Getenv(envChaosLong) == "1" {
		size = chaosSize{prefill: 400_000, burst: 120_000, keys: 20_000, minKills: 30, timeout: 40 * time.Minute}
	}
	chaosScenario(t, c, size)
}

type chaosSize struct {
	prefill  int64 // orders before the first instance starts
	burst    int64 // orders produced while every instance is down, before the kill at the switch
	keys     int
	minKills int // keep going in rounds until this many instance kills
	timeout  time.Duration
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
	specs   []workload.Spec // every batch produced outside the live traffic
	seed    int64           // of the next such batch
	keys    int
	kills   int // SIGKILLs of sluice instances
	brokers int // SIGKILLs of broker nodes (controller included)
	events  []string
}

func chaosScenario(t *testing.T, c *kafkatest.Cluster, size chaosSize) {
	ctx, cancel := context.WithTimeout(t.Context(), size.timeout)
	defer cancel()
	const parts = 8
	seed := time.Now().UnixNano()
	t.Logf("random seed %d", seed)
	ch := &chaos{
		t:    t,
		ctx:  ctx,
		c:    c,
		rng:  rand.New(rand.NewPCG(uint64(seed), 11)),
		seed: 31,
		keys: size.keys,
		cl:   kafkatest.Client(t, c.Addrs),
	}
	ch.p = newPipeline(t, c.Addrs, pipelineOpts{partitions: parts, keys: size.keys, enterLag: 5000, exitLag: 500})
	ch.ins = []*instance{ch.p.newInstance("i0", true), ch.p.newInstance("i1", true), ch.p.newInstance("i2", true)}
	adm := ch.p.admin()
	watch := ch.p.watchOffsets(ctx, adm)

	ch.produce(size.prefill)
	i0 := ch.ins[0]
	i0.start()
	ch.killInBacklog(i0)

	tr := ch.p.startTraffic(ctx, size.keys, parts)
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
			in.term()
		}
		ch.events = append(ch.events, "scaled down to 1")
		if ch.kills >= size.minKills {
			break
		}
	}
	live := tr.stop(t)
	start := time.Now()
	ch.p.waitCaughtUp(ctx, 3*time.Minute, i0)
	t.Logf("caught up %v after the last fault", time.Since(start).Round(time.Millisecond))
	i0.term()
	if back := watch.stop(); len(back) > 0 {
		t.Errorf("committed input offsets went back: %v", back)
	}
	ids := []string{"i0", "i1", "i2"}
	want := ch.p.expected(append(ch.specs, live...)...)
	ch.verify(want, ids)
}

// produce writes n more orders (a new seed each time) and waits until every one is acknowledged.
func (ch *chaos) produce(n int64) {
	ch.t.Helper()
	s := workload.Spec{Records: n, Keys: ch.keys, Partitions: ch.p.keys.Partitions, Seed: ch.seed}
	ch.seed++
	if err := ch.p.produce(ch.ctx, s); err != nil {
		ch.t.Fatal(err)
	}
	ch.specs = append(ch.specs, s)
}

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
// backlog was sorted between two polls, just after its switch).
func (ch *chaos) killInBacklog(in *instance) {
	ch.t.Helper()
	how := "while in backlog"
	switches := len(in.logLines(0, "switch to real-time mode"))
	poll(ch.ctx, ch.t, in.id+" to report a task in backlog mode", 20*time.Millisecond, func() (bool, error) {
		in.checkAlive()
		if st, ok := in.status(ch.ctx); ok && st.backlogTasks() > 0 {
			return true, nil
		}
		if len(in.logLines(0, "switch to real-time mode")) > switches {
			how = "just after a switch from backlog"
			return true, nil
		}
		return false, nil
	})
	ch.kill(in, how)
}

// killAtSwitch kills every running instance, produces a burst larger than enter_lag on every
// partition, restarts them (every task starts in backlog mode) and kills the first instance that
// logs a switch to real-time mode, right then: its switch transaction holds every key it folded.
func (ch *chaos) killAtSwitch(burst int64) {
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
	ch.produce(burst)
	before := make([]int, len(running))
	for i, in := range running {
		before[i] = len(in.logLines(0, "switch to real-time mode"))
		in.start()
	}
	var victim *instance
	poll(ch.ctx, ch.t, "an instance to switch to real-time mode after the burst", 5*time.Millisecond, func() (bool, error) {
		for i, in := range running {
			in.checkAlive()
			if len(in.logLines(0, "switch to real-time mode")) > before[i] {
				victim = in
				return true, nil
			}
		}
		return false, nil
	})
	ch.kill(victim, "right at its switch to real-time mode")
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

// verify reads the sink with read_committed and demands exact totals and no open transaction;
// it prints the run's figures, lost and duplicated orders counted per key.
func (ch *chaos) verify(want map[string]workload.Total, ids []string) {
	t := ch.t
	t.Helper()
	ch.p.checkTransactions(ch.ctx, ids...)
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
	t.Logf("chaos figures: %d instance kills, %d broker kills, %d orders verified over %d keys, lost %d, duplicated %d",
		ch.kills, ch.brokers, records, len(want), lost, dup)
	t.Logf("chaos events:\n  %s", strings.Join(ch.events, "\n  "))
	if d := workload.Diff(want, got, 20); d != nil {
		t.Fatalf("totals differ from expected (%d keys expected, %d read):\n%s", len(want), len(got), strings.Join(d, "\n"))
	}
}
