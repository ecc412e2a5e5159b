package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/consumer"
)

// cmdDemo runs the embedded default: an in-process broker, a generated backlog of orders, then
// live traffic, the example pipeline, and a line per second showing what happens; at the end it
// checks every customer's total against what was produced.
func cmdDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	duration := fs.Duration("duration", 30*time.Second, "how long to run (0: until Ctrl-C)")
	records := fs.Int64("records", 500_000, "orders in the initial backlog")
	keys := fs.Int("keys", 10_000, "distinct customers")
	rate := fs.Int("rate", 2000, "live orders per second after the backlog")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if *records < 0 || *keys < 1 || *rate < 0 {
		return &usageError{"--records and --rate must be >= 0, --keys >= 1"}
	}
	cfg, err := configs.Parse(configs.Demo, os.Environ())
	if err != nil {
		return err
	}
	if os.Getenv("SLUICE_PROCESSING__STATE_DIR") == "" {
		dir, err := os.MkdirTemp("", "sluice-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		cfg.Processing.StateDir = dir
	}
	if os.Getenv("SLUICE_BACKLOG__ENTER_LAG") == "" {
		// The demo's backlog is small; make it count as one.
		cfg.Backlog.EnterLag = 20000
	}
	log := newLogger(cfg, stderr)
	const topic, partitions = "orders", 8
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic))
	if err != nil {
		return fmt.Errorf("embedded broker: %w", err)
	}
	defer cluster.Close()
	cfg.Kafka.Brokers = cluster.ListenAddrs()
	sink := cfg.Sinks[cfg.Operators[0].Output].Topic

	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	fmt.Fprintf(stdout, "sluice demo: embedded broker %s; producing a backlog of %d orders over %d customers...\n", cfg.Kafka.Brokers[0], *records, *keys)
	prod, err := kgo.NewClient(append(workload.ProducerOpts(), kgo.SeedBrokers(cfg.Kafka.Brokers...))...)
	if err != nil {
		return err
	}
	defer prod.Close()
	backlog := workload.Spec{Records: *records, Keys: *keys, Partitions: partitions, Seed: 1}
	start := time.Now()
	if err := workload.Produce(ctx, prod, topic, backlog); err != nil {
		return fmt.Errorf("prefill: %w", err)
	}
	fmt.Fprintf(stdout, "backlog ready in %v; starting the pipeline (watch the switch from backlog to real-time)\n", time.Since(start).Round(time.Millisecond))
	if cfg.HTTP.Enabled() {
		fmt.Fprintf(stdout, "status: http://%s/status  metrics: http://%s/metrics\n", cfg.HTTP.Listen, cfg.HTTP.Listen)
	}

	engCh := make(chan *consumer.Engine, 1)
	pipeCtx, stopPipe := context.WithCancel(context.Background())
	defer stopPipe()
	pipeErr := make(chan error, 1)
	go func() {
		pipeErr <- runPipeline(pipeCtx, cfg, log, runOpts{started: func(e *consumer.Engine) { engCh <- e }})
	}()
	var eng *consumer.Engine
	select {
	case eng = <-engCh:
	case err := <-pipeErr:
		return err
	}

	// Live traffic: a second deterministic order stream, paced, with event times of now.
	live := workload.Spec{Records: 1 << 40, Keys: *keys, Partitions: partitions, Seed: 2, StartTS: time.Now().UnixMilli()}
	liveDone := make(chan int64, 1)
	go func() { liveDone <- produceLive(ctx, prod, topic, live, *rate) }()

	watch := newWatcher(cfg.Kafka.Brokers, sink)
	defer watch.close()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	t0 := time.Now()
	var lastIn int64
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err := <-pipeErr:
			return err
		case <-tick.C:
			in, lag, modes := summarize(eng)
			outs := watch.poll()
			line := fmt.Sprintf("[%5.1fs] in=%-9d rate=%-8d lag=%-8d tasks{%s} outputs=%d", time.Since(t0).Seconds(), in, in-lastIn, lag, modes, watch.n)
			if len(outs) > 0 {
				line += "  e.g. " + outs[len(outs)-1]
			}
			fmt.Fprintln(stdout, line)
			lastIn = in
		}
	}
	n := <-liveDone
	total := *records + n
	fmt.Fprintf(stdout, "stopping: %d live orders produced; waiting for the pipeline to commit all %d...\n", n, total)
	drained := time.After(30 * time.Second)
wait:
	for committedSum(eng) < total {
		select {
		case <-drained:
			break wait
		case err := <-pipeErr:
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
	stopPipe()
	if err := <-pipeErr; err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	// Verify: every customer's total equals the sum of what was produced. The pipeline committed
	// its last checkpoint on the way out; records after it were not processed, so compare only
	// when it caught up (the usual case). Exact decimal arithmetic: no tolerance.
	want := backlog.Expected()
	live.Records = n
	for k, t := range live.Expected() {
		w := want[k]
		w.SumCents += t.SumCents
		w.Count += t.Count
		want[k] = w
	}
	vctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := workload.ReadTotals(vctx, cfg.Kafka.Brokers, sink, "amount", "orders")
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if d := workload.Diff(want, got, 5); len(d) > 0 {
		fmt.Fprintf(stdout, "verify: %d customers differ from what was produced (was the pipeline still catching up?):\n  %s\n", len(d), strings.Join(d, "\n  "))
		return nil
	}
	fmt.Fprintf(stdout, "verify: all %d customers' totals equal exactly what was produced (%d orders)\n", len(want), *records+n)
	return nil
}

// produceLive produces live orders at rate per second until ctx is done; it returns how many
// were acknowledged (a prefix of spec's sequence).
func produceLive(ctx context.Context, cl *kgo.Client, topic string, spec workload.Spec, rate int) int64 {
	if rate <= 0 {
		return 0
	}
	var n int64
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	per := max(rate/100, 1)
	stop := errors.New("stop")
	budget := 0
	_ = spec.Each(func(key, value []byte, ts int64) error {
		for budget == 0 {
			select {
			case <-ctx.Done():
				return stop
			case <-tick.C:
				budget = per
			}
		}
		budget--
		r := &kgo.Record{Topic: topic, Key: append([]byte(nil), key...), Value: append([]byte(nil), value...), Timestamp: time.UnixMilli(ts)}
		cl.Produce(context.Background(), r, nil)
		n++
		return nil
	})
	fctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = cl.Flush(fctx)
	return n
}

// committedSum adds up the committed offsets of the input partitions (the input has no
// transaction markers, so it equals the number of records committed).
func committedSum(e *consumer.Engine) int64 {
	var n int64
	for _, t := range e.Status() {
		for _, c := range t.Chains {
			n += max(c.CommittedOffset, 0)
		}
	}
	return n
}

// summarize adds up the engine's tasks: records in, total lag, and modes.
func summarize(e *consumer.Engine) (in, lag int64, modes string) {
	count := map[string]int{}
	for _, t := range e.Status() {
		for _, c := range t.Chains {
			in += c.RecordsIn
			lag += c.Lag
			count[c.Mode]++
		}
	}
	var parts []string
	for m, n := range count {
		parts = append(parts, fmt.Sprintf("%s:%d", m, n))
	}
	sort.Strings(parts)
	return in, lag, strings.Join(parts, " ")
}

// watcher reads the output topic (read_committed) to show results as they change.
type watcher struct {
	cl *kgo.Client
	n  int64
}

func newWatcher(brokers []string, topic string) *watcher {
	cl, _ := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	return &watcher{cl: cl}
}

func (w *watcher) poll() []string {
	if w.cl == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	var out []string
	w.cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
		w.n++
		if len(out) < 3 {
			out = append(out, string(r.Value))
		}
	})
	return out
}

func (w *watcher) close() {
	if w.cl != nil {
		w.cl.Close()
	}
}
