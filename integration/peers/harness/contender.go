package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
)

// doneRule says how the harness knows a contender has caught up.
type doneRule int

const (
	// doneExit: a bounded job; caught up when the process exits 0.
	doneExit doneRule = iota
	// doneGroup: a long-running consumer; caught up when its group's committed offsets reach
	// the input's end offsets. It is then stopped with SIGTERM.
	doneGroup
)

// launch is what a contender needs to start one run.
type launch struct {
	in, out string // input and output topics
	table   string // join: the table's topic
	group   string // consumer group / application id / transactional id prefix
	dir     string // a fresh directory for this run's state and config
	// enterLag and exitLag are sluice's backlog.enter_lag and exit_lag for this run.
	enterLag, exitLag int64
	// commit is sluice's commit settings for this run; zero: -sluice-commit-interval and
	// -sluice-commit-on-catch-up.
	commit variant
}

// variant is one setting of sluice's commits: processing.commit_interval and
// processing.commit_on_catch_up, and the backlog.mode it runs with.
type variant struct {
	interval time.Duration
	catchUp  bool
	never    bool // backlog.mode never (pure streaming) instead of auto
}

// mode is the variant's backlog.mode.
func (v variant) mode() string {
	if v.never {
		return "never"
	}
	return "auto"
}

// name is the variant's contender name: sluice-<mode>-<interval>[-catchup].
func (v variant) name() string {
	n := "sluice-" + v.mode() + "-" + yamlDuration(v.interval)
	if v.catchUp {
		n += "-catchup"
	}
	return n
}

// String is the variant's settings, for the report.
func (v variant) String() string {
	return fmt.Sprintf("commit_interval %s, commit_on_catch_up %t", yamlDuration(v.interval), v.catchUp)
}

// parseVariants parses -sluice-variants: comma-separated commit intervals, each optionally
// preceded by never: (backlog.mode never) and followed by +catchup.
func parseVariants(s string) ([]variant, error) {
	var out []variant
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		iv, never := strings.CutPrefix(f, "never:")
		iv, catchUp := strings.CutSuffix(iv, "+catchup")
		d, err := time.ParseDuration(iv)
		if err != nil || d < time.Millisecond || d%time.Millisecond != 0 {
			return nil, fmt.Errorf("%q: want a whole number of milliseconds (10ms, 1s), optionally never: before and +catchup after", f)
		}
		v := variant{interval: d, catchUp: catchUp, never: never}
		if slices.Contains(out, v) {
			return nil, fmt.Errorf("%q given twice", f)
		}
		out = append(out, v)
	}
	return out, nil
}

// contender is one system under test.
type contender struct {
	name    string // row label
	setup   string // settings, for the report
	done    doneRule
	latency bool // also measured in the real-time latency phase
	// argv returns the command line and extra environment of one run.
	argv func(l launch) (argv, env []string, err error)
}

// contenders returns every contender the harness knows, in report order.
func (h *harness) contenders() []contender {
	c := h.cfg
	javaCP := func(dir string) string {
		return filepath.Join(dir, "target", "classes") + string(os.PathListSeparator) + filepath.Join(dir, "target", "lib", "*")
	}
	windows := c.workload == "windows"
	sizeMS := strconv.FormatInt(c.windowSize.Milliseconds(), 10)
	// kstreams runs the Kafka Streams app; jvm are extra JVM flags (after -Xmx heap).
	kstreams := func(cacheBytes int64, commitMS int64, heap string, jvm ...string) func(l launch) ([]string, []string, error) {
		return func(l launch) ([]string, []string, error) {
			argv := append([]string{"java", "-Xmx" + heap}, jvm...)
			argv = append(argv, "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
				"-Djava.io.tmpdir="+l.dir,
				"-cp", javaCP(c.kstreamsDir), "dev.sluice.peers.kstreams.Main",
				c.brokers, l.in, l.out, l.group, strconv.FormatInt(cacheBytes, 10),
				strconv.Itoa(c.kstreamsThreads), strconv.FormatInt(commitMS, 10),
			)
			if windows {
				argv = append(argv, "windows", sizeMS, strconv.FormatInt(c.ksEmitInterval, 10))
			}
			return argv, nil, nil
		}
	}
	// flink runs the Flink app; jvm are extra JVM flags (after -Xmx heap).
	flink := func(mode, heap string, jvm ...string) func(l launch) ([]string, []string, error) {
		return func(l launch) ([]string, []string, error) {
			argv := append([]string{"java", "-Xmx" + heap, "@" + filepath.Join(c.flinkDir, "jvm.args")}, jvm...)
			argv = append(argv,
				"-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-Dorg.slf4j.simpleLogger.log.org.apache.flink.metrics=error",
				"-Djava.io.tmpdir="+l.dir,
				"-cp", javaCP(c.flinkDir), "dev.sluice.peers.flink.Main",
				c.brokers, l.in, l.out, l.group, mode, strconv.Itoa(c.flinkParallelism), "1000",
			)
			if windows {
				argv = append(argv, "windows", sizeMS)
			}
			return argv, nil, nil
		}
	}
	sluice := func(mode string, v variant) func(l launch) ([]string, []string, error) {
		return func(l launch) ([]string, []string, error) {
			l.commit = v
			if _, err := os.Stat(c.sluiceBin); err != nil {
				return nil, nil, fmt.Errorf("sluice binary not built: %w", err)
			}
			port, err := freePort()
			if err != nil {
				return nil, nil, err
			}
			stateDir := filepath.Join(l.dir, "state")
			cfgPath := filepath.Join(l.dir, "sluice.yaml")
			if err := os.WriteFile(cfgPath, []byte(sluiceConfig(c, l, mode, stateDir, port)), 0o644); err != nil {
				return nil, nil, fmt.Errorf("writing sluice config: %w", err)
			}
			return []string{c.sluiceBin, "run", "-c", cfgPath}, []string{
				"SLUICE_KAFKA__BROKERS=" + c.brokers,
				"SLUICE_GROUP=" + l.group,
				"SLUICE_BACKLOG__MODE=" + mode,
				"SLUICE_PROCESSING__STATE_DIR=" + stateDir,
			}, nil
		}
	}
	if c.workload == "join" {
		return h.joinContenders(javaCP(c.kstreamsDir), sluice("auto", variant{}))
	}
	self, _ := os.Executable()
	heapNote := "heap " + c.javaHeap
	tuned := h.tuning()
	// What each peer computes, for the settings column.
	ksWhat, flinkWhat, sluiceWhat := "", "", ""
	if windows {
		emit := fmt.Sprintf("emit interval %d ms", c.ksEmitInterval)
		if c.ksEmitInterval < 0 {
			emit = "default emit interval (1000 ms)"
		}
		ksWhat = fmt.Sprintf("windowedBy(TimeWindows.ofSizeAndGrace(%s, 0)).emitStrategy(onWindowClose()) (%s), ts extractor, ", yamlDuration(c.windowSize), emit)
		flinkWhat = fmt.Sprintf("event-time TumblingEventTimeWindows(%s), forMonotonousTimestamps on ts, ", yamlDuration(c.windowSize))
		sluiceWhat = fmt.Sprintf("window {tumbling: %s, grace: 0s}, emit: final, watermark max_delay 0s, ", yamlDuration(c.windowSize))
	}
	base := variant{interval: c.commitInterval, catchUp: c.commitOnCatchUp}
	commit := fmt.Sprintf("commit %d ms", c.commitInterval.Milliseconds())
	if c.commitOnCatchUp {
		commit += " and on catch-up"
	}
	all := []contender{
		{
			name:  "ceiling",
			setup: "franz-go group consumer, read_committed, reads and discards",
			done:  doneExit,
			argv: func(l launch) ([]string, []string, error) {
				return []string{self, "ceiling", "-brokers", c.brokers, "-topic", l.in, "-group", l.group}, nil, nil
			},
		},
		{
			name:    "kstreams",
			setup:   fmt.Sprintf("%sexactly_once_v2, commit 100 ms, cache 10 MiB (default), RocksDB, %d threads, %s", ksWhat, c.kstreamsThreads, heapNote),
			done:    doneGroup,
			latency: true,
			argv:    kstreams(10<<20, 100, c.javaHeap),
		},
		{
			name:  "kstreams-cache512",
			setup: fmt.Sprintf("%sexactly_once_v2, commit 100 ms, cache 512 MiB, RocksDB, %d threads, %s", ksWhat, c.kstreamsThreads, heapNote),
			done:  doneGroup,
			argv:  kstreams(512<<20, 100, c.javaHeap),
		},
		{
			name: "kstreams-tuned",
			setup: fmt.Sprintf("%sexactly_once_v2, commit %d ms (transaction.timeout.ms %d), cache %s, producer batch.size %d linger.ms %d compression %s, "+
				"RocksDB, %d threads, heap %s, ParallelGC", ksWhat, tuned.ksCommitMS, tuned.ksTxnTimeoutMS, mib(tuned.ksCacheBytes>>10),
				tuned.ksBatchBytes, tuned.ksLingerMS, tuned.ksCompression, c.kstreamsThreads, c.javaHeapTuned),
			done: doneGroup,
			argv: kstreams(tuned.ksCacheBytes, tuned.ksCommitMS, c.javaHeapTuned, tuned.kstreamsJVM()...),
		},
		{
			name:  "flink-streaming",
			setup: fmt.Sprintf("%sSTREAMING, parallelism %d, hashmap state, checkpoint 1 s, exactly-once sink, %s", flinkWhat, c.flinkParallelism, heapNote),
			done:  doneExit,
			argv:  flink("streaming", c.javaHeap),
		},
		{
			name:  "flink-batch",
			setup: fmt.Sprintf("%sBATCH, parallelism %d, at-least-once sink (no checkpoints in BATCH), %s", flinkWhat, c.flinkParallelism, heapNote),
			done:  doneExit,
			argv:  flink("batch", c.javaHeap),
		},
		{
			name: "flink-batch-tuned",
			setup: fmt.Sprintf("%sBATCH, parallelism %d, at-least-once sink, managed memory %s (taskmanager.memory.managed.size; local default 128 MiB), "+
				"object reuse, heap %s, ParallelGC", flinkWhat, c.flinkParallelism, mib(tuned.flinkManagedBytes>>10), c.javaHeapTuned),
			done: doneExit,
			argv: flink("batch", c.javaHeapTuned, tuned.flinkJVM()...),
		},
		{
			name:  "sluice-never",
			setup: sluiceWhat + "backlog.mode=never, exactly_once, " + commit,
			done:  doneGroup,
			argv:  sluice("never", base),
		},
		{
			name: "sluice-auto",
			setup: fmt.Sprintf("%sbacklog.mode=auto (enter_lag %d, exit_lag %d, sort_memory %s; latency phase: enter_lag %d, exit_lag %d), exactly_once, %s",
				sluiceWhat, c.enterLag, c.exitLag, c.sortMemory, c.latEnterLag, c.latExitLag, commit),
			done:    doneGroup,
			latency: true,
			argv:    sluice("auto", base),
		},
	}
	for _, v := range c.variants {
		setup := fmt.Sprintf("%sbacklog.mode=auto (enter_lag %d, exit_lag %d, sort_memory %s; latency phase: enter_lag %d, exit_lag %d), exactly_once, %s",
			sluiceWhat, c.enterLag, c.exitLag, c.sortMemory, c.latEnterLag, c.latExitLag, v)
		if v.never {
			setup = fmt.Sprintf("%sbacklog.mode=never, exactly_once, %s", sluiceWhat, v)
		}
		all = append(all, contender{
			name:    v.name(),
			setup:   setup,
			done:    doneGroup,
			latency: true,
			argv:    sluice(v.mode(), v),
		})
	}
	return all
}

// tuning is the settings of the throughput-tuned Java contenders (issue 21).
type tuning struct {
	ksCommitMS, ksTxnTimeoutMS int64
	ksCacheBytes               int64 // statestore.cache.max.bytes
	ksBatchBytes, ksLingerMS   int64
	ksCompression              string
	flinkManagedBytes          int64 // taskmanager.memory.managed.size (off-heap)
}

// tuning sizes the tuned contenders for the run: Kafka Streams commits every 30 s (its
// transactions may then stay open that long, so their timeout is 60 s; the broker allows up to
// 15 min), with a record cache of ~200 bytes per key, at least 512 MiB and at most half the
// tuned heap, and 512 KiB lz4 producer batches; Flink BATCH gets a quarter of the tuned heap's
// size as managed memory (off-heap, on top of the heap) for its sorted keyed input.
func (h *harness) tuning() tuning {
	heap, _ := javaBytes(h.cfg.javaHeapTuned) // validated by parseFlags
	return tuning{
		ksCommitMS:        30_000,
		ksTxnTimeoutMS:    60_000,
		ksCacheBytes:      min(max(int64(h.cfg.keys)*200, 512<<20), heap/2),
		ksBatchBytes:      512 << 10,
		ksLingerMS:        100,
		ksCompression:     "lz4",
		flinkManagedBytes: max(heap/4, 128<<20),
	}
}

// kstreamsJVM is the JVM flags of kstreams-tuned: ParallelGC and its producer settings, which
// Main passes to Kafka Streams (peers.streams.*).
func (t tuning) kstreamsJVM() []string {
	return []string{
		"-XX:+UseParallelGC",
		"-Dpeers.streams.producer.transaction.timeout.ms=" + strconv.FormatInt(t.ksTxnTimeoutMS, 10),
		"-Dpeers.streams.producer.batch.size=" + strconv.FormatInt(t.ksBatchBytes, 10),
		"-Dpeers.streams.producer.linger.ms=" + strconv.FormatInt(t.ksLingerMS, 10),
		"-Dpeers.streams.producer.compression.type=" + t.ksCompression,
	}
}

// flinkJVM is the JVM flags of flink-batch-tuned: ParallelGC, object reuse and the managed
// memory, which Main sets in the job (peers.flink.*).
func (t tuning) flinkJVM() []string {
	return []string{
		"-XX:+UseParallelGC",
		"-Dpeers.flink.objectReuse=true",
		"-Dpeers.flink.conf.taskmanager.memory.managed.size=" + strconv.FormatInt(t.flinkManagedBytes>>20, 10) + "m",
	}
}

// joinContenders returns the contenders of the join workload: Kafka Streams' KStream#join(KTable)
// with its defaults and with max.task.idle.ms, and sluice (backlog.mode auto). Flink is not one
// (integration/peers/README.md says why).
func (h *harness) joinContenders(kstreamsCP string, sluiceAuto func(l launch) ([]string, []string, error)) []contender {
	c := h.cfg
	kstreams := func(idle string) func(l launch) ([]string, []string, error) {
		return func(l launch) ([]string, []string, error) {
			return []string{
				"java", "-Xmx" + c.javaHeap, "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
				"-Djava.io.tmpdir=" + l.dir,
				"-cp", kstreamsCP, "dev.sluice.peers.kstreams.Main",
				c.brokers, l.in, l.out, l.group, strconv.Itoa(10 << 20),
				strconv.Itoa(c.kstreamsThreads), "100", "join", l.table, idle,
			}, nil, nil
		}
	}
	what := fmt.Sprintf("stream(%s).join(table(%s)) inner, record timestamps", c.topic, c.tableTopic)
	return []contender{
		{
			name: "kstreams",
			setup: fmt.Sprintf("%s, max.task.idle.ms 0 (default), exactly_once_v2, commit 100 ms, cache 10 MiB (default), RocksDB, %d threads, heap %s",
				what, c.kstreamsThreads, c.javaHeap),
			done: doneGroup,
			argv: kstreams("default"),
		},
		{
			name: "kstreams-idle",
			setup: fmt.Sprintf("%s, max.task.idle.ms %d, exactly_once_v2, commit 100 ms, cache 10 MiB (default), RocksDB, %d threads, heap %s",
				what, c.ksIdleMS, c.kstreamsThreads, c.javaHeap),
			done: doneGroup,
			argv: kstreams(strconv.FormatInt(c.ksIdleMS, 10)),
		},
		{
			name: "sluice-auto",
			setup: fmt.Sprintf("join {stream: orders, table: %s, type: inner}, backlog.mode=auto (enter_lag %d, exit_lag %d, sort_memory %s), exactly_once, commit 100 ms",
				joinTable, c.enterLag, c.exitLag, c.sortMemory),
			done: doneGroup,
			argv: sluiceAuto,
		},
	}
}

// sluiceConfig is DESIGN.md's minimal pipeline pointed at the run's topics (with -workload
// windows: the same aggregate in tumbling windows, emit: final; with -workload join: the orders
// joined with the customers table).
func sluiceConfig(c *config, l launch, mode, stateDir string, httpPort int) string {
	brokers := strings.Split(c.brokers, ",")
	v := l.commit
	if v.interval <= 0 {
		v = variant{interval: c.commitInterval, catchUp: c.commitOnCatchUp}
	}
	if v.interval <= 0 {
		v.interval = 100 * time.Millisecond
	}
	head := fmt.Sprintf(`kafka:
  brokers: [%s]
group: %s
instance_id: peers-0
processing: {guarantee: exactly_once, commit_interval: %s, commit_on_catch_up: %t, state_dir: %s}
backlog: {enter_lag: %d, exit_lag: %d, sort_memory: %s, checkpoint_interval: 0s, mode: %s}
http: {listen: 127.0.0.1:%d}
`, strings.Join(brokers, ", "), l.group, yamlDuration(v.interval), v.catchUp, stateDir, l.enterLag, l.exitLag, c.sortMemory, mode, httpPort)
	switch c.workload {
	case "windows":
		return head + windowsPipeline(l.in, l.out, c.windowSize)
	case "join":
		return head + joinPipeline(l.in, l.table, l.out)
	}
	return head + workload.Pipeline(l.in, l.out)
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
