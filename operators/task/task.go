package task

import (
	"bytes"
	"container/heap"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/backlog"
	"github.com/sluice-dev/sluice/changelog"
	"github.com/sluice-dev/sluice/changelog/codec"
	"github.com/sluice-dev/sluice/operators"
	"github.com/sluice-dev/sluice/operators/plan"
	"github.com/sluice-dev/sluice/sorter"
	"github.com/sluice-dev/sluice/state"
)

// Producer sends records into the transaction that is open (exactly-once) or to be acknowledged
// before the next offset commit (at-least-once). Produce may block when the producer's buffer is
// full; promise is called exactly once, possibly on another goroutine, and must not block.
type Producer interface {
	Produce(r *kgo.Record, promise func(*kgo.Record, error))
}

// Deps are what a task needs from its process. Store, Budget and Producer are shared by all
// tasks; they are safe for concurrent use.
type Deps struct {
	Store    state.Store
	Budget   *sorter.Budget
	SortDir  string // spill directory root; each chain sorts under SortDir/<operator>-<partition>
	Producer Producer
	Clock    func() time.Time // wall clock: time lag, progress, produced records' timestamps; never event time
	Logger   *slog.Logger
	Metrics  *Metrics
	// Values decodes the values of sources and tables of another format than JSON (format
	// avro: an operators/avro.Registry, shared by the tasks); nil when every input is JSON.
	Values operators.ValueDecoder
	// LoaderThreshold is the number of keys from which a switch writes state through a bulk
	// loader (sstable ingestion) instead of a batch. 0 means 20000.
	LoaderThreshold int
	// InternalPartitions is the partition count of each internal topic (Plan.Repartitions):
	// a chain writing one announces its backlog mode to every partition (attributes.go). A
	// topic missing here gets no announcements.
	InternalPartitions map[string]int32
	// Bounded: the run is a batch job (sluice run --bounded); the mode policy starts every
	// keyed operator in backlog, as backlog.mode always does (backlog.Options.Bounded).
	Bounded bool
}

// Task runs one partition number of a Plan. It is not safe for concurrent use: one goroutine
// owns it (Status is the exception). Memory passed to it (records) is not retained after
// Process returns, except through the records it produces.
type Task struct {
	topic     string
	partition int32
	plan      *plan.Plan
	d         Deps
	chains    []*chain
	byTopic   map[string][]*chain
	tables    map[string]*table // by topic (table.go)
	dlq       []*kgo.Record     // tables' dead letters not yet produced (held until the next checkpoint without a backlog)
	cacheCap  int
	needCkpt  bool
	batches   uint64    // Process calls (a provider's snapshots hold one: fork.go)
	now       time.Time // the wall clock of the batch Process runs: its stateless outputs' record timestamp
	log       *slog.Logger
	out       *errTracker             // produce results of records sent outside a checkpoint (stateless outputs)
	arena     outArena                // the produced records and their bytes
	after     map[string]*afterStages // the stages run on the results produced to an output topic, by its name (after.go)
	afterP    *afterProducer          // the producer last given to Checkpoint or Prepare, behind them
	prep      *Pending                // folds done by Prepare, completed by the next Checkpoint

	phase phase // the call order (order.go)

	mu     sync.Mutex // guards status
	status Status
	// backlogged: every chain holds a backlog (publish; Backlogged), so no output of the task
	// waits on a real-time checkpoint.
	backlogged atomic.Bool
}

// chain is one plan.ChainPlan's runtime in this task.
type chain struct {
	plan plan.ChainPlan
	ops  *plan.Ops
	det  *backlog.Detector

	// The keyed operator the chain ends in, shared by the chains of a cogroup (one per input;
	// the first one, primary, does the operator's part of checkpoints). Its fields are promoted.
	*opState
	input   int                   // the chain's input index in a cogroup (ProjectInput); 0 otherwise
	primary bool                  // the chain does the operator's part of a checkpoint (fold, flush, windows)
	assign  func(sk []byte) error // a mergeable operator's: folds the current record (scratch) into state key sk
	// sortAssign: a slicing operator's in a backlog, for a record it does not slice: adds it to
	// the sorter under state key sk, past the partials (slice.go)
	sortAssign func(sk []byte) error

	next    int64         // next offset to process; -1 before the first record
	done    progress      // where the last commit left the chain (done.off: or where consumption started)
	dlq     []*kgo.Record // dead letters not yet produced (held while the chain holds a backlog)
	lag     int64
	timeLag time.Duration

	rec        operators.Record
	scratch    []byte
	comb       *combiner   // a re-keying writer's combining for its reader, or a keyed operator's filter of its results (combine.go); nil: none
	proj       *projector  // a re-keying writer's projection for its reader (project.go); nil: none
	resultView kgo.Record  // a keyed operator's result as its filter (comb) examines it, before it is copied
	rendered   []byte      // scratch: a mergeable operator's result (produceResult)
	own        *combiner   // the filter before the chain's own operator (newOwnFilter: a distinct keyed in its input's partition, a top); nil: none
	snaps      []*snapshot // what came of a batch's records after some stages, for forks (fork.go)
	from       *snapshot   // a fork's: its provider's snapshot it starts from (fork.go); nil: none

	observed bool // the chain has seen a batch since it started or was rewound (BeforeBatch)

	// inputEnded: the chain's input ended (bounded run, EndInput); the operator's ended follows
	// once every input of it has.
	inputEnded bool

	wire      // what the chain says to, and hears from, the tasks across an internal topic
	inputTime // its input's event time
	counts
}

// wire is a chain's side of the in-band RecordAttributes (attributes.go). A writer (its records
// go to an internal topic of internalParts partitions) announces its mode there; a chain without
// a keyed operator judges its input with wdet (a re-keying writer announces its verdict; every
// such chain's counts in Task.Backlogged). A reader (its input is an internal topic) keeps upstream,
// the writers (by partition) that said backlog; nil for other chains.
type wire struct {
	internalParts int32
	wdet          *backlog.Detector
	said          int8
	// Event time across an internal topic (TimedOutput, TimedInput): the output watermark a
	// writer announced (wmSaid) and whether it said idle since, and what a reader knows of its
	// writers, by writer partition.
	wmSaid   int64
	idleSaid bool
	writers  []writerMark
	upstream map[string]struct{}
	batchUp  bool // the batch about to run holds records written in backlog (ReadAttributes)
}

// inputTime is the event time of a chain's input: its watermark (the largest event time
// decoded minus its source's max_delay). The operator's watermark (opState.wm) is the smallest
// of its inputs'; a record is late by its own input's (window.go).
type inputTime struct {
	maxDelay int64
	iwm      int64
	// Idleness (watermark.idle_after): an input of an operator of several inputs that has
	// caught up and had no record for idleAfter stops holding the operator's watermark back.
	idleAfter time.Duration
	lastSeen  time.Time // wall clock of the input's last batch (or the task's start)
}

// counts are a chain's records in, out and dead-lettered (the status page's).
type counts struct {
	recordsIn, recordsOut, dead int64
}

// opState is a keyed operator's runtime in a task: its mode, state access, backlog buffers,
// event time and bookkeeping. One chain owns it, or the chains of a cogroup share it (the
// operator is in backlog while any of them is: the combiner rule).
type opState struct {
	chains []*chain // the chains feeding the operator (a cogroup's inputs, in order)

	ns     state.Namespace
	layout *layout // the keyed operator's state layout and changelog headers (layout.go)
	inBack bool    // current mode: backlog (records go to the partials, or beyond them the sorter)
	sorter *sorter.Sorter
	part   *partials   // backlog pre-aggregation of the first cache_keys keys
	last   *latest     // backlog: each key's latest record, for an operators.LastWins (latest.go)
	jf     *joinFilter // backlog: a join's filter of its records before the sorter (joinfilter.go); nil: none
	slices sliceState  // hopping windows folded by slice in a backlog (slice.go)

	cache map[string]*entry // real-time write-back cache
	dirty []*entry

	// event time (windowed aggregates and Keyed operators; see window.go)
	kop     operators.Keyed // a Keyed operator (keyed.go); nil: a mergeable one (ops.Agg)
	outbox  []*kgo.Record   // Keyed: outputs of real-time calls, produced by the next checkpoint
	wm      int64           // watermark at next (math.MinInt64 before any record): the smallest of its inputs' (chain.iwm); committed: committedWM
	timerNS state.Namespace
	tm      timers
	wk      []byte // scratch: a state key (applyMergeable), a Keyed input (applyKeyed)
	ended   bool   // every input ended (bounded run): the watermark is +infinity
	endWM   int64  // while ended: the watermark to commit (the data's, or the latest close of a window the end closed)
	late    int64

	arrivals int64 // Keyed: records taken into the sorter (their replay order); never reset

	backlogCkpt
	backlogLog
}

// backlogCkpt is an operator's backlog checkpoints (backlog.checkpoint_interval): keys folded
// without their output yet.
type backlogCkpt struct {
	pendNS       state.Namespace
	hasPending   bool // pendNS may hold keys
	lastBackCkpt time.Time
}

// backlogLog is an operator's backlog bookkeeping for progress and the switch log line.
type backlogLog struct {
	backStart   time.Time
	backRecords int64
	lastLog     time.Time
}

type entry struct {
	key     []byte
	state   []byte
	dirty   bool // to be written at the next checkpoint
	updated bool // windowed: records folded since the last checkpoint
	stored  bool // windowed: the state (and its timer) are in the store
	closing bool // windowed: the window closed; the next checkpoint emits it and deletes it

	// Keyed operators (keyed.go): the key's timer, the one in the store, a deleted state.
	timer, storedTimer       int64
	hasTimer, hasStoredTimer bool
	deleted                  bool
}

// New creates the task for partition of topic in plan: NewGroup of topic alone.
func New(plan *plan.Plan, topic string, partition int32, d Deps) (*Task, error) {
	return NewGroup(plan, []string{topic}, partition, d)
}

// NewGroup creates the task for partition number partition of topics (a group of
// Plan.CoPartitioned: a stream and the tables it joins), with fresh operator instances for
// the chains reading them and the table partitions they join.
func NewGroup(plan *plan.Plan, topics []string, partition int32, d Deps) (*Task, error) {
	if d.Clock == nil {
		d.Clock = time.Now
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	if d.LoaderThreshold == 0 {
		d.LoaderThreshold = 20000
	}
	cfg := plan.Config
	mode, err := backlog.ParseMode(cfg.Backlog.Mode)
	if err != nil {
		return nil, err
	}
	t := &Task{
		partition: partition,
		plan:      plan,
		d:         d,
		byTopic:   map[string][]*chain{},
		tables:    map[string]*table{},
		cacheCap:  max(cfg.Processing.CacheKeys, 1),
		log:       d.Logger.With("partition", partition),
		out:       &errTracker{},
	}
	in := func(topic string) bool {
		for _, tp := range topics {
			if tp == topic {
				return true
			}
		}
		return false
	}
	joined := plan.TableTopics() // tables of joins as of processing (a join as of event time reads its table as an input)
	for name, tc := range cfg.Tables {
		if !in(tc.Topic) || joined[tc.Topic] != name {
			continue
		}
		tb, err := newTable(name, tc, partition, d.Store, d.Clock(), d.Values)
		if err != nil {
			return nil, err
		}
		t.tables[tc.Topic] = tb
	}
	if len(t.tables) > 0 {
		t.d.Metrics.joinWaiting(1) // until SetTableEnd and the loads say otherwise
	}
	g := groupBuild{topics: topics, mode: mode, shared: map[string]*opState{}, internal: plan.Repartitions()}
	for _, cp := range plan.Chains {
		if !in(cp.Source.Topic) {
			continue
		}
		if err := t.addChain(cp, g); err != nil {
			t.Close()
			return nil, err
		}
	}
	if len(t.after) > 0 {
		t.d.Producer = &afterProducer{p: d.Producer, by: t.after}
	}
	t.topic = topics[0]
	if err := t.checkLayouts(); err != nil {
		t.Close()
		return nil, err
	}
	if err := t.Restored(); err != nil {
		t.Close()
		return nil, err
	}
	t.publish()
	return t, nil
}

// groupBuild is what NewGroup's chains are built with.
type groupBuild struct {
	topics   []string
	mode     backlog.Mode
	shared   map[string]*opState // keyed operators by name: a cogroup's chains share one
	internal map[string]string   // the plan's repartition topics (Plan.Repartitions)
}

// addChain builds the chain of cp, its operators and, for the first chain of a keyed operator,
// the operator's state (namespaces, cache, partials, sorter).
func (t *Task) addChain(cp plan.ChainPlan, g groupBuild) error {
	d, cfg := t.d, t.plan.Config
	for _, name := range cp.Tables {
		if !slices.Contains(g.topics, cfg.Tables[name].Topic) {
			return fmt.Errorf("task %d: chain of %s joins table %s, whose topic %s is not among the task's topics %v", t.partition, cp.SourceName, name, cfg.Tables[name].Topic, g.topics)
		}
	}
	ops, err := cp.Build(func(name string) operators.Rows {
		return rows{st: d.Store, ns: codec.TableNamespace(name, t.partition)}
	}, d.Values)
	if err != nil {
		return err
	}
	t.addAfter(cp, ops)
	c := &chain{plan: cp, ops: ops, next: -1, input: cp.Input,
		inputTime: inputTime{maxDelay: cp.Source.Watermark.MaxDelay.Milliseconds(), iwm: math.MinInt64,
			idleAfter: cp.Source.Watermark.IdleAfter, lastSeen: d.Clock()},
		wire: wire{wmSaid: math.MinInt64},
		done: progress{off: -1, wm: math.MinInt64, iwm: math.MinInt64, wmSaid: math.MinInt64}}
	detOpts := backlog.Options{
		Mode: g.mode, EnterLag: cfg.Backlog.EnterLag, ExitLag: cfg.Backlog.ExitLag,
		EnterTimeLag: cfg.Backlog.EnterTimeLag, ExitTimeLag: cfg.Backlog.ExitTimeLag, Bounded: d.Bounded,
	}
	if ops.Keyed() {
		c.det = backlog.NewDetector(detOpts)
	}
	if _, ok := g.internal[cp.Source.Topic]; ok {
		c.upstream = map[string]struct{}{}
		if cp.TimedInput {
			c.writers = make([]writerMark, d.InternalPartitions[cp.Source.Topic])
			for i := range c.writers {
				c.writers[i].wm = math.MinInt64
			}
			c.done.writers = slices.Clone(c.writers)
		}
	}
	if _, ok := g.internal[cp.SinkTopic]; ok && cp.Rekey != "" {
		c.internalParts = d.InternalPartitions[cp.SinkTopic]
	}
	if !ops.Keyed() {
		c.wdet = backlog.NewDetector(detOpts)
	}
	if ops.Keyed() && g.shared[cp.Keyed.Name] != nil {
		c.opState = g.shared[cp.Keyed.Name] // another input of a cogroup
	} else {
		c.opState = &opState{wm: math.MinInt64}
		c.primary = true
	}
	c.opState.chains = append(c.opState.chains, c)
	if _, ok := g.internal[cp.SinkTopic]; ok && cp.Output && c.primary {
		c.internalParts = d.InternalPartitions[cp.SinkTopic]
	}
	if ops.Keyed() && c.primary {
		g.shared[cp.Keyed.Name] = c.opState
		c.ns = state.Namespace{Operator: cp.Keyed.Name, Partition: t.partition}
		c.pendNS = codec.PendingNamespace(c.ns)
		c.cache = make(map[string]*entry)
		c.kop = ops.Kop
		if c.kop == nil {
			c.part = newPartials(ops.Agg.StateSize(), t.cacheCap)
		}
		c.timerNS = codec.TimerNamespace(c.ns)
		if d.Budget != nil {
			dir := filepath.Join(d.SortDir, fmt.Sprintf("%s-%d", cp.Keyed.Name, t.partition))
			c.sorter, err = sorter.New(sorter.Options{Dir: dir, Budget: d.Budget})
			if err != nil {
				return fmt.Errorf("task %d: %w", t.partition, err)
			}
			if a, ok := ops.Agg.(interface{ Slices() *operators.Windows }); ok && c.kop == nil {
				c.slices.w = a.Slices()
			}
			if lw, ok := c.kop.(operators.LastWins); ok && lw.LastWins() {
				c.last = newLatest()
			}
		}
	}
	if ops.Agg != nil {
		c.assign = func(sk []byte) error { return t.apply(c, sk, c.next-1, c.scratch) }
		c.sortAssign = func(sk []byte) error { return t.sortEntry(c, sk) }
	}
	if c.comb, err = newCombiner(&cp, ops.Combine, t.cacheCap); err != nil {
		return err
	}
	if c.comb != nil && cp.Rekey == "" && ops.Agg != nil {
		// An aggregate's window finals filtered for a top over windows: one path per partition
		// of the output topic (combine.go), or no filter when their number is unknown.
		if c.comb.paths = c.internalParts; c.comb.paths <= 0 {
			c.comb = nil
		}
	}
	c.proj = newProjector(ops.Project)
	if ri, ok := ops.Kop.(rowIndexer); ok && c.comb != nil && cp.Rekey == "" {
		c.comb.rows = ri
	}
	if su, ok := ops.Kop.(sameUnderKey); ok && c.comb != nil && cp.Rekey == "" && c.comb.rekey != nil &&
		c.comb.bound != nil && !c.comb.bound.Windowed() && c.comb.paths == 0 && len(c.comb.stages) == 0 {
		c.comb.underKey = su.SameUnderKey(c.comb.rekey.Members())
	}
	c.own = newOwnFilter(&cp, ops, t.cacheCap)
	if c.jf == nil && c.sorter != nil {
		c.jf = newJoinFilter(c, d)
	}
	t.chains = append(t.chains, c)
	t.byTopic[cp.Source.Topic] = append(t.byTopic[cp.Source.Topic], c)
	t.linkFork(c)
	return nil
}

// Topic returns the task's input topic.
func (t *Task) Topic() string { return t.topic }

// Namespaces returns the state namespaces of the task's keyed operators with their changelog
// topics (what a restore must replay).
func (t *Task) Namespaces() map[state.Namespace]string {
	out := map[state.Namespace]string{}
	for _, c := range t.chains {
		if c.ops.Keyed() {
			out[c.ns] = c.plan.Changelog
		}
	}
	return out
}

// SetProgress gives the task, before its first batch, the progress of each chain reading topic
// that the last commit left ahead of the topic's committed offset (Pending.Progress, by
// plan.ChainPlan.ID; DecodeProgress reads it from the commit's metadata): such a chain skips the
// records before it, whose outputs that commit holds already.
//
// committed is the topic's committed offset, where every other chain of the topic resumes: all
// of them know where they stand before the first batch, so an abort before it rewinds the
// topic to the smallest of them, not to a branch ahead.
func (t *Task) SetProgress(topic string, committed int64, progress map[string]int64) {
	t.must("SetProgress", phaseIdle)
	for _, c := range t.byTopic[topic] {
		off := committed
		p, ok := progress[c.plan.ID()]
		if _, ids := progress[progressIDs]; !ok && !ids && c.plan.Rekey != "" {
			p, ok = progress[c.plan.LegacyID()] // a commit of a sluice before the re-keying chains' own IDs
		}
		if ok {
			off = max(off, p)
		}
		if off > c.next {
			c.done.off, c.next = off, off
		}
		if wm, ok := progress[saidPrefix+c.plan.ID()]; ok && c.keepsSaid() {
			_, idle := progress[idlePrefix+c.plan.ID()]
			c.done.wmSaid, c.done.idleSaid = wm, idle
			c.wmSaid, c.idleSaid = wm, idle
		}
	}
}

// Branches reports whether the task needs topic's committed progress at start (SetProgress):
// several chains read it (operators reading one input), or a writer that commits what it
// announced (chain.keepsSaid).
func (t *Task) Branches(topic string) bool {
	cs := t.byTopic[topic]
	return len(cs) > 1 || len(cs) == 1 && cs[0].keepsSaid()
}

// Next returns the next offset of topic the task processes: past its last record, or where it
// resumes after an abort; -1 before its first record.
func (t *Task) Next(topic string) int64 {
	next := int64(-1)
	for _, c := range t.byTopic[topic] {
		next = max(next, c.next)
	}
	return next
}

// Partition returns the task's partition number.
func (t *Task) Partition() int32 { return t.partition }

// Process runs a batch of records of topic (all from this task's partition, in offset order)
// through the topic's chains in their current modes. Bad records become dead letters.
// An error means the task cannot go on (the state store or the sort spill failed); the records
// of the batch may be partly applied, so the caller must abort to the last checkpoint.
func (t *Task) Process(topic string, recs []*kgo.Record) error {
	t.must("Process", phaseIdle)
	if tb := t.tables[topic]; tb != nil {
		if err := t.applyTable(tb, recs, -1); err != nil {
			return err
		}
	}
	now := t.d.Clock() // once per batch: the inputs' idleness (window.go), stateless outputs' timestamps
	t.now = now
	t.batches++
	for _, c := range t.byTopic[topic] {
		c.lastSeen = now
		if err := t.processChain(c, recs, now); err != nil {
			return err
		}
	}
	if len(recs) > 0 {
		t.d.Metrics.recordsIn(topic, len(recs))
	}
	t.progress()
	t.publish()
	return nil
}

func (t *Task) processChain(c *chain, recs []*kgo.Record, now time.Time) error {
	defer c.rec.Release() // do not pin the batch's fetch response (operators.Record.Release)
	c.batchUp = false     // the batch runs now: AfterBatch judges by what the writers said last
	c.beginSnapshots(t.batches, len(recs))
	for i, kr := range recs {
		// The timers the watermark of the previous record reached fire after it, whatever
		// became of it: a record dropped by a filter, dead-lettered or late moves the
		// watermark too, and a timer it reached must fire before the next record is applied,
		// as the backlog's replay fires it (keyed.go), or a record could join a session that
		// is closed in the other mode.
		if err := t.fireDue(c); err != nil {
			return err
		}
		if c.done.off < 0 {
			c.done.off = kr.Offset // where consumption started: the group's committed offset
		}
		if kr.Offset < c.next {
			continue // done already (a branch ahead of another chain on its topic: SetProgress, Aborted)
		}
		c.next = kr.Offset + 1
		if c.attribute(kr, now) {
			continue // a writer's mode (attributes.go), not data
		}
		c.recordsIn++
		if c.upstream != nil && len(kr.Headers) > 0 {
			if fp, ok := codec.PartialOf(kr.Headers); ok {
				if err := t.applyPartial(c, kr, fp); err != nil {
					return err
				}
				continue
			}
		}
		wmPrev := c.wm
		if keep, err := t.decodeStages(c, i, kr, now); err != nil || !keep {
			if err != nil {
				return err
			}
			continue
		}
		if err := t.applyRecord(c, kr, wmPrev); err != nil {
			return err
		}
	}
	return t.fireDue(c)
}

// decode decodes kr into c.rec (a table's tombstone read as versions: its key and time); a
// record that cannot be decoded is a dead letter (false), unless it is not the record's fault
// (the error).
func (t *Task) decode(c *chain, kr *kgo.Record) (bool, error) {
	ops := c.ops
	if kr.Value == nil && kr.Key != nil && (c.plan.AsOf != nil && c.input == 1 || c.plan.Tombstones) {
		// A tombstone of a table read as versions: the row is deleted from its record
		// timestamp on. Or of an upsert stream (Tombstones): the key's row is deleted.
		key, err := ops.Src.Key(kr.Key, &c.rec)
		if err != nil {
			t.deadLetter(c, kr, "source "+c.plan.SourceName, err)
			return false, nil
		}
		c.rec.Key, c.rec.Value, c.rec.Time = key, nil, kr.Timestamp.UnixMilli()
		return true, nil
	}
	if err := ops.Src.Decode(kr.Key, kr.Value, kr.Timestamp.UnixMilli(), &c.rec); err != nil {
		var rerr *operators.Error
		if !errors.As(err, &rerr) {
			// Not the record's fault (its schema registry is unreachable): fail rather than
			// lose it; its offset is not committed, so it is read again.
			return false, fmt.Errorf("task %d: %w", t.partition, err)
		}
		if !c.plan.Fork { // a branch leaves the source's dead letters to the first chain
			t.deadLetter(c, kr, "source "+c.plan.SourceName, err)
		}
		return false, nil
	}
	return true, nil
}

// decodeStages decodes record i of the batch, kr, into c.rec and runs the chain's stateless
// stages on it (a fork: from its provider's snapshot, where it has the record), advancing the
// chain's input time: false when it could not be decoded, or a stage dropped it or made it a
// dead letter.
func (t *Task) decodeStages(c *chain, i int, kr *kgo.Record, now time.Time) (bool, error) {
	if e := c.snapFor(t.batches, i); e != nil {
		if e.state != snapKept {
			if e.state == snapDropped {
				c.observeTime(e.srcTime, now)
			}
			if len(c.snaps) > 0 {
				c.snapMark(i, -1, e.state, e.srcTime) // deeper than its own start (linkFork)
			}
			return false, nil
		}
		c.observeTime(e.srcTime, now)
		c.useSnap(e)
		return t.applyStages(c, kr, i, c.from.depth, e.srcTime)
	}
	snap := len(c.snaps) > 0 && kr.Value != nil
	if ok, err := t.decode(c, kr); err != nil || !ok {
		if snap && err == nil {
			c.snapMark(i, -1, snapBad, 0)
		}
		return false, err
	}
	c.observeTime(c.rec.Time, now)
	if !snap {
		i = -1
	}
	return t.applyStages(c, kr, i, 0, c.rec.Time)
}

// applyStages runs the chain's stateless stages from the from-th on c.rec: false when one
// dropped it or made it a dead letter. i >= 0: the record's index in the batch, for the
// chain's snapshots (fork.go), and srcTime its decoded time.
func (t *Task) applyStages(c *chain, kr *kgo.Record, i, from int, srcTime int64) (bool, error) {
	if i >= 0 {
		c.snapKeep(i, from, srcTime)
	}
	t.tap(c, from-1)
	if c.rec.Value == nil && c.plan.Tombstones && !c.ops.Keyed() {
		// A deleted row of an upsert stream: no stage has a row to read; the deletion goes on
		// to the sink under its key.
		if c.plan.SinkTopic != "" {
			t.d.Producer.Produce(t.statelessOut(c.plan.SinkTopic, c.rec.Key, nil), t.out.promise)
			c.recordsOut++
		}
		return false, nil
	}
	for si := from; si < len(c.ops.Stages); si++ {
		st := c.ops.Stages[si]
		keep, err := st.Apply(&c.rec)
		if (err != nil || !keep) && i >= 0 {
			c.snapMark(i, si, snapDropped, srcTime)
		}
		if err != nil {
			var rerr *operators.Error
			if !errors.As(err, &rerr) {
				return false, fmt.Errorf("task %d: %w", t.partition, err) // the store failed (a join's table)
			}
			if si >= c.plan.SharedStages { // a shared stage's are the first chain's
				t.deadLetter(c, kr, st.Name(), err)
			}
			return false, nil
		}
		if !keep {
			return false, nil
		}
		t.tap(c, si)
		if i >= 0 {
			c.snapKeep(i, si+1, srcTime)
		}
	}
	return true, nil
}

// applyRecord sends c.rec, through the stages, where the chain ends: re-keyed into its
// repartition topic, out to its sink, or into its keyed operator (projected, after a tag byte:
// sorted entries are inputs or partial states). wmPrev is the watermark before the record.
func (t *Task) applyRecord(c *chain, kr *kgo.Record, wmPrev int64) error {
	ops := c.ops
	if ops.Rekey != nil {
		// Re-keyed into the repartition topic, with the event time as its timestamp.
		key, err := ops.Rekey.Key(&c.rec)
		if err != nil {
			t.deadLetter(c, kr, ops.Rekey.Name(), err)
			return nil
		}
		if c.comb != nil && t.combine(c, kr, key, wmPrev) {
			return nil // combined into a partial state, or dropped before a distinct
		}
		value := c.rec.Value
		if c.proj != nil {
			value = c.proj.value(c, key, wmPrev)
		}
		out := t.arena.out(c.plan.SinkTopic, -1, key, value)
		out.Timestamp = time.UnixMilli(c.rec.Time)
		t.d.Producer.Produce(out, t.out.promise)
		c.recordsOut++
		return nil
	}
	if !ops.Keyed() {
		if c.plan.SinkTopic != "" {
			t.d.Producer.Produce(t.statelessOut(c.plan.SinkTopic, c.rec.Key, c.rec.Value), t.out.promise)
			c.recordsOut++
		}
		return nil
	}
	if ops.LocalKey != nil {
		// A group key that keeps the input's partition (plan.keepsPartition): the record
		// stays here under it.
		key, err := ops.LocalKey.Key(&c.rec)
		if err != nil {
			t.deadLetter(c, kr, ops.LocalKey.Name(), err)
			return nil
		}
		c.rec.Key = key
		if c.own != nil && c.own.dist != nil && c.own.dropsFlagless(key, &c.rec) {
			return nil
		}
	}
	var in []byte
	var err error
	if ops.Kop != nil {
		in, err = ops.Kop.Project(c.input, &c.rec, append(c.scratch[:0], tagInput))
	} else {
		in, err = ops.Agg.ProjectInput(c.input, &c.rec, append(c.scratch[:0], tagInput))
	}
	if err != nil {
		t.deadLetter(c, kr, c.plan.Keyed.Name, err)
		return nil
	}
	if c.own != nil && c.own.bound != nil && c.own.dropsOwn(c.rec.Key, &c.rec) {
		return nil // the top's earlier records leave it no rank
	}
	if c.jf != nil && c.inBack && len(in) > 1 { // a join's filter before its sorter
		drop, err := t.joinDrops(c, c.rec.Key, in[1:])
		if err != nil {
			return err
		}
		if drop {
			return nil // its row would not enter the top the join's results are for
		}
	}
	c.scratch = in
	if c.kop != nil {
		err = t.applyKeyed(c, kr, in, wmPrev)
	} else {
		err = t.applyMergeable(c, kr)
	}
	if err != nil {
		return err
	}
	t.countBacklog(c)
	return nil
}

// countBacklog counts a record taken into a backlog, asking for a backlog checkpoint when one
// is due.
func (t *Task) countBacklog(c *chain) {
	if c.inBack {
		c.backRecords++
		if t.backlogCheckpointDue(c) {
			t.needCkpt = true
		}
	}
}

// fireDue fires, in real-time mode, the timers of an event-time chain that its watermark has
// reached (fireTimers).
func (t *Task) fireDue(c *chain) error {
	if c.inBack || !c.timed() {
		return nil
	}
	return t.fireTimers(c)
}

// apply folds one projected input (after its tag byte; tagPartial: a partial state, merged)
// into key's state: in backlog, into the key's pre-aggregated partial while the table has room
// for it, else into the sorter; in real-time, into the key's cache entry.
func (t *Task) apply(c *chain, key []byte, offset int64, in []byte) error {
	agg := c.ops.Agg
	fold := agg.Fold
	if in[0] == tagPartial {
		fold = agg.Merge
	}
	if c.inBack {
		// Keys that fit the table are aggregated in memory; the rest are sorted.
		if i, st, ok := c.part.slot(key, agg.InitState); ok {
			c.part.set(i, st, fold(st, in[1:]))
			return nil
		}
		if c.part.bypass && c.part.len() > 0 {
			if err := t.spillPartials(c); err != nil {
				return err
			}
		}
		if err := c.sorter.Add(key, c.rec.Time, offset, in); err != nil {
			// The sorter could not spill (disk full?): a task failure, not a bad record.
			return fmt.Errorf("task %d: sorter: %w", t.partition, err)
		}
		return nil
	}
	e, err := t.load(c, key, true)
	if err != nil {
		return fmt.Errorf("task %d: state: %w", t.partition, err)
	}
	e.state = fold(e.state, in[1:])
	if !e.dirty {
		e.dirty = true
		c.dirty = append(c.dirty, e)
	}
	if !e.stored && !e.updated && agg.Closes() {
		at, _ := agg.CloseAt(e.key)
		heap.Push(&c.tm.added, timer{at: at, key: string(e.key)})
	}
	e.updated = true
	return nil
}

// load returns key's cache entry, reading the store on a miss and evicting clean entries when
// the cache is full. A key in neither gets a new empty state, or, unless create, nil. A cache
// full of dirty entries asks for a checkpoint.
func (t *Task) load(c *chain, key []byte, create bool) (*entry, error) {
	if e, ok := c.cache[string(key)]; ok {
		return e, nil
	}
	t.makeRoom(c)
	size := c.ops.Agg.StateSize()
	e := &entry{key: bytes.Clone(key), state: make([]byte, 0, size)}
	v, ok, err := t.d.Store.Get(c.ns, key, e.state)
	if err != nil {
		return nil, err
	}
	if ok && !c.ops.Agg.ValidSize(len(v)) {
		return nil, t.badState(c, key, v)
	}
	switch {
	case ok:
		e.state = v
		e.stored = true
	case !create:
		return nil, nil
	default:
		e.state = e.state[:size]
		c.ops.Agg.InitState(e.state)
	}
	c.cache[string(e.key)] = e
	return e, nil
}

// makeRoom evicts, when the cache is full, an eighth of its clean entries in one pass
// (amortized); with none clean it asks for a checkpoint, which makes every entry clean.
func (t *Task) makeRoom(c *chain) {
	if len(c.cache) < t.cacheCap {
		return
	}
	if clean := len(c.cache) - len(c.dirty); clean > 0 {
		evict := clean/8 + 1
		for k, e := range c.cache {
			if evict == 0 {
				break
			}
			if !e.dirty {
				delete(c.cache, k)
				evict--
			}
		}
	}
	if len(c.dirty) >= t.cacheCap {
		t.needCkpt = true
	}
}

// Sorted entries' payloads start with a tag: a record's projected input, or a key's partial
// state moved out of the pre-aggregation table (a slicing operator's slices have tags of their
// own: tagSlice, tagSlicePartial, slice.go).
const (
	tagInput   = 0
	tagPartial = 1
)

// spillPartials moves the pre-aggregation table's partial states into the sorter (tagged) and
// frees the table: it has stopped being consulted, and its memory is better spent sorting.
func (t *Task) spillPartials(c *chain) error {
	var buf []byte
	tag := byte(tagPartial)
	if c.slices.w != nil {
		tag = tagSlicePartial // the table holds only slices
	}
	err := c.part.each(func(key, st []byte) error {
		buf = append(append(buf[:0], tag), st...)
		return c.sorter.Add(key, 0, 0, buf)
	})
	if err != nil {
		return fmt.Errorf("task %d: sorter: %w", t.partition, err)
	}
	c.part.drop()
	return nil
}

// buffered is how much a keyed chain holds of a backlog not yet folded into state: records in
// the sorter plus pre-aggregated keys.
func (c *chain) buffered() int64 {
	var n int64
	if c.sorter != nil {
		n += c.sorter.Len()
	}
	if c.part != nil {
		n += int64(c.part.len())
	}
	if c.last != nil {
		n += int64(c.last.len())
	}
	return n
}

// Restored tells the task its state is up to date (after the changelog restore), so it can
// learn whether earlier backlog checkpoints left keys whose output is still due.
func (t *Task) Restored() error {
	t.must("Restored", phaseIdle)
	for _, c := range t.chains {
		if !c.ops.Keyed() {
			continue
		}
		has, err := changelog.HasAny(t.d.Store, c.pendNS)
		if err != nil {
			return err
		}
		c.hasPending = has
		if c.timed() {
			if err := t.restoreWindows(c); err != nil {
				return fmt.Errorf("task %d: %w", t.partition, err)
			}
		}
	}
	return nil
}

// Backlogged reports whether every chain of the task holds a backlog: a keyed operator in
// backlog mode, or a chain without one whose input the lag calls a backlog (or whose writers
// said so, across an internal topic). Then none of its outputs waits on a real-time checkpoint,
// and the checkpoints may come backlog.commit_interval apart. It is as of the task's last step
// (each slice of records processed, each checkpoint), and safe for concurrent use.
func (t *Task) Backlogged() bool { return t.backlogged.Load() }

// backlogNow is Backlogged as of now (task goroutine).
func (t *Task) backlogNow() bool {
	for _, c := range t.chains {
		if !c.writerBacklog() {
			return false
		}
	}
	return len(t.chains) > 0
}

// InBacklog reports whether any keyed chain reading topic is in backlog mode.
func (t *Task) InBacklog(topic string) bool {
	for _, c := range t.byTopic[topic] {
		if c.inBack {
			return true
		}
	}
	return false
}

// NeedsCheckpoint reports whether the task asked for a checkpoint as soon as possible (a mode
// switch is waiting, or the cache is full of dirty entries).
func (t *Task) NeedsCheckpoint() bool { return t.needCkpt }

func (t *Task) deadLetter(c *chain, kr *kgo.Record, op string, err error) {
	t.deadLetterReason(c, kr, op, err.Error(), nil)
}

// deadLetterReason holds kr for the dead-letter topic with header sluice.error = reason and the
// extra headers. Every dead letter is built here, by newDeadLetter (deadletter.go), which
// bounds its size.
func (t *Task) deadLetterReason(c *chain, kr *kgo.Record, op, reason string, extra []kgo.RecordHeader) {
	c.dead++
	t.d.Metrics.deadLetter(op)
	c.dlq = append(c.dlq, newDeadLetter(t.plan.Config.DLQTopic(), kr, op, reason, extra))
}

// Close releases the task's sorters (dropping anything buffered: nothing of it was committed).
func (t *Task) Close() {
	if t.phase != phaseClosed && t.Waiting() {
		t.d.Metrics.joinWaiting(-1)
	}
	t.phase = phaseClosed
	if t.prep != nil {
		t.abortPending(t.prep)
		t.prep = nil
	}
	for _, c := range t.chains {
		if c.sorter != nil && c.primary {
			_ = c.sorter.Close()
		}
		if c.det != nil {
			t.d.Metrics.forget(c)
		}
	}
}

// errTracker keeps the first error of a set of produce promises. Safe for concurrent use.
type errTracker struct {
	mu  sync.Mutex
	err error
}

func (e *errTracker) promise(r *kgo.Record, err error) {
	if err != nil {
		e.mu.Lock()
		if e.err == nil {
			e.err = produceError(r, err)
		}
		e.mu.Unlock()
	}
}

func (e *errTracker) get() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// statelessOut is a stateless chain's output record (its sink's, a tap's, a tombstone) of key and
// value, stamped with the batch's clock: not one reading per record, as franz-go stamps a record
// that has none (time.Now: 4% of a pass-through's CPU).
func (t *Task) statelessOut(topic string, key, value []byte) *kgo.Record {
	out := t.arena.out(topic, -1, key, value)
	out.Timestamp = t.now
	return out
}

// tap writes the chain's current record to the sinks tapped after stage si (-1: as it arrives,
// before the first stage), inside the open transaction like any stateless output.
func (t *Task) tap(c *chain, si int) {
	for _, tap := range c.plan.Taps {
		if tap.Stage == si {
			t.d.Producer.Produce(t.statelessOut(tap.SinkTopic, c.rec.Key, c.rec.Value), t.out.promise)
			c.recordsOut++
			t.d.Metrics.recordsOut(tap.SinkTopic, 1)
		}
	}
}
