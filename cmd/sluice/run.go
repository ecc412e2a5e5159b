package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/sluice-dev/sluice/operators"
	"github.com/sluice-dev/sluice/operators/avro"
	"github.com/twmb/franz-go/pkg/sr"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/consumer"
	"github.com/sluice-dev/sluice/dial"
	"github.com/sluice-dev/sluice/operators/plan"
	"github.com/sluice-dev/sluice/sorter"
	"github.com/sluice-dev/sluice/state"
)

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	path := configFlag(fs)
	bounded := fs.Bool("bounded", false, "process each input up to the end offsets it has now, close every window, commit and exit 0 (a batch job)")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if *path == "" {
		return &usageError{"run needs -c FILE"}
	}
	cfg, err := configs.Load(*path, os.Environ())
	if err != nil {
		return err
	}
	return runPipeline(ctx, cfg, newLogger(cfg, stderr), runOpts{bounded: *bounded})
}

// The soft memory limit (GOMEMLIMIT) is backlog.sort_memory, plus memBase, plus memPerPartition
// for every topic-partition the process consumes (memoryLimit). Beyond the sort budget the heap
// holds the records fetched and not yet processed, the records being decoded and produced, the
// re-keying and combining tables. The fetched records grow with the partitions: each task has a
// batch in hand and one queued (up to 2 MiB of a partition each, and as many again in franz-go's
// record structs for small records), so a pipeline of several stages, which reads its internal
// topics too, holds several times what a single stage does. A limit below the live heap does not
// save memory, it makes the collector run back to back: with the fixed 224 MiB of before, Nexmark
// q5 (24 partitions) took 1.3x the CPU it takes with 8 MiB a partition, q16 (48 partitions) 1.7x
// (BENCHMARKS.md, "Uncompressed batches, and a memory limit that grows with the partitions").
// 160 MiB + 8 partitions' 64 MiB is the 224 MiB that keeps the 10M-record / 5M-key backlog's
// peak RSS (509 MiB) within sort_memory + 256 MiB (BENCHMARKS.md, "The memory limit's allowance");
// Pebble's cache and memtables live outside the Go heap.
const (
	memBase         = 160 << 20
	memPerPartition = 8 << 20
)

// memoryLimit is the memory limit of a process with the sort budget sortMemory that consumes
// partitions topic-partitions.
func memoryLimit(sortMemory int64, partitions int) int64 {
	return sortMemory + memBase + int64(max(partitions, 0))*memPerPartition
}

// runOpts are the hooks demo and tests use around a pipeline run.
type runOpts struct {
	kafkaOpts []kgo.Opt
	started   func(*consumer.Engine) // called once the engine exists
	bounded   bool                   // sluice run --bounded
}

// runPipeline runs cfg's pipeline until ctx is done. It is the process composition: the
// embedded broker (if configured), the state store, the sort budget, the engine and the HTTP
// server, each a Run(ctx) in one errgroup.
func runPipeline(ctx context.Context, cfg *configs.Config, log *slog.Logger, ro runOpts) error {
	if ro.bounded && cfg.Backlog.Mode != configs.ModeAlways {
		// A bounded run is a batch job: every task starts in backlog mode, as with
		// backlog.mode=always (the mode policy's input, backlog.Options.Bounded); the
		// configuration keeps the mode it was given.
		log.Info("bounded run: backlog.mode=always", "configured", cfg.Backlog.Mode)
	}
	plan, err := plan.NewPlan(cfg)
	if err != nil {
		return err
	}
	if dial.Cleartext(cfg.Kafka) {
		log.Warn(cleartextWarning)
	}
	if cfg.Kafka.Embedded() {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(8, plan.Topics()...))
		if err != nil {
			return fmt.Errorf("embedded broker: %w", err)
		}
		defer c.Close()
		cfg.Kafka.Brokers = c.ListenAddrs()
		log.Info("embedded broker started", "addr", cfg.Kafka.Brokers)
	}
	var partitions func(int)
	if os.Getenv("GOMEMLIMIT") == "" {
		// The sort budget is live heap; Go's default pacing would let the heap reach twice the
		// live size. A soft limit keeps the process near sort_memory plus an allowance for the
		// records fetched (per partition consumed), decoded and produced; it follows the
		// assignment.
		partitions = func(n int) {
			limit := memoryLimit(int64(cfg.Backlog.SortMemory), n)
			debug.SetMemoryLimit(limit)
			log.Debug("memory limit set", "bytes", limit, "partitions", n)
		}
		partitions(0)
	}
	store, err := openState(cfg.Processing.StateDir, int64(cfg.Processing.MinFreeSpace), log)
	if err != nil {
		return err
	}
	defer store.Close()
	sortDir := filepath.Join(cfg.Processing.StateDir, "sort")
	if err := os.MkdirAll(sortDir, 0o755); err != nil {
		return fmt.Errorf("processing.state_dir %s: cannot create its sort dir: %w", cfg.Processing.StateDir, err)
	}
	if err := sorter.Clean(sortDir); err != nil {
		return fmt.Errorf("processing.state_dir %s: %w", cfg.Processing.StateDir, err)
	}
	values, encoders, err := schemaRegistry(ctx, cfg, log)
	if err != nil {
		return err
	}
	reg := newRegistry()
	eng, err := consumer.New(consumer.Options{
		Config: cfg, Plan: plan, Store: store, Values: values, Encoders: encoders,
		Budget:  sorter.NewBudget(int64(cfg.Backlog.SortMemory)),
		SortDir: sortDir, Registry: reg, Logger: log, KafkaOpts: ro.kafkaOpts, Bounded: ro.bounded,
		Partitions: partitions,
	})
	if err != nil {
		return err
	}
	if ro.started != nil {
		ro.started(eng)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		err := eng.Run(gctx)
		if ro.bounded && err == nil && gctx.Err() == nil {
			return errBoundedDone // the run ended by itself: stop the HTTP server too
		}
		return err
	})
	if cfg.HTTP.Enabled() {
		ln, err := net.Listen("tcp", cfg.HTTP.Listen)
		if err != nil {
			return fmt.Errorf("http.listen %s: %w", cfg.HTTP.Listen, err)
		}
		srv := &http.Server{Handler: httpHandler(eng, reg, cfg.HTTP.Pprof), ReadHeaderTimeout: 5 * time.Second}
		g.Go(func() error {
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
		g.Go(func() error {
			<-gctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return srv.Shutdown(sctx)
		})
		log.Info("http listening", "addr", ln.Addr().String())
	}
	if err := g.Wait(); !errors.Is(err, errBoundedDone) {
		return err
	}
	return nil
}

// cleartextWarning is logged by sluice run and printed by sluice validate for SASL PLAIN
// without TLS (dial.Cleartext).
const cleartextWarning = "kafka.sasl.mechanism is plain without kafka.tls: the password crosses the network readable by anyone on the path; enable kafka.tls, or use scram-sha-256/512"

// verifyLimit is the size of a store's tables up to which a start reads them all, so that damage
// at rest is found (and the store rebuilt) at start rather than by a read later, which fails the
// process and leaves the rebuild to the next start. Reading runs at about 250 MB/s (state
// package), so this costs a start at most about 2 s.
const verifyLimit = 512 << 20

// openState opens the state store in dir (processing.state_dir). A damaged store (state.ErrDamaged)
// is moved aside, with a warning, and an empty one opened: every task then restores its state
// from the changelog, as after a lost state dir. Any other error (a directory that cannot be
// created or written, a store locked by another process) is returned, naming the key and dir.
func openState(dir string, minFree int64, log *slog.Logger) (*state.DB, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("processing.state_dir %s: cannot create it: %w", dir, err)
	}
	// A 32 MiB block cache: Pebble's cache and memtables live outside the Go heap (and outside
	// the memory limit), within the process's sort_memory + 256 MiB target.
	if minFree == 0 {
		minFree = -1 // processing.min_free_space 0: no check
	}
	o := state.Options{Dir: dir, CacheSize: 32 << 20, VerifyLimit: verifyLimit, MinFreeBytes: minFree}
	store, err := state.Open(o)
	if errors.Is(err, state.ErrDamaged) {
		aside, merr := state.MoveAside(o)
		if merr != nil {
			return nil, fmt.Errorf("processing.state_dir %s: the store is damaged and cannot be moved aside: %w (damage: %v)", dir, merr, err)
		}
		log.Warn("state store damaged: moved aside; every task restores its state from the changelog", "state_dir", dir, "moved_to", aside, "damage", err.Error())
		store, err = state.Open(o)
	}
	if err != nil {
		return nil, fmt.Errorf("processing.state_dir %s: %w", dir, err)
	}
	return store, nil
}

// errBoundedDone ends a bounded run's errgroup once the engine has finished.
var errBoundedDone = errors.New("bounded run done")

func newLogger(cfg *configs.Config, w io.Writer) *slog.Logger {
	lv := slog.LevelInfo
	switch cfg.Log.Level {
	case "debug":
		lv = slog.LevelDebug
	case "warn":
		lv = slog.LevelWarn
	case "error":
		lv = slog.LevelError
	}
	o := &slog.HandlerOptions{Level: lv}
	if cfg.Log.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}

// schemaRegistry returns the decoder of format avro over the configured schema registry (nil
// when none is configured), and the encoders of the sinks of format avro by topic, their
// schemas registered (or found) under their subjects. Its waits for an unreachable registry end
// with ctx.
func schemaRegistry(ctx context.Context, cfg *configs.Config, log *slog.Logger) (operators.ValueDecoder, map[string]operators.ValueEncoder, error) {
	c := cfg.SchemaRegistry
	if !c.Enabled() {
		return nil, nil, nil
	}
	opts := []sr.ClientOpt{sr.URLs(c.URLs...), sr.HTTPClient(&http.Client{Timeout: c.Timeout}), sr.UserAgent("sluice/" + version)}
	switch {
	case c.BearerToken != "":
		opts = append(opts, sr.BearerToken(c.BearerToken))
	case c.Username != "" || c.Password != "":
		opts = append(opts, sr.BasicAuth(c.Username, c.Password))
	}
	cl, err := sr.NewClient(opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("schema_registry: %w", err)
	}
	reg := avro.NewRegistry(avro.Options{Fetcher: cl, Context: ctx, RetryTimeout: c.RetryTimeout, Log: log.With("component", "schema-registry")})
	encoders := map[string]operators.ValueEncoder{}
	for _, name := range slices.Sorted(maps.Keys(cfg.Sinks)) {
		s := cfg.Sinks[name]
		if s.Format != configs.FormatAvro {
			continue
		}
		subject, err := avro.Subject(s.SubjectStrategy, s.Topic, s.Schema)
		if err != nil {
			return nil, nil, fmt.Errorf("sinks.%s.schema: %w", name, err)
		}
		enc, err := reg.Encoder(subject, s.Schema)
		if err != nil {
			return nil, nil, fmt.Errorf("sinks.%s: %w", name, err)
		}
		encoders[s.Topic] = enc
	}
	return reg, encoders, nil
}
