package e2e

import (
	"context"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
	"github.com/sluice-dev/sluice/integration/kafkatest"
)

// TestExactlyOnceKill9 is the exactly-once scenario against the real broker: 300k orders over
// 5k keys, one then three instances, SIGKILLs at random moments (one while tasks are in backlog
// mode), more orders produced while they run, and exact totals at the end.
func TestExactlyOnceKill9(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	kill9Scenario(t, brokers, kill9Size{first: 200_000, second: 100_000, keys: 5_000})
}

// TestExactlyOnceKill9Fake is TestExactlyOnceKill9, smaller, against an in-process kfake
// cluster that the sluice subprocesses reach over loopback; it runs without the real broker.
func TestExactlyOnceKill9Fake(t *testing.T) {
	brokers := kafkatest.Fake(t, 8)
	kill9Scenario(t, brokers, kill9Size{first: 40_000, second: 20_000, keys: 1_000})
}

// TestExactlyOnceKill9BacklogCheckpoints is the kill -9 scenario with backlog checkpoints every
// 10ms: kills land between backlog checkpoints (state folded, offsets committed, outputs still
// due) and the switch, and every key's final output must still be exact.
func TestExactlyOnceKill9BacklogCheckpoints(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	kill9Scenario(t, brokers, kill9Size{first: 200_000, second: 50_000, keys: 5_000,
		env: []string{"SLUICE_BACKLOG__CHECKPOINT_INTERVAL=10ms"}})
}

// TestExactlyOnceKill9OutputChangelog is TestExactlyOnceKill9BacklogCheckpoints with the
// aggregate's results as its changelog (changelog: output): the states a moved partition's new
// owner restores, pending ones of backlog checkpoints included, come from the sink topic. Once,
// the first instance loses its state dir with its process after a backlog checkpoint, so it
// restores every state, pending ones included, from the results.
func TestExactlyOnceKill9OutputChangelog(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	kill9Scenario(t, brokers, kill9Size{first: 200_000, second: 50_000, keys: 5_000,
		env: []string{"SLUICE_BACKLOG__CHECKPOINT_INTERVAL=10ms"}, changelog: "output", loseState: true})
}

type kill9Size struct {
	first, second int64 // orders before the first start, and while instances run
	keys          int
	env           []string // extra settings for every instance
	changelog     string   // the aggregate's changelog ("": topic)
	loseState     bool     // phase 1 also kills the first instance after a backlog checkpoint and deletes its state dir
}

func kill9Scenario(t *testing.T, brokers string, size kill9Size) {
	ctx, cancel := context.WithTimeout(t.Context(), 170*time.Second)
	defer cancel()
	const parts = 8
	first := workload.Spec{Records: size.first, Keys: size.keys, Partitions: parts, Seed: 21}
	second := workload.Spec{Records: size.second, Keys: size.keys, Partitions: parts, Seed: 22}
	rng := rand.New(rand.NewPCG(uint64(testSeed(t)), 7))

	p := newPipeline(t, brokers, pipelineOpts{partitions: parts, keys: size.keys, enterLag: 5000, exitLag: 500, extraEnv: size.env, changelog: size.changelog})
	if err := p.produce(ctx, first); err != nil {
		t.Fatal(err)
	}
	ins := []*instance{p.newInstance("i0", true), p.newInstance("i1", true), p.newInstance("i2", true)}
	k := &killer{ctx: ctx, t: t, rng: rng}
	killRestart, randomMoment := k.killRestart, k.randomMoment

	// Phase 1: one instance, more orders per partition than enter_lag: tasks start in backlog.
	// Kill it as soon as /status shows a task sorting in backlog mode, so that backlog is lost
	// (the kfake variant's ~5k orders per partition may switch first: the kill lands just after).
	i0 := ins[0]
	i0.start()
	killRestart(i0, k.inBacklog(i0))
	if size.loseState {
		poll(ctx, t, "i0 to log a backlog checkpoint", 10*time.Millisecond, func() (bool, error) {
			i0.checkAlive()
			return len(i0.logLines(0, "backlog checkpoint")) > 0, nil
		})
		i0.kill()
		if err := os.RemoveAll(i0.stateDir); err != nil {
			t.Fatal(err)
		}
		k.kills++
		t.Logf("kill -9 #%d: i0 (after a backlog checkpoint), its state dir deleted", k.kills)
		i0.start()
	}
	randomMoment()
	killRestart(i0, "random moment, phase 1")

	// Phase 2: three instances and live traffic.
	ins[1].start()
	ins[2].start()
	produced := make(chan error, 1)
	go func() { produced <- p.produce(ctx, second) }()
	for range 2 {
		randomMoment()
		killRestart(ins[rng.IntN(len(ins))], "random moment, phase 2")
	}
	// Produce returns once every record is acknowledged (bounded by ctx).
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	randomMoment()
	killRestart(ins[rng.IntN(len(ins))], "random moment, after producing")

	start := time.Now()
	p.waitCaughtUp(ctx, 120*time.Second, ins...)
	t.Logf("caught up %v after the last kill; %d kills in total", time.Since(start).Round(time.Millisecond), k.kills)
	// Backlog mode and the switch must really have happened (enter_lag 5000 is far below the
	// prefill per partition).
	var toBacklog, toRealTime, backlogCkpts int
	for _, in := range ins {
		toBacklog += len(in.logLines(0, "switch to backlog mode"))
		toRealTime += len(in.logLines(0, "switch to real-time mode"))
		backlogCkpts += len(in.logLines(0, "backlog checkpoint"))
	}
	t.Logf("mode switches logged: %d to backlog, %d to real-time; %d backlog checkpoints", toBacklog, toRealTime, backlogCkpts)
	if toRealTime == 0 {
		t.Errorf("no instance logged \"switch to real-time mode\": the backlog path was not exercised")
	}
	if len(size.env) > 0 && backlogCkpts == 0 {
		t.Errorf("backlog checkpoints were configured but none was logged")
	}
	if size.changelog != "" {
		// A partition's new owner restored states from the results (records 0: nothing to).
		restored := 0
		for _, in := range ins {
			for _, l := range in.logLines(0, "state restored") {
				if n, _ := l["records"].(float64); n > 0 {
					restored++
				}
			}
		}
		t.Logf("restores that replayed records of the sink topic: %d", restored)
		if restored == 0 {
			t.Errorf("no restore replayed a record: the restore from the results was not exercised")
		}
	}
	ids := termAll(ins)
	p.verify(ctx, p.expected(first, second), ids...)
}
