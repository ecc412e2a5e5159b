// Package consumer is sluice's group member: it joins the consumer group, owns one task per
// assigned partition number of each group of co-partitioned topics (a stream and the tables it
// joins; any other topic alone) (a goroutine started on assignment, joined on revocation or loss),
// feeds the tasks the fetched records with the lag each fetch reports, and drives checkpoints.
//
// Goroutines (see DESIGN.md for the whole map):
//   - the poll loop (Engine.Run): polls, dispatches batches to task goroutines through bounded
//     channels, and runs every checkpoint: it is the only goroutine that begins and ends
//     transactions, so a checkpoint never overlaps a poll; a waker per poll ends the poll's wait
//     when a task asks for a checkpoint, finishes its inputs or stops holding a backlog;
//   - one goroutine per task: restores the task's state from its changelog, then processes
//     batches, and takes part in checkpoints (it writes its records into the open transaction and
//     waits for the outcome before it processes more);
//   - franz-go's own goroutines, which call the rebalance callbacks (they only start or stop task
//     goroutines; they wait for the poll loop only while it applies a checkpoint's outcome
//     and rewind, Engine.outcome, which can overlap a callback only after a slow transaction
//     end let a rebalance run). The first assignment of each session asks franz-go to rejoin
//     once (Engine.assigned): a static member's restart replaces it without a rebalance, and
//     the group would not assign partitions a killed predecessor had revoked.
//
// Checkpoints come processing.commit_interval apart, or backlog.commit_interval while every
// task holds a backlog (Engine.interval), and whenever a task asks for one.
//
// A checkpoint is a barrier: every task writes what it has processed, the poll loop flushes,
// commits each task's offsets in the same transaction (with, for a topic several chains read,
// each chain's progress as the offset's metadata, read back when a task starts), and tells
// every task the outcome. On an
// abort every task rewinds to its last commit and the consumer seeks back; a task that is sorting
// a backlog and had nothing in the transaction keeps its sorted records and resumes after them.
package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/changelog"
	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/dial"
	"github.com/sluice-dev/sluice/operators"
	"github.com/sluice-dev/sluice/operators/plan"
	"github.com/sluice-dev/sluice/operators/task"
	"github.com/sluice-dev/sluice/producer"
	"github.com/sluice-dev/sluice/sorter"
	"github.com/sluice-dev/sluice/state"
)

// Options configure an Engine.
type Options struct {
	Config   *configs.Config
	Plan     *plan.Plan
	Store    state.Store
	Budget   *sorter.Budget
	SortDir  string
	Registry prometheus.Registerer
	Logger   *slog.Logger
	Clock    func() time.Time // wall clock: commit interval, time lag, durations; nil means time.Now
	// Values decodes the values of sources and tables of another format than JSON (format
	// avro: an operators/avro.Registry); shared by every task, so safe for concurrent use.
	Values operators.ValueDecoder
	// Encoders encode the values produced to sinks of another format than JSON, by topic
	// (format avro: operators/avro.Encoder); safe for concurrent use.
	Encoders map[string]operators.ValueEncoder
	// KafkaOpts are extra franz-go options for every client (tests: fault injection), after the
	// connection options Run builds from Config.Kafka with dial.Opts (brokers, TLS, SASL).
	KafkaOpts []kgo.Opt
	// Bounded makes a run a batch job (sluice run --bounded): each input partition is processed
	// up to the end offset (last stable offset) it had when Run started, its end is the end of
	// its event time (every window closes), and Run returns nil once every assigned task has
	// committed its end. Every task starts in backlog mode, as with backlog.mode always
	// (task.Deps.Bounded), whatever Config says.
	Bounded bool
	// Partitions, if set, is called with the number of topic-partitions the member consumes
	// (tables included) after each change of its assignment (sluice run: the memory limit).
	// It is called from the group's callbacks, without the engine's locks held.
	Partitions func(n int)
}

// Engine runs a pipeline as one member of the group. Run is called once; Status and Ready are
// safe for concurrent use.
type Engine struct {
	o    Options
	log  *slog.Logger
	sess *producer.Session
	out  task.Producer // sess, encoding the values of sinks of another format (set with sess)
	adm  *kadm.Client
	rest *changelog.Restorer
	tm   *task.Metrics
	m    engineMetrics

	signals

	mu     sync.Mutex // guards runners, epoch
	runs   map[tp]*runner
	epoch  uint64 // bumped on every abort; batches from an older epoch are dropped
	joined bool

	// outcome is held while a checkpoint hands its outcome to the tasks and rewinds the
	// consumer after an abort (deliverOutcome, SetOffsets), and by the rebalance callbacks
	// (assigned, revoked): a rewind computed for a task must never reach the cursor of the
	// partition's next task. Rebalances normally wait for the poll loop (BlockRebalanceOnPoll),
	// but an End stuck for producer.endStuck lets them run during a checkpoint.
	outcome sync.Mutex

	boundedRun
	topology

	purge  purger          // repartition topics: committed records deleted (purge.go)
	runCtx context.Context // cancelled when Run returns (set by Run)

	fails failStreak // checkpoints aborted by produce errors (failure.go)
	kafka kafkaWait  // Kafka unreachable at start (connect.go)

	transientLogged time.Time // when the poll loop last logged a transient fetch error (poll loop only)

	// sessAssigned: the current session has had an assignment (assigned ran; reset when the
	// session restarts). fenceRejoins: sessions restarted because the member was fenced before
	// its first assignment (poll loop only; see fetchErr).
	sessAssigned atomic.Bool
	fenceRejoins int
}

// maxFenceRejoins bounds the sessions a process restarts because its member was fenced before
// its first assignment (fetchErr).
const maxFenceRejoins = 3

// signals are how the engine's goroutines tell the poll loop (and each other) what happened.
type signals struct {
	sessSet chan struct{} // closed once sess is set: rebalance callbacks may fire before Open returns
	urgent  chan struct{} // a task asks for a checkpoint now (mode switch, full cache)
	// wake ends the poll loop's wait for a fetch: a task asked for a checkpoint, or finished
	// its inputs (a bounded run's internal topic may end now), or a rebalance waits
	wake    chan struct{}
	folding atomic.Int32  // tasks folding a backlog ahead of a checkpoint (Task.Prepare)
	blocked chan struct{} // franz-go wants to rebalance
	failed  chan error    // a task goroutine failed
	broken  atomic.Bool   // fail was called: no transaction may commit any more (see checkpoint)
}

// boundedRun is a bounded run's state: per input partition, where it starts and ends (set
// before the group is joined; an internal topic's end is openEnd until closeInternal lists it).
type boundedRun struct {
	boundsMu sync.Mutex
	bounds   map[tp]bound
	waitLog  map[string]bool // internal topics whose writers another member runs (logged once)
}

// topology is what the engine knows of the pipeline's topics (immutable once the group is
// joined).
type topology struct {
	groups map[string][]string // a co-partitioned group's first topic -> its topics (immutable after New)
	group  map[string]string   // topic -> its group's first topic
	tables map[string]string   // table topic -> table name
	// internal: the repartition and output topics the pipeline writes and reads, with the input
	// topic whose partition count each takes (Plan.Repartitions; immutable after New), sorted
	// in internalSorted.
	internal       map[string]string
	internalSorted []string
	// internalParts: each internal topic's partition count (set by ensureTopics before the
	// group is joined, immutable after): tasks announce their mode to every partition.
	internalParts map[string]int32
}

type tp struct {
	topic string
	p     int32
}

// New validates options; it does not touch the network.
func New(o Options) (*Engine, error) {
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	e := &Engine{
		o:          o,
		log:        o.Logger,
		signals:    signals{sessSet: make(chan struct{}), urgent: make(chan struct{}, 1), wake: make(chan struct{}, 1), blocked: make(chan struct{}, 1), failed: make(chan error, 1)},
		runs:       map[tp]*runner{},
		tm:         task.NewMetrics(o.Registry),
		m:          newEngineMetrics(o.Registry),
		topology:   topology{groups: map[string][]string{}, group: map[string]string{}, tables: map[string]string{}},
		purge:      purger{topics: map[string]bool{}},
		boundedRun: boundedRun{waitLog: map[string]bool{}},
	}
	if o.Plan != nil { // nil: an engine that only registers its metrics (tests)
		e.tm.Declare(o.Plan)
		e.tables = o.Plan.TableTopics()
		e.internal = o.Plan.Repartitions()
		e.internalSorted = slices.Sorted(maps.Keys(e.internal))
		for topic := range e.internal {
			e.purge.topics[topic] = true
		}
		for _, g := range o.Plan.CoPartitioned() {
			e.groups[g[0]] = g
			for _, t := range g {
				e.group[t] = g[0]
			}
		}
	}
	return e, nil
}

// groupOf returns the first topic of topic's co-partitioned group (the key of its tasks).
func (e *Engine) groupOf(topic string) string {
	if g, ok := e.group[topic]; ok {
		return g
	}
	return topic
}

func (e *Engine) isTable(topic string) bool { _, ok := e.tables[topic]; return ok }

// Run joins the group and processes until ctx is done (then it checkpoints what it has
// processed, leaves, and returns nil) or a failure it cannot recover from. It first waits, with
// no bound, until a broker answers (connect.go).
func (e *Engine) Run(ctx context.Context) error {
	cfg := e.o.Config
	// Every client of the engine (admin and purger, group session, restores) starts from kafka:
	// one set of connection options.
	conn, err := dial.Opts(cfg.Kafka)
	if err != nil {
		return err
	}
	kafka := slices.Concat(conn, e.o.KafkaOpts)
	admCl, err := kgo.NewClient(kafka...)
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	defer admCl.Close()
	e.adm = kadm.NewClient(admCl)
	refused := func(err error) error {
		return fmt.Errorf("consumer: the connection to kafka %s failed its security handshake (%s; check kafka.tls and kafka.sasl): %w",
			strings.Join(cfg.Kafka.Brokers, ","), dial.Describe(cfg.Kafka), err)
	}
	if err := e.waitForKafka(ctx, admCl); err != nil {
		if ctx.Err() != nil {
			return nil // stopped while waiting: nothing was started
		}
		if dial.Refused(err) {
			return refused(err)
		}
		return err
	}
	limits, err := e.ensureTopics(ctx)
	if err != nil {
		if dial.Refused(err) { // the first requests: say which settings to check
			return refused(err)
		}
		return err
	}
	// The first transaction produces to them: a topic created a moment ago may not be served
	// by its leader yet (changelog.AwaitWritable).
	if !changelog.AwaitWritable(ctx, admCl, slices.Collect(maps.Keys(limits)), awaitWritable) {
		e.log.Debug("a topic's leader did not serve it yet; producing anyway", "waited", awaitWritable)
	}
	if e.o.Bounded {
		if e.bounds, err = e.listBounds(ctx); err != nil {
			return err
		}
	}
	checks, err := task.NewStateChecks(e.o.Plan)
	if err != nil {
		return err
	}
	e.rest = &changelog.Restorer{Brokers: cfg.Kafka.Brokers, Store: e.o.Store, Admin: e.adm, Logger: e.log, Opts: kafka,
		Valid: checks.Valid, Layout: checks.Layout, Accepted: checks.Accepted, Decode: checks.Decode, Gather: checks.Gather}

	g := producer.AtLeastOnce
	if cfg.Processing.Guarantee != "at_least_once" {
		g = producer.ExactlyOnce
	}
	defer e.purge.wait() // after cancelRuns below (deferred calls run last first)
	runCtx, cancelRuns := context.WithCancel(context.Background())
	defer cancelRuns()
	e.runCtx = runCtx
	extra := kafka
	if e.o.Bounded || len(e.tables) > 0 {
		// Transaction markers are kept to see where a batch really ends: a bounded run's end
		// offset, a table's snapshot end, may lie after the last record. dispatch drops them.
		extra = append([]kgo.Opt{kgo.KeepControlRecords()}, extra...)
	}
	popts := producer.Options{
		Brokers:            cfg.Kafka.Brokers,
		Group:              cfg.Group,
		InstanceID:         cfg.InstanceID,
		TransactionalID:    cfg.TransactionalID(),
		TransactionTimeout: cfg.Kafka.TransactionTimeout,
		Guarantee:          g,
		Topics:             e.o.Plan.Topics(),
		CoPartitioned:      e.o.Plan.CoPartitioned(),
		FetchMaxBytes:      int64(cfg.Kafka.FetchMaxBytes),
		Compression:        cfg.Kafka.Compression,
		Limits:             limits,
		Logger:             e.log,
		Extra: append([]kgo.Opt{
			kgo.OnPartitionsAssigned(func(_ context.Context, cl *kgo.Client, a map[string][]int32) { e.assigned(runCtx, cl, a) }),
			kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, r map[string][]int32) { e.revoked(r, "revoked") }),
			kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, l map[string][]int32) { e.revoked(l, "lost") }),
			kgo.OnPartitionsCallbackBlocked(func(context.Context, *kgo.Client) { signal(e.blocked); signal(e.wake) }),
		}, extra...),
	}
	for {
		e.sess, err = producer.Open(popts)
		if err != nil {
			return err
		}
		// A record too large for its topic becomes a dead letter (checked after the encoding:
		// on the bytes sent), never an aborted checkpoint.
		e.out = encoding(task.LimitSizes(e.sess, e.o.Plan, limits.BatchMaxBytes, e.tm), e.o.Encoders)
		close(e.sessSet)
		e.log.Info("joining group", "group", cfg.Group, "instance_id", cfg.InstanceID, "topics", e.o.Plan.Topics(), "guarantee", cfg.Processing.Guarantee)
		err = e.loop(ctx)
		if !errors.Is(err, producer.ErrSessionLost) || ctx.Err() != nil {
			break
		}
		e.restartSession(err)
	}
	// Shutdown: checkpoint what was processed (if the session is healthy), stop the tasks, leave.
	closeCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err == nil {
		if cerr := e.checkpoint(closeCtx); cerr != nil {
			err = cerr
		}
	}
	e.stopAll()
	if errors.Is(err, producer.ErrSessionLost) {
		e.sess.Abandon()
	} else if !e.sess.Close(closeCtx) {
		e.log.Warn("the Kafka client had not left the group in time (a rebalance in flight waits for a member that has stopped); exiting without waiting: the transaction has ended", "waited", producer.CloseWait)
	}
	return err
}

// restartSession abandons a lost session (a transaction's outcome unknown, or no producer id for
// the next one, for want of a broker), as a crash would, so that Run opens a new one: every task stops and drops what it holds (its state is
// applied only after a commit it heard of), the client closes without ending its transaction,
// and the new session's producer fences it (aborting it if it is still open). The new tasks
// restore from the changelog, which holds the lost transaction if it did commit, and resume
// from the offsets Kafka committed. Static membership gives them the same partitions back.
func (e *Engine) restartSession(cause error) {
	e.log.Warn("Kafka session lost (a broker could not be reached while a transaction ended or began); restarting it as after a crash", "err", cause)
	e.stopAll()
	e.sess.Abandon()
	e.m.sessionRestarts.Inc()
	e.mu.Lock()
	e.epoch++
	e.joined = false
	e.mu.Unlock()
	e.sessAssigned.Store(false)
	select {
	case <-e.failed: // the old tasks' errors (a begin refused after the failed end) go with them
	default:
	}
	// Set before the new client exists: its rebalance callbacks wait on it.
	e.sessSet = make(chan struct{})
}

func (e *Engine) loop(ctx context.Context) error {
	last := e.o.Clock() // when the last checkpoint ended (or the loop started)
	for {
		if err := e.sess.Begin(); err != nil {
			return err
		}
		// Asked again at every turn: a task that leaves its backlog shortens the wait at once.
		next := last.Add(e.interval())
		// The poll's timeout comes from the injected clock: the time left until next.
		wait := next.Sub(e.o.Clock())
		if e.folding.Load() > 0 && wait <= 0 {
			wait = foldPoll // a checkpoint waits for the fold: poll on meanwhile
		}
		pollCtx, cancel := context.WithTimeout(ctx, wait)
		go func() {
			// A checkpoint asked for, or a bounded run's stage done, is served now rather
			// than when the wait ends (up to commit_interval later, at every stage of a
			// pipeline run as a batch job).
			select {
			case <-e.wake:
				cancel()
			case <-pollCtx.Done():
			}
		}()
		fs := e.sess.Poll(pollCtx)
		cancel()
		if ctx.Err() != nil {
			e.sess.AllowRebalance()
			return nil
		}
		if err := e.fetchErr(fs); err != nil {
			e.sess.AllowRebalance()
			return err
		}
		e.mu.Lock()
		e.joined = true
		e.mu.Unlock()
		due, err := e.dispatch(ctx, fs, next)
		if err != nil {
			e.sess.AllowRebalance()
			return err
		}
		// Caught up (processing.commit_on_catch_up): the fetch read to the end of every
		// partition it returned, so a checkpoint now costs no throughput and makes the outputs
		// visible a fetch after their inputs rather than up to commit_interval later. The
		// checkpoint waits for the tasks to process the fetch (its barrier), then commits.
		if e.o.Config.Processing.CommitOnCatchUp && caughtUp(fs, e.isTable) {
			due = true
		}
		// No checkpoint starts while a task folds a backlog: the fold's records are in the open
		// transaction, and the barrier would hold every other task for the fold's duration.
		// (One that started before the fold waits for it: the folding task replies after it.)
		if (due || !e.o.Clock().Before(next) || pending(e.urgent) || pending(e.blocked)) && e.folding.Load() == 0 {
			drain(e.urgent)
			drain(e.blocked)
			if err := e.checkpoint(ctx); err != nil {
				e.sess.AllowRebalance()
				return err
			}
			last = e.o.Clock()
		}
		e.sess.AllowRebalance()
		select {
		case err := <-e.failed:
			return err
		default:
		}
		if e.o.Bounded && e.finished() {
			e.log.Info("bounded run: every input partition reached the end offset it had at start; exiting")
			return nil
		}
		if e.o.Bounded {
			if err := e.closeInternal(ctx); err != nil {
				return err
			}
		}
	}
}

// caughtUp reports whether fs holds records of some input partition and ends every partition
// it holds records of at the partition's end (the last stable offset; one offset short of it
// counts too: the marker of the transaction that wrote the last record). Tables do not count.
func caughtUp(fs kgo.Fetches, isTable func(string) bool) bool {
	some, all := false, true
	fs.EachPartition(func(fp kgo.FetchTopicPartition) {
		if len(fp.Records) == 0 || isTable(fp.Topic) {
			return
		}
		some = true
		end := fp.LastStableOffset
		if end < 0 {
			end = fp.HighWatermark
		}
		if end-(fp.Records[len(fp.Records)-1].Offset+1) > 1 {
			all = false
		}
	})
	return some && all
}

// foldPoll is how often the poll loop looks again while a checkpoint waits for a fold.
const foldPoll = 20 * time.Millisecond

// settlePoll is how soon a bounded run looks again at an internal topic whose writers are done
// while their last transaction's markers are not all written (closeInternal).
const settlePoll = 10 * time.Millisecond

// dispatch hands every fetched partition to its task, in order. While a task's channel is full
// it still serves checkpoints (a task waiting for one would otherwise deadlock the loop). It
// reports whether a checkpoint is due.
func (e *Engine) dispatch(ctx context.Context, fs kgo.Fetches, next time.Time) (bool, error) {
	now := e.o.Clock()
	due := false
	timer := time.NewTimer(next.Sub(now))
	defer timer.Stop()
	var derr error
	// Every batch of this fetch belongs to the epoch it was polled in: if a checkpoint aborts
	// while the fetch is being dispatched, the consumer is rewound and the rest of the fetch is
	// stale (dispatching it under the new epoch would count its records twice).
	e.mu.Lock()
	epoch := e.epoch
	owners := maps.Clone(e.runs)
	e.mu.Unlock()
	// Tables first: a stream batch is processed after every table batch fetched with it.
	var parts []kgo.FetchTopicPartition
	fs.EachPartition(func(fp kgo.FetchTopicPartition) {
		if e.isTable(fp.Topic) {
			parts = append(parts, fp)
		}
	})
	fs.EachPartition(func(fp kgo.FetchTopicPartition) {
		if !e.isTable(fp.Topic) {
			parts = append(parts, fp)
		}
	})
	for _, fp := range parts {
		if derr != nil {
			break
		}
		e.dispatchPartition(ctx, fp, epoch, owners, timer, &due, &derr)
	}
	return due, derr
}

// dispatchPartition hands one fetched partition to its task (see dispatch). owners are the
// tasks when the fetch was polled: a partition whose task has changed since is not handed on.
// (Rebalances wait for the poll loop, but a checkpoint this dispatch ran, whose end took
// producer.endStuck, lets one run: the records were fetched for the old task, from where it
// stood, and the new task starts from the committed offset. Handed to it, they would be its
// first records, and it would skip those before them.)
func (e *Engine) dispatchPartition(ctx context.Context, fp kgo.FetchTopicPartition, epoch uint64, owners map[tp]*runner, timer *time.Timer, due *bool, derr *error) {
	now := e.o.Clock()
	func() {
		if len(fp.Records) == 0 {
			return
		}
		e.mu.Lock()
		k := tp{e.groupOf(fp.Topic), fp.Partition}
		r := e.runs[k]
		if was := owners[k]; e.epoch != epoch || was != nil && r != was {
			r = nil
		}
		if r != nil {
			if _, ok := r.first[fp.Topic]; !ok {
				r.first[fp.Topic] = fp.Records[0].Offset
			}
		}
		e.mu.Unlock()
		if r == nil {
			return // revoked meanwhile, or stale after an abort
		}
		end := fp.LastStableOffset
		if end < 0 {
			end = fp.HighWatermark
		}
		recs := fp.Records
		firstOff, lastOff := recs[0].Offset, recs[len(recs)-1].Offset
		reached, open := false, false
		if e.o.Bounded {
			// A bounded run reads up to the end offset each partition had at start. It keeps
			// transaction markers (KeepControlRecords) so that it sees when it reaches an end
			// that lies after the last record, then drops them: tasks get data records only.
			bd, _ := e.bound(tp{fp.Topic, fp.Partition})
			open = bd.end == openEnd
			end = min(end, bd.end)
			n := len(recs)
			for n > 0 && recs[n-1].Offset >= bd.end {
				n--
			}
			if n == 0 {
				return
			}
			lastOff = recs[n-1].Offset
			reached = lastOff+1 >= bd.end
			recs = recs[:n]
		}
		if e.o.Bounded || len(e.tables) > 0 {
			// Transaction markers (KeepControlRecords) tell where the batch ends; tasks get
			// data records only.
			if slices.ContainsFunc(recs, func(r *kgo.Record) bool { return r.Attrs.IsControl() }) {
				recs = slices.DeleteFunc(slices.Clone(recs), func(r *kgo.Record) bool { return r.Attrs.IsControl() })
			}
			// A batch of markers only still moves the task's position on an internal topic that
			// has not ended yet: when it ends, the task knows whether it is there.
			if len(recs) == 0 && !reached && !open && !e.isTable(fp.Topic) {
				return
			}
		}
		// Lag is what is left to process: before the batch (the batch itself plus what lies
		// beyond it), which decides the mode the batch runs in, and after it, which lets a task
		// leave backlog when the input stops.
		b := batch{
			topic: fp.Topic, next: lastOff + 1,
			recs: recs, epoch: epoch, end: reached,
			lag: max(end-firstOff, 0), lagAfter: max(end-(lastOff+1), 0),
		}
		if len(recs) > 0 {
			b.timeLag = max(now.Sub(recs[0].Timestamp), 0)
			b.timeLagAfter = max(now.Sub(recs[len(recs)-1].Timestamp), 0)
		}
		for {
			select {
			case r.in <- b:
				return
			case <-r.done:
				return
			case <-timer.C:
				*due = true
			case <-e.urgent:
			case <-e.blocked:
			case err := <-e.failed:
				*derr = err
				return
			case <-ctx.Done():
				*derr = nil
				return
			}
			// A checkpoint is needed while this task's channel is full (not while a task
			// folds: the folding task signals urgent when it is done).
			if e.folding.Load() > 0 {
				timer.Reset(foldPoll)
				continue
			}
			if err := e.checkpoint(ctx); err != nil {
				*derr = err
				return
			}
			e.mu.Lock()
			stale := e.epoch != epoch
			e.mu.Unlock()
			if stale {
				return // aborted: the consumer was rewound; this batch will be fetched again
			}
			timer.Reset(e.interval())
		}
	}()
}

// interval is the time from one checkpoint to the next: backlog.commit_interval while every
// task holds a backlog (task.Task.Backlogged: no output waits on a real-time checkpoint, and a
// checkpoint stops every task at its barrier), processing.commit_interval otherwise (or while a
// task is not restored yet, or none is assigned).
func (e *Engine) interval() time.Duration {
	rt, bl := e.o.Config.Processing.CommitInterval, e.o.Config.Backlog.CommitInterval
	if bl <= rt {
		return rt
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range e.runs {
		if !r.isRestored() || !r.t.Backlogged() {
			return rt
		}
	}
	if len(e.runs) == 0 {
		return rt
	}
	return bl
}

// checkpoint runs one checkpoint across all restored tasks. Only the poll loop calls it. Once
// started, a checkpoint is finished (committed or aborted) even if ctx is cancelled meanwhile (a
// shutdown): it is bounded by the transaction timeout (or ctx's deadline, if sooner) instead,
// so a cancel never leaves its transaction half ended nor fails the shutdown that follows.
func (e *Engine) checkpoint(ctx context.Context) error {
	parent := ctx
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), e.o.Config.Kafka.TransactionTimeout)
	defer cancel()
	if d, ok := parent.Deadline(); ok {
		var cancelD context.CancelFunc
		ctx, cancelD = context.WithDeadline(ctx, d) // the shutdown checkpoint keeps Run's closing bound
		defer cancelD()
	}
	start := e.o.Clock()
	if err := e.sess.Begin(); err != nil {
		return err
	}
	e.m.checkpoints.Inc()
	// A transaction is open again when the checkpoint returns: tasks may produce between
	// checkpoints (stateless outputs).
	defer func() {
		if err := e.sess.Begin(); err != nil {
			e.fail(err)
		}
	}()
	e.mu.Lock()
	runs := make([]*runner, 0, len(e.runs))
	for _, r := range e.runs {
		if r.isRestored() {
			runs = append(runs, r)
		}
	}
	e.mu.Unlock()
	reqs := e.askCheckpoints(runs)
	offsets, meta, records, err := e.gatherCheckpoints(runs, reqs)
	if err != nil {
		return err
	}
	commit := true
	if err := e.sess.Flush(ctx); err != nil {
		return e.checkpointErr("flush", err)
	}
	var produceErr error // the first record of the checkpoint that could not be produced
	for _, q := range reqs {
		if q != nil && q.pd.Err() != nil {
			e.log.Warn("a record of the checkpoint failed; aborting it", "err", q.pd.Err(), "consecutive", e.fails.n+1)
			commit = false
			if produceErr == nil {
				produceErr = q.pd.Err()
			}
		}
	}
	if e.broken.Load() {
		// A task failed: records it produced into this transaction (a fold's, a stateless
		// chain's) have no offsets here to go with them, and committing them would write them
		// twice once a restart processes their inputs again. The engine is stopping: abort.
		commit = false
	}
	if commit && len(offsets) == 0 && e.o.Config.Processing.Guarantee == configs.ExactlyOnce && e.sess.Produced() {
		// A transaction with records but no offsets (mode announcements at start, timers on
		// idle input): franz-go ends one as if the broker lacked KIP-447 and holds its session
		// lock for 500 ms after it, which stalls the next checkpoint and every task waiting at
		// its barrier. Committing again an offset where a restart resumes anyway avoids that.
		offsets = e.standingOffset(runs)
	}
	committed, err := e.sess.EndWithMetadata(ctx, offsets, meta, commit)
	if err != nil {
		return e.checkpointErr("end transaction", err)
	}
	// Open the next transaction before any task hears the outcome: a task may produce as soon
	// as it has (a fold, stateless outputs).
	if err := e.sess.Begin(); err != nil {
		return err
	}
	if !committed && len(offsets)+records > 0 {
		e.m.aborts.Inc()
	}
	if !committed {
		e.mu.Lock()
		e.epoch++
		e.mu.Unlock()
	}
	if committed {
		e.noteCommitted(runs, reqs)
	}
	if err := e.applyOutcome(runs, reqs, committed); err != nil {
		return err
	}
	if committed {
		e.purge.committed(e.runCtx, e.adm, e.log, e.o.Clock(), offsets)
	}
	if committed && len(offsets)+records > 0 {
		e.m.commits.Inc()
		e.m.commitSeconds.Observe(e.o.Clock().Sub(start).Seconds())
		e.checkpointCommitted()
	}
	if produceErr != nil && !committed {
		return e.checkpointFailed(produceErr)
	}
	return nil
}

// applyOutcome tells the tasks the checkpoint's outcome and, after an abort, rewinds the
// consumer to where they say, under e.outcome: no rebalance callback runs in between, so each
// seek lands on the partition of the task that asked for it. (A task revoked meanwhile asked
// for nothing: deliverOutcome skips a task that is done. A seek that reached the next owner of
// its partition would start it past the committed offset: a backlog task's rewind is to after
// the records it keeps sorted, which the next owner does not have.)
func (e *Engine) applyOutcome(runs []*runner, reqs []*ckptReq, committed bool) error {
	e.outcome.Lock()
	defer e.outcome.Unlock()
	seeks, err := e.deliverOutcome(runs, reqs, committed)
	if err != nil {
		return err
	}
	if len(seeks) > 0 {
		e.log.Info("checkpoint aborted; rewinding to the last commit", "offsets", seeks)
		e.sess.Client().SetOffsets(seeks)
	}
	return nil
}

// noteCommitted records, per task, the offsets its committed checkpoint carried.
func (e *Engine) noteCommitted(runs []*runner, reqs []*ckptReq) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, r := range runs {
		if reqs[i] == nil || reqs[i].pd == nil {
			continue
		}
		for topic, off := range reqs[i].pd.Offsets {
			r.committed[topic] = off
		}
	}
}

// standingOffset returns one partition's offset that committing again changes nothing: where
// a restart resumes anyway (the offset this member last committed for it, else the first it
// dispatched since the assignment: the group's offset, or where the reset put it). Only a
// stream topic without branches qualifies: a branching topic's metadata carries its chains'
// progress, which an offset committed again would drop. Nil if no partition qualifies yet.
func (e *Engine) standingOffset(runs []*runner) map[string]map[int32]int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range runs {
		if !r.isRestored() {
			continue
		}
		for _, topic := range r.topics {
			if e.isTable(topic) || r.t.Branches(topic) {
				continue
			}
			off, ok := r.committed[topic]
			if !ok {
				off, ok = r.first[topic]
			}
			if ok && off >= 0 {
				return map[string]map[int32]int64{topic: {r.key.p: off}}
			}
		}
	}
	return nil
}

// askCheckpoints asks every task of runs for its checkpoint (nil: a task that has stopped).
func (e *Engine) askCheckpoints(runs []*runner) []*ckptReq {
	reqs := make([]*ckptReq, len(runs))
	for i, r := range runs {
		reqs[i] = &ckptReq{reply: make(chan ckptReply, 1), outcome: make(chan bool, 1), ack: make(chan ckptAck, 1)}
		select {
		case r.ckpt <- reqs[i]:
		case <-r.done:
			reqs[i] = nil
		}
	}
	return reqs
}

// gatherCheckpoints waits for the tasks' checkpoints: the offsets to commit, the chains'
// progress past them (Pending.Progress) and the records produced.
func (e *Engine) gatherCheckpoints(runs []*runner, reqs []*ckptReq) (offsets map[string]map[int32]int64, meta map[string]map[int32]string, records int, err error) {
	offsets = map[string]map[int32]int64{}
	meta = map[string]map[int32]string{}
	for i, r := range runs {
		if reqs[i] == nil {
			continue
		}
		select {
		case rep := <-reqs[i].reply:
			if rep.err != nil {
				return nil, nil, 0, rep.err
			}
			records += rep.pd.Records()
			for topic, off := range rep.pd.Offsets {
				if offsets[topic] == nil {
					offsets[topic] = map[int32]int64{}
				}
				offsets[topic][r.t.Partition()] = off
				if pr, ok := rep.pd.Progress[topic]; ok {
					if meta[topic] == nil {
						meta[topic] = map[int32]string{}
					}
					meta[topic][r.t.Partition()] = task.EncodeProgress(pr)
				}
			}
			reqs[i].pd = rep.pd
		case <-r.done:
			reqs[i] = nil
		}
	}
	return offsets, meta, records, nil
}

// deliverOutcome tells every task whether its checkpoint committed and waits for it to apply
// that; after an abort it returns where to rewind each partition: where a task says, else (a
// task that has processed nothing since it was assigned or since the last abort) the first
// offset it was sent. Batches in flight to tasks are dropped (an older epoch).
func (e *Engine) deliverOutcome(runs []*runner, reqs []*ckptReq, committed bool) (map[string]map[int32]kgo.EpochOffset, error) {
	seeks := map[string]map[int32]kgo.EpochOffset{}
	for i, r := range runs {
		q := reqs[i]
		if q == nil {
			continue
		}
		q.outcome <- committed
		select {
		case ack := <-q.ack:
			if ack.err != nil {
				return nil, ack.err
			}
			for topic, off := range ack.seek {
				if seeks[topic] == nil {
					seeks[topic] = map[int32]kgo.EpochOffset{}
				}
				seeks[topic][r.t.Partition()] = kgo.EpochOffset{Epoch: -1, Offset: off}
			}
		case <-r.done:
		}
	}
	if committed {
		return seeks, nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for k, r := range e.runs {
		for topic, first := range r.first {
			if _, ok := seeks[topic][k.p]; !ok {
				if seeks[topic] == nil {
					seeks[topic] = map[int32]kgo.EpochOffset{}
				}
				seeks[topic][k.p] = kgo.EpochOffset{Epoch: -1, Offset: first}
			}
		}
		clear(r.first)
	}
	return seeks, nil
}

// awaitWritable bounds the wait at start for the leaders of the topics the engine produces to.
const awaitWritable = 5 * time.Second

// ensureTopics checks the sources and creates the internal topics and missing sinks. It returns
// the effective max.message.bytes of every topic the pipeline writes (sinks, internal, changelog
// and dead-letter topics), which bound the producer's batches and records.
func (e *Engine) ensureTopics(ctx context.Context) (producer.Limits, error) {
	cfg := e.o.Config
	reparts := e.internal
	var inputs []string
	for _, t := range e.o.Plan.Topics() {
		if _, internal := reparts[t]; !internal {
			inputs = append(inputs, t)
		}
	}
	parts, err := changelog.Partitions(ctx, e.adm, inputs...)
	if mt := (*changelog.MissingTopicError)(nil); errors.As(err, &mt) {
		return nil, missingInput(cfg, mt.Topic)
	}
	if err != nil {
		return nil, err
	}
	e.internalParts = map[string]int32{}
	for rt, from := range reparts {
		parts[rt] = parts[from]
		e.internalParts[rt] = parts[from]
	}
	// Co-partitioning: a task is one partition number across a group's topics.
	for _, g := range e.o.Plan.CoPartitioned() {
		for _, t := range g[1:] {
			if parts[t] != parts[g[0]] {
				return nil, fmt.Errorf("consumer: topics %s (%d partitions) and %s (%d partitions) are joined, so they must have the same partition count (a task is one partition number of both)", g[0], parts[g[0]], t, parts[t])
			}
		}
	}
	var topics []changelog.Topic
	maxParts := int32(1)
	for rt, from := range reparts {
		topics = append(topics, changelog.Topic{Name: rt, Partitions: parts[from], Exact: true, Repartition: true})
	}
	seen := map[string]bool{}
	for _, c := range e.o.Plan.Chains {
		n := parts[c.Source.Topic]
		maxParts = max(maxParts, n)
		if c.Changelog != "" && !seen[c.Changelog] {
			seen[c.Changelog] = true
			topics = append(topics, changelog.Topic{Name: c.Changelog, Partitions: n, Exact: true, Compacted: true})
		}
		sink := c.SinkTopic
		if c.After != nil {
			sink = c.After.SinkTopic // the output topic's name stands for stages run in the task (plan.ChainPlan.After)
		}
		if _, internal := reparts[sink]; sink != "" && !internal && !seen[sink] {
			seen[sink] = true
			topics = append(topics, changelog.Topic{Name: sink, Partitions: n})
		}
		for _, tap := range c.Taps {
			if !seen[tap.SinkTopic] {
				seen[tap.SinkTopic] = true
				topics = append(topics, changelog.Topic{Name: tap.SinkTopic, Partitions: n})
			}
		}
	}
	topics = append(topics, changelog.Topic{Name: cfg.DLQTopic(), Partitions: maxParts})
	if err := changelog.Ensure(ctx, e.adm, topics, cfg.Kafka.ReplicationFactor); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(topics))
	for _, t := range topics {
		names = append(names, t.Name)
	}
	limits, err := changelog.MaxMessageBytes(ctx, e.adm, names...)
	if err != nil {
		return nil, err
	}
	e.log.Debug("topic limits (max.message.bytes) read", "limits", limits)
	return limits, nil
}

// Status returns every task's snapshot, sorted by topic and partition. A task that is not
// restored yet (or not even built) shows its chains in mode "restoring".
func (e *Engine) Status() []task.Status {
	e.mu.Lock()
	runs := make([]*runner, 0, len(e.runs))
	for _, r := range e.runs {
		runs = append(runs, r)
	}
	e.mu.Unlock()
	sort.Slice(runs, func(i, j int) bool {
		if runs[i].key.topic != runs[j].key.topic {
			return runs[i].key.topic < runs[j].key.topic
		}
		return runs[i].key.p < runs[j].key.p
	})
	out := make([]task.Status, 0, len(runs))
	for _, r := range runs {
		if !r.isRestored() { // its task may not be built yet
			out = append(out, task.RestoringStatus(e.o.Plan, r.topics, r.key.p))
			continue
		}
		out = append(out, r.t.Status())
	}
	return out
}

// Ready reports whether the member has joined, every assigned task is restored, and
// checkpoints are not failing over and over (failure.go).
func (e *Engine) Ready() bool {
	ok, _ := e.Readiness()
	return ok
}

// Readiness is Ready with, when not ready, why.
func (e *Engine) Readiness() (ready bool, why string) {
	if why := e.kafkaWaitReason(); why != "" {
		return false, why
	}
	if e.fails.alarmed.Load() {
		return false, "checkpoints keep failing: a record cannot be produced (see the log and sluice_checkpoint_failures_consecutive)"
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.joined {
		return false, "joining the group"
	}
	for _, r := range e.runs {
		if !r.isRestored() {
			return false, "restoring state"
		}
	}
	return true, ""
}

// fail stops the engine with a task's error: the poll loop returns it, and from now on no
// checkpoint commits (the failed task's records may be in the open transaction).
func (e *Engine) fail(err error) {
	e.broken.Store(true)
	select {
	case e.failed <- err:
	default:
	}
}

// checkpointErr explains a checkpoint that ran out of time: past kafka.transaction_timeout the
// broker aborts the transaction anyway, so the engine stops (the next start resumes from the last
// commit) rather than wait.
func (e *Engine) checkpointErr(step string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("consumer: checkpoint %s: out of time (a checkpoint gets kafka.transaction_timeout, %s, after which the broker aborts its transaction; at shutdown 30s): the machine or the broker is overloaded, or the transaction too large: %w",
			step, e.o.Config.Kafka.TransactionTimeout, err)
	}
	return fmt.Errorf("consumer: checkpoint %s: %w", step, err)
}

// bound is where a bounded run starts and ends reading one input partition.
type bound struct{ start, end int64 }

// openEnd is the end of an internal topic's partition in a bounded run until the chains that
// write the topic are done (closeInternal).
const openEnd = math.MaxInt64

// bound returns where a bounded run reads partition k.
func (e *Engine) bound(k tp) (bound, bool) {
	e.boundsMu.Lock()
	defer e.boundsMu.Unlock()
	b, ok := e.bounds[k]
	return b, ok
}

// closeInternal ends, in a bounded run, each internal topic (a repartition topic, an operator's
// output topic) whose writers are done: every task reading the inputs of the chains that write
// it has finished here, so everything they write is committed. The topic's end offsets are
// listed then, and the tasks reading it end there: a pipeline of several stages runs as a batch
// job stage after stage. Only the poll loop calls it.
func (e *Engine) closeInternal(ctx context.Context) error {
	var ready []string
	for _, topic := range e.internalSorted {
		if bd, ok := e.bound(tp{topic, 0}); !ok || bd.end != openEnd {
			continue
		}
		if e.writersDone(topic) {
			ready = append(ready, topic)
		}
	}
	if len(ready) == 0 {
		return nil
	}
	// The writers' last transactions are committed, but the broker writes their commit markers
	// after it answers EndTxn: until then a partition's last stable offset still stops before
	// them, and ending the readers there would drop the last transaction's records. The ends
	// are taken once every partition is settled (last stable offset = high watermark: no
	// transaction open); until then the next turn of the poll loop asks again.
	ends, err := producer.RetryList(ctx, func() (kadm.ListedOffsets, error) { return e.adm.ListCommittedOffsets(ctx, ready...) })
	if err != nil {
		return fmt.Errorf("consumer: bounded run: list the end offsets of %s: %w", strings.Join(ready, ", "), err)
	}
	hwms, err := producer.RetryList(ctx, func() (kadm.ListedOffsets, error) { return e.adm.ListEndOffsets(ctx, ready...) })
	if err != nil {
		return fmt.Errorf("consumer: bounded run: list the high watermarks of %s: %w", strings.Join(ready, ", "), err)
	}
	settled := true
	hwms.Each(func(h kadm.ListedOffset) {
		if l, ok := ends.Lookup(h.Topic, h.Partition); !ok || l.Offset != h.Offset {
			settled = false
		}
	})
	if !settled {
		// Markers are written within milliseconds of the commit: look again soon rather
		// than when the poll's wait ends.
		time.AfterFunc(settlePoll, func() { signal(e.wake) })
		return nil
	}
	starts, err := producer.RetryList(ctx, func() (kadm.ListedOffsets, error) { return e.adm.ListStartOffsets(ctx, ready...) })
	if err != nil {
		return fmt.Errorf("consumer: bounded run: list the start offsets of %s: %w", strings.Join(ready, ", "), err)
	}
	e.boundsMu.Lock()
	ends.Each(func(lo kadm.ListedOffset) {
		k := tp{lo.Topic, lo.Partition}
		b := e.bounds[k]
		b.end = lo.Offset
		if s, ok := starts.Lookup(lo.Topic, lo.Partition); ok {
			b.start = max(b.start, s.Offset) // purged below the group's offset: reading starts there
		}
		e.bounds[k] = b
	})
	e.boundsMu.Unlock()
	e.mu.Lock()
	var runs []*runner
	var at []batch
	ends.Each(func(lo kadm.ListedOffset) {
		if r := e.runs[tp{e.groupOf(lo.Topic), lo.Partition}]; r != nil {
			runs = append(runs, r)
			at = append(at, batch{topic: lo.Topic, closes: true, closeAt: lo.Offset})
		}
	})
	e.mu.Unlock()
	for i, r := range runs {
		// After every batch dispatched before it: the task ends the input if it is there.
		go func() {
			select {
			case r.in <- at[i]:
			case <-r.done:
			case <-ctx.Done():
			}
		}()
	}
	e.log.Info("bounded run: an internal topic's writers are done; its readers end at its end offsets", "topics", ready)
	return nil
}

// writersDone reports whether every chain that writes internal topic has its inputs read to
// their ends here: each partition of their groups has a finished task on this member.
func (e *Engine) writersDone(topic string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, c := range e.o.Plan.Chains {
		if c.SinkTopic != topic || c.Rekey == "" && !c.Output {
			continue
		}
		group := e.groupOf(c.Source.Topic)
		for k, bd := range e.bounds {
			if k.topic != c.Source.Topic {
				continue
			}
			if bd.end == openEnd {
				return false // an internal topic itself, not ended yet
			}
			r := e.runs[tp{group, k.p}]
			if r == nil {
				if !e.waitLog[topic] {
					e.waitLog[topic] = true
					e.log.Warn("bounded run: an internal topic waits for input partitions this member does not have (a bounded run of a pipeline with internal topics is one member)", "topic", topic, "input", c.Source.Topic, "partition", k.p)
				}
				return false
			}
			if !r.finished.Load() {
				return false
			}
		}
	}
	return true
}

// listBounds returns, per input partition, the offset the group resumes from (its committed
// offset, or the log start) and the partition's last stable offset now.
func (e *Engine) listBounds(ctx context.Context) (map[tp]bound, error) {
	// The internal topics were just created, and this client may not see them for a while
	// (metadata age): they are not listed now. Their partitions are those of the input they
	// take their count from, and they end when closeInternal lists them.
	internal := e.internal
	var topics []string
	for _, t := range e.o.Plan.Topics() {
		if _, ok := internal[t]; !ok {
			topics = append(topics, t)
		}
	}
	ends, err := producer.RetryList(ctx, func() (kadm.ListedOffsets, error) { return e.adm.ListCommittedOffsets(ctx, topics...) })
	if err != nil {
		return nil, fmt.Errorf("consumer: bounded run: list end offsets: %w", err)
	}
	starts, err := producer.RetryList(ctx, func() (kadm.ListedOffsets, error) { return e.adm.ListStartOffsets(ctx, topics...) })
	if err != nil {
		return nil, fmt.Errorf("consumer: bounded run: list start offsets: %w", err)
	}
	committed, err := e.fetchGroupOffsets(ctx)
	if errors.Is(err, kerr.GroupIDNotFound) {
		err = nil // a new group: every partition starts at its log start
	}
	if err != nil {
		return nil, fmt.Errorf("consumer: bounded run: fetch the group's offsets: %w", err)
	}
	out := map[tp]bound{}
	add := func(k tp, b bound) {
		if c, ok := committed.Lookup(k.topic, k.p); ok && c.Err == nil && c.At >= 0 {
			b.start = c.At
		}
		out[k] = b
	}
	ends.Each(func(lo kadm.ListedOffset) {
		b := bound{end: lo.Offset}
		if s, ok := starts.Lookup(lo.Topic, lo.Partition); ok {
			b.start = s.Offset
		}
		add(tp{lo.Topic, lo.Partition}, b)
		for rt, from := range internal {
			if from == lo.Topic {
				// Written by this run too: closeInternal ends it (and raises its start to the
				// log start, if the group has no offset there).
				add(tp{rt, lo.Partition}, bound{end: openEnd})
			}
		}
	})
	return out, nil
}

// fetchGroupOffsets returns the group's committed offsets. On a broker that just started, the
// group's coordinator is not available until the offsets topic exists (COORDINATOR_NOT_AVAILABLE,
// which franz-go retries a number of times by itself): like the wait for an unreachable broker
// at start, a retriable error is logged and retried until ctx ends.
func (e *Engine) fetchGroupOffsets(ctx context.Context) (kadm.OffsetResponses, error) {
	start := e.o.Clock()
	for attempt := 1; ; attempt++ {
		committed, err := e.adm.FetchOffsets(ctx, e.o.Config.Group)
		if err == nil || !producer.Retriable(err) || ctx.Err() != nil {
			return committed, err
		}
		e.log.Warn("bounded run: the group's offsets cannot be fetched yet; retrying", "group", e.o.Config.Group,
			"waiting", e.o.Clock().Sub(start).Round(time.Millisecond), "attempt", attempt, "err", err)
		t := time.NewTimer(connectRetryMin)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// finished reports whether a bounded run is done: the member has tasks and each has committed
// the end of its input.
func (e *Engine) finished() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.runs) == 0 {
		return false
	}
	for _, r := range e.runs {
		if !r.finished.Load() {
			return false
		}
	}
	return true
}

// fetchErr returns the first error of fs that ends the run. An error that goes away when
// retried does not: a broker or the group's coordinator that cannot be reached (a node died and
// is not fenced yet), which franz-go keeps retrying itself, or a group session franz-go joins
// again by itself (the member was dropped while the coordinator moved; the revoke or loss
// callbacks have stopped its tasks); it is logged, at most every 10 s.
func (e *Engine) fetchErr(fs kgo.Fetches) error {
	var out, fenced error
	fs.EachError(func(t string, p int32, err error) {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return
		}
		if fenced == nil && producer.Fenced(err) && !e.sessAssigned.Load() && e.fenceRejoins < maxFenceRejoins {
			fenced = err
			return
		}
		if producer.Retriable(err) || producer.Rejoinable(err) {
			if now := e.o.Clock(); now.Sub(e.transientLogged) >= 10*time.Second {
				e.transientLogged = now
				e.log.Warn("kafka unreachable for now; retrying", "topic", t, "partition", p, "err", err)
			}
			return
		}
		if out == nil {
			out = fmt.Errorf("consumer: fetch %s[%d]: %w", t, p, err)
		}
	})
	if errors.Is(out, kgo.ErrClientClosed) {
		return nil
	}
	if out == nil && fenced != nil {
		// Fenced before this session's first assignment: no running process of this instance
		// id took over from us (a member fenced after its assignment exits). Another join with
		// the instance id replaced this member: this process's own, sent again across a
		// coordinator's failover, or a killed predecessor's last request, handled late. The
		// member id franz-go holds on to stays fenced on every rejoin; a new session joins
		// without one and takes the instance id back. Two processes started together with the
		// same id stop after maxFenceRejoins each.
		e.fenceRejoins++
		e.log.Warn("fenced before the first assignment (this instance id joined again meanwhile); joining again with a new session",
			"err", fenced, "rejoins", e.fenceRejoins, "max", maxFenceRejoins)
		return fmt.Errorf("consumer: %w: %w", producer.ErrSessionLost, fenced)
	}
	return out
}

// missingInput is the error for an input topic the brokers do not have, naming the key of the
// sources or tables that read it.
func missingInput(cfg *configs.Config, topic string) error {
	var keys []string
	for name, s := range cfg.Sources {
		if s.Topic == topic {
			keys = append(keys, "sources."+name+".topic")
		}
	}
	for name, tb := range cfg.Tables {
		if tb.Topic == topic {
			keys = append(keys, "tables."+name+".topic")
		}
	}
	slices.Sort(keys)
	if len(keys) == 0 {
		return fmt.Errorf("consumer: topic %s does not exist", topic)
	}
	return &configs.Error{Key: strings.Join(keys, ", "), Msg: fmt.Sprintf("topic %s does not exist on the brokers; create it, or name a topic that exists", topic)}
}

// askCheckpoint asks the poll loop for a checkpoint now.
func (e *Engine) askCheckpoint() {
	signal(e.urgent)
	signal(e.wake)
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func pending(c chan struct{}) bool { return len(c) > 0 }

func drain(c chan struct{}) {
	select {
	case <-c:
	default:
	}
}

type engineMetrics struct {
	commits, aborts prometheus.Counter
	commitSeconds   prometheus.Histogram
	checkpoints     prometheus.Counter
	restoreSeconds  prometheus.Histogram
	restored        prometheus.Counter
	tasks           prometheus.Gauge
	ckptFailures    prometheus.Gauge
	sessionRestarts prometheus.Counter
}

func newEngineMetrics(reg prometheus.Registerer) engineMetrics {
	m := engineMetrics{
		commits: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_commits_total", Help: "Checkpoints committed (transactions with records or offsets)."}),
		aborts:  prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_txn_aborts_total", Help: "Checkpoints aborted."}),
		checkpoints: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_checkpoints_total",
			Help: "Checkpoints run: barriers across the tasks, whether they committed records, offsets, or nothing (processing.commit_interval apart, or backlog.commit_interval while every task holds a backlog)."}),
		commitSeconds:  prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_commit_duration_seconds", Help: "Checkpoint duration (barrier, flush, commit, apply).", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		restoreSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_restore_duration_seconds", Help: "Changelog restore duration per task.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 18)}),
		restored:       prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_restored_records_total", Help: "Changelog records replayed into state."}),
		tasks:          prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_tasks", Help: "Tasks (topic-partitions) assigned to this member."}),
		ckptFailures: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_checkpoint_failures_consecutive",
			Help: "Checkpoints aborted in a row because a record could not be produced (0 after a commit); see processing.max_checkpoint_failures."}),
		sessionRestarts: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_session_restarts_total",
			Help: "Kafka sessions abandoned and reopened, as after a crash, because a broker could not be reached while a transaction ended (its outcome unknown) or began."}),
	}
	reg.MustRegister(m.commits, m.aborts, m.checkpoints, m.commitSeconds, m.restoreSeconds, m.restored, m.tasks, m.ckptFailures, m.sessionRestarts)
	return m
}
