package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/operators"
	"github.com/sluice-dev/sluice/operators/task"
	"github.com/sluice-dev/sluice/producer"
)

// batch is one fetched partition's records with the lag the fetch reported after them.
type batch struct {
	topic                 string
	next                  int64 // the offset after the batch as fetched (past transaction markers)
	recs                  []*kgo.Record
	lag, lagAfter         int64 // records left to process before and after the batch
	timeLag, timeLagAfter time.Duration
	epoch                 uint64
	end                   bool // bounded run: the batch reaches the end offset the partition had at start
	// closes: no records; a bounded run's internal topic ends at offset closeAt (closeInternal),
	// 0 when it is empty
	closes  bool
	closeAt int64
}

type ckptReq struct {
	reply   chan ckptReply
	outcome chan bool // committed?
	ack     chan ckptAck
	pd      *task.Pending // set by the poll loop from reply
}

type ckptReply struct {
	pd  *task.Pending
	err error
}

type ckptAck struct {
	seek map[string]int64 // after an abort: where to rewind
	err  error
}

// runner is the goroutine that owns one task: one partition number of a group of co-partitioned
// topics (Plan.CoPartitioned; a topic in no join is a group of its own).
type runner struct {
	key      tp              // the group's first topic and the partition number
	topics   []string        // the group's topics assigned to this member (all of them, with the co-partitioning balancer)
	t        *task.Task      // built by the task goroutine; other goroutines read it only once restored
	in       chan batch      // bounded: the poll loop blocks (and serves checkpoints) when full
	ckpt     chan *ckptReq   // checkpoint requests from the poll loop
	done     chan struct{}   // closed when the goroutine has exited
	ctx      context.Context // the task goroutine's context (set before it starts)
	cancel   context.CancelFunc
	restored atomic.Bool
	finished atomic.Bool      // bounded run: the task has committed the end of its input
	first    map[string]int64 // by topic: first offset dispatched since assignment or the last abort (guarded by Engine.mu)
	// committed: by topic, the offset this member last committed for the partition (guarded by
	// Engine.mu); with first, where a restart resumes (standingOffset).
	committed map[string]int64
	waiting   bool // the task's streams are paused until its tables load (runner goroutine only)
	// Bounded run: by topic, the offset after the last batch processed (past transaction
	// markers) in epoch posEpoch (runner goroutine only).
	pos      map[string]int64
	posEpoch uint64
}

func (r *runner) isRestored() bool { return r.restored.Load() }

// assigned starts a task goroutine per new partition. It runs in a franz-go callback: under
// Engine.mu it only registers the runners; it pauses the partitions (each goroutine builds its
// task, restores it and resumes its partition) and starts the goroutines, and does no Pebble or
// file-system work itself.
func (e *Engine) assigned(ctx context.Context, cl *kgo.Client, a map[string][]int32) {
	// The client joins the group as soon as it exists, so this can run before Run has stored
	// the session its tasks produce through.
	<-e.sessSet
	e.outcome.Lock() // not while a checkpoint rewinds the consumer (Engine.outcome)
	defer e.outcome.Unlock()
	if !e.sessAssigned.Swap(true) {
		// The session's first join replaced this instance id's previous member. If the group
		// was stable, Kafka did so without a rebalance (KIP-345) and handed back that member's
		// last assignment. Had it died between the two rounds of a cooperative rebalance
		// (after revoking partitions, before the rejoin that lets the group assign them),
		// those partitions would have no owner until the membership changed again. A rejoin
		// now carries the partitions this member owns, which the group has not seen from it,
		// so the group rebalances and the leader assigns whatever nobody owns.
		e.log.Info("rejoining the group once after the session's first assignment, so that no partition is left without an owner", "partitions", a)
		cl.ForceRebalance()
	}
	pause := map[string][]int32{}
	var start []*runner
	e.mu.Lock()
	for _, topic := range sortedTopics(a) {
		for _, p := range a[topic] {
			k := tp{e.groupOf(topic), p}
			pause[topic] = append(pause[topic], p)
			if r := e.runs[k]; r != nil {
				if slices.Contains(start, r) && !slices.Contains(r.topics, topic) {
					r.topics = append(r.topics, topic) // another topic of the same group and number
				} else if !slices.Contains(r.topics, topic) {
					e.log.Error("a topic of a co-partitioned group was assigned apart from the others; its records are not processed (the group's members must all use sluice's co-partitioning balancer)", "topic", topic, "partition", p, "task_topics", r.topics)
				}
				continue
			}
			rctx, cancel := context.WithCancel(ctx)
			r := &runner{key: k, topics: []string{topic}, in: make(chan batch, 1), ckpt: make(chan *ckptReq, 1), done: make(chan struct{}), cancel: cancel, first: map[string]int64{}, committed: map[string]int64{}}
			e.runs[k] = r
			r.ctx = rctx
			start = append(start, r)
		}
	}
	n, parts := len(e.runs), e.partitionsLocked()
	e.mu.Unlock()
	if e.o.Partitions != nil {
		e.o.Partitions(parts)
	}
	// Pause before the goroutines start: each resumes its partition once restored.
	cl.PauseFetchPartitions(pause)
	for _, r := range start {
		go e.run(r.ctx, cl, r)
	}
	e.m.tasks.Set(float64(n))
	e.log.Info("partitions assigned", "partitions", a)
}

// revoked stops the tasks of revoked or lost partitions and waits for their goroutines (a
// cancelled goroutine stops its restore or fold promptly and closes its task). Their
// uncommitted work is dropped: the next owner re-reads from the last committed offsets.
func (e *Engine) revoked(rv map[string][]int32, how string) {
	e.outcome.Lock() // not while a checkpoint rewinds the consumer (Engine.outcome)
	defer e.outcome.Unlock()
	var stop []*runner
	e.mu.Lock()
	for topic, ps := range rv {
		for _, p := range ps {
			k := tp{e.groupOf(topic), p}
			if r := e.runs[k]; r != nil {
				stop = append(stop, r)
				delete(e.runs, k)
			}
		}
	}
	e.m.tasks.Set(float64(len(e.runs)))
	parts := e.partitionsLocked()
	e.mu.Unlock()
	if e.o.Partitions != nil {
		e.o.Partitions(parts)
	}
	for _, r := range stop {
		r.cancel()
		<-r.done
	}
	if len(rv) > 0 {
		e.log.Info("partitions "+how, "partitions", rv)
	}
}

func (e *Engine) stopAll() {
	e.mu.Lock()
	all := map[string][]int32{}
	for k, r := range e.runs {
		for _, topic := range r.topics {
			all[topic] = append(all[topic], k.p)
		}
	}
	e.mu.Unlock()
	e.revoked(all, "released")
}

// run is a task goroutine: build the task, restore it, then process batches and take part in
// checkpoints. It closes the task when it exits.
func (e *Engine) run(ctx context.Context, cl *kgo.Client, r *runner) {
	defer close(r.done)
	if want := e.groups[r.key.topic]; len(r.topics) != len(want) {
		e.fail(fmt.Errorf("consumer: partition %d of %v was assigned without the rest of its co-partitioned group %v: every member of the group must run this sluice (its balancer keeps a partition number of co-partitioned topics together)", r.key.p, r.topics, want))
		return
	}
	t, err := task.NewGroup(e.o.Plan, r.topics, r.key.p, task.Deps{
		Store: e.o.Store, Budget: e.o.Budget, SortDir: e.o.SortDir, Producer: e.out,
		Clock: e.o.Clock, Logger: e.log.With("topics", r.topics), Metrics: e.tm, Values: e.o.Values,
		InternalPartitions: e.internalParts, Bounded: e.o.Bounded,
	})
	if err != nil {
		e.fail(fmt.Errorf("consumer: task %s[%d]: %w", r.key.topic, r.key.p, err))
		return
	}
	defer t.Close()
	r.t = t // published to other goroutines by r.restored
	start := e.o.Clock()
	replayed := false // whether the restore changed the store since NewGroup read it
	for ns, topic := range r.t.Namespaces() {
		st, err := e.rest.Restore(ctx, topic, ns)
		if err != nil {
			if ctx.Err() == nil {
				e.fail(fmt.Errorf("consumer: restore %s[%d]: %w", topic, ns.Partition, err))
			}
			return
		}
		e.m.restored.Add(float64(st.Records))
		replayed = replayed || st.Records > 0 || st.Full
		if st.Records > 0 || st.Full {
			e.log.Info("state restored", "operator", ns.Operator, "partition", ns.Partition, "records", st.Records, "from", st.From, "to", st.To, "full", st.Full, "duration", st.Duration.Round(time.Millisecond))
		}
	}
	e.m.restoreSeconds.Observe(e.o.Clock().Sub(start).Seconds())
	// NewGroup read the store as it was (outputs still due from backlog checkpoints, the
	// watermarks, the timers rebuilt by a scan of the stored windows); only a restore that
	// replayed changelog records makes it read them again.
	if replayed {
		if err := r.t.Restored(); err != nil {
			e.fail(fmt.Errorf("consumer: task %s[%d]: %w", r.key.topic, r.key.p, err))
			return
		}
	}
	if len(r.t.Tables()) > 0 {
		if !e.startTables(ctx, cl, r) {
			return
		}
	}
	if err := e.loadProgress(ctx, r); err != nil {
		if ctx.Err() == nil {
			e.fail(err)
		}
		return
	}
	r.restored.Store(true)
	e.resume(cl, r)
	for _, topic := range r.topics {
		if bd, ok := e.bound(tp{topic, r.key.p}); ok && bd.start >= bd.end {
			// A bounded run with nothing to read here: this input ends now.
			if !e.endInput(ctx, r, topic) {
				return
			}
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case q := <-r.ckpt:
			if !e.serveCheckpoint(ctx, r, q) {
				return
			}
		case b := <-r.in:
			was := r.t.Backlogged()
			if !e.handleBatch(ctx, cl, r, b) {
				return
			}
			if was && !r.t.Backlogged() {
				// The poll may be waiting out backlog.commit_interval: the checkpoints are
				// commit_interval apart again from now (this task's outputs wait on them).
				signal(e.wake)
			}
		}
	}
}

// handleBatch runs one batch the poll loop sent to the task: a bounded run's end of an internal
// topic, a table's records, or a stream's records in the mode the policy chooses (a switch
// checkpoints first), then what the lag after it asks for. It returns false if the goroutine
// must exit.
func (e *Engine) handleBatch(ctx context.Context, cl *kgo.Client, r *runner, b batch) bool {
	if b.closes {
		// An internal topic of a bounded run ended: the input ends now if the task has
		// processed it to there; if not, the batch that gets there will say so.
		pos, ok := r.pos[b.topic]
		if !ok || r.posEpoch != e.currentEpoch() {
			pos = r.t.Next(b.topic) // after an abort: the refetch from the commit gets there
		}
		if bd, _ := e.bound(tp{b.topic, r.key.p}); pos < 0 {
			pos = bd.start
		}
		if pos >= b.closeAt && !e.endInput(ctx, r, b.topic) {
			return false
		}
		return true
	}
	if b.epoch != e.currentEpoch() {
		return true // fetched before an abort rewound the consumer
	}
	if e.isTable(b.topic) {
		if err := r.t.ProcessTable(b.topic, b.recs, b.next); err != nil {
			e.fail(err)
			return false
		}
		if r.waiting && !r.t.Waiting() {
			e.resume(cl, r) // the snapshot is loaded: the streams go on
		}
		return true
	}
	// The mode this batch runs in (the policy is package backlog's; Task.BeforeBatch asks it).
	lag := task.Lag{Before: b.lag, After: b.lagAfter, TimeBefore: b.timeLag, TimeAfter: b.timeLagAfter}
	r.t.ReadAttributes(b.topic, b.recs) // a writer's mode, in-band (attributes.go)
	if r.t.BeforeBatch(b.topic, lag) {
		// A mode switch needs a checkpoint before this batch is processed.
		if !e.switchNow(ctx, r) {
			return false
		}
		if b.epoch != e.currentEpoch() {
			return true
		}
	}
	if !e.process(ctx, r, b) {
		return false
	}
	if e.o.Bounded {
		if r.posEpoch != b.epoch || r.pos == nil {
			r.pos, r.posEpoch = map[string]int64{}, b.epoch
		}
		r.pos[b.topic] = b.next
	}
	if b.end && b.epoch == e.currentEpoch() {
		if !e.endInput(ctx, r, b.topic) {
			return false
		}
		return true
	}
	// The lag left after the batch: a task that has caught up folds its backlog and
	// waits for the checkpoint that commits it.
	r.t.AfterBatch(b.topic, lag)
	if r.t.WantsFold() {
		if !e.switchNow(ctx, r) {
			return false
		}
	} else if r.t.NeedsCheckpoint() {
		e.askCheckpoint()
	}
	return true
}

// endInput ends one input of a bounded run's task: topic reached the end offset it had at
// start, so its windows close (an operator of several inputs: once every input has ended) and
// a backlog folds; it checkpoints that. It returns false if the goroutine must exit. An aborted
// checkpoint leaves the task unfinished: the consumer rewinds and the task ends its inputs again
// when it gets there.
func (e *Engine) endInput(ctx context.Context, r *runner, topic string) bool {
	if err := r.t.EndInput(topic); err != nil {
		e.fail(err)
		return false
	}
	if !e.switchNow(ctx, r) {
		return false
	}
	if r.t.Finished() {
		r.finished.Store(true)
		signal(e.wake) // an internal topic whose writers are done now ends at once (closeInternal)
		e.log.Info("input ended", "topics", r.topics, "partition", r.key.p)
	}
	return true
}

// switchNow does the task's part of a mode switch: it folds the backlogs that end now (Prepare,
// outside the checkpoint barrier, while the poll loop holds back checkpoints and the other tasks
// go on), asks for a checkpoint and serves it. It returns false if the goroutine must exit. A
// revoke cancels ctx and with it the fold; that is no failure of the engine (the revoke aborts
// the transaction that holds the fold's records).
func (e *Engine) switchNow(ctx context.Context, r *runner) bool {
	if r.t.WantsFold() {
		e.folding.Add(1)
		err := r.t.Prepare(ctx, e.out)
		e.folding.Add(-1)
		if err != nil {
			if ctx.Err() == nil {
				e.fail(err)
			}
			return false
		}
	}
	e.askCheckpoint()
	select {
	case <-ctx.Done():
		return false
	case q := <-r.ckpt:
		return e.serveCheckpoint(ctx, r, q)
	}
}

// serveCheckpoint writes the task's checkpoint, waits for the outcome and applies it. It
// returns false if the goroutine must exit.
func (e *Engine) serveCheckpoint(ctx context.Context, r *runner, q *ckptReq) bool {
	pd, err := r.t.Checkpoint(e.out)
	q.reply <- ckptReply{pd: pd, err: err}
	if err != nil {
		return false
	}
	var committed bool
	select {
	case committed = <-q.outcome:
	case <-ctx.Done():
		r.t.Aborted(pd)
		return false
	}
	if committed {
		err := r.t.Committed(pd)
		q.ack <- ckptAck{err: err}
		return err == nil
	}
	q.ack <- ckptAck{seek: r.t.Aborted(pd)}
	return true
}

func (e *Engine) currentEpoch() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.epoch
}

// slice is how many records a task processes between chances to checkpoint. A fetch can carry
// tens of thousands of records per partition; a task whose cache fills with dirty keys (or whose
// backlog checkpoint is due) checkpoints within the batch, so neither its dirty set nor the open
// transaction's age grows with the fetch size.
const slice = 2048

// process runs batch b through the task in slices. It returns false if the goroutine must exit.
func (e *Engine) process(ctx context.Context, r *runner, b batch) bool {
	recs := b.recs
	for len(recs) > 0 {
		n := min(len(recs), slice)
		if err := r.t.Process(b.topic, recs[:n]); err != nil {
			e.fail(err)
			return false
		}
		recs = recs[n:]
		if len(recs) == 0 {
			continue
		}
		// A checkpoint is a barrier across all tasks: serve one that is waiting between slices,
		// so no task holds the others up for the rest of a large batch.
		var q *ckptReq
		if r.t.NeedsCheckpoint() {
			e.askCheckpoint()
			select {
			case <-ctx.Done():
				return false
			case q = <-r.ckpt:
			}
		} else {
			select {
			case q = <-r.ckpt:
			default:
				continue
			}
		}
		if !e.serveCheckpoint(ctx, r, q) {
			return false
		}
		if b.epoch != e.currentEpoch() {
			return true // aborted: the consumer was rewound; the rest is fetched again
		}
	}
	return true
}

// startTables prepares the task's table partitions (FLIP-326): each is read from the offset its
// store recorded (or its log start), and its snapshot is the end offset (last stable) it has
// now. The task's streams stay paused until every table has loaded its snapshot. It returns
// false if the goroutine must exit.
func (e *Engine) startTables(ctx context.Context, cl *kgo.Client, r *runner) bool {
	tables := r.t.Tables()
	// Retried: a broker that died may still lead these partitions in the client's metadata.
	starts, err := producer.RetryList(ctx, func() (kadm.ListedOffsets, error) { return e.adm.ListStartOffsets(ctx, tables...) })
	var ends kadm.ListedOffsets
	if err == nil {
		ends, err = producer.RetryList(ctx, func() (kadm.ListedOffsets, error) { return e.adm.ListCommittedOffsets(ctx, tables...) })
	}
	if err != nil {
		if ctx.Err() == nil {
			e.fail(fmt.Errorf("consumer: task %d: list the offsets of its tables %v: %w", r.key.p, tables, err))
		}
		return false
	}
	// The group's committed offsets of the tables move with their dead letters.
	committed, err := producer.Retry(ctx, func() (kadm.OffsetResponses, error) { return e.adm.FetchOffsets(ctx, e.o.Config.Group) })
	if errors.Is(err, kerr.GroupIDNotFound) {
		err = nil
	}
	if err != nil {
		if ctx.Err() == nil {
			e.fail(fmt.Errorf("consumer: task %d: fetch the group's offsets of its tables: %w", r.key.p, err))
		}
		return false
	}
	seek := map[string]map[int32]kgo.EpochOffset{}
	for _, topic := range tables {
		st, okS := starts.Lookup(topic, r.key.p)
		end, okE := ends.Lookup(topic, r.key.p)
		if !okS || !okE || st.Err != nil || end.Err != nil {
			e.fail(fmt.Errorf("consumer: task %d: no offsets listed for table partition %s[%d]", r.key.p, topic, r.key.p))
			return false
		}
		at := int64(-1)
		if c, ok := committed.Lookup(topic, r.key.p); ok && c.Err == nil {
			at = c.At
		}
		r.t.SetTableCommitted(topic, at)
		r.t.SetTableEnd(topic, st.Offset, end.Offset)
		from, _ := r.t.TableStart(topic)
		from = max(from, st.Offset)
		seek[topic] = map[int32]kgo.EpochOffset{r.key.p: {Epoch: -1, Offset: from}}
		e.log.Info("table partition: reading its snapshot before the streams", "topic", topic, "partition", r.key.p, "from", from, "snapshot_end", end.Offset)
	}
	cl.SetOffsets(seek)
	return true
}

// resume resumes the task's partitions: its tables always, its streams unless they wait for
// a table's snapshot.
func (e *Engine) resume(cl *kgo.Client, r *runner) {
	r.waiting = r.t.Waiting()
	res := map[string][]int32{}
	for _, topic := range r.topics {
		if !r.waiting || e.isTable(topic) {
			res[topic] = []int32{r.key.p}
		}
	}
	cl.ResumeFetchPartitions(res)
}

// partitionsLocked returns the number of topic-partitions the member's tasks consume. e.mu is
// held.
func (e *Engine) partitionsLocked() int {
	n := 0
	for _, r := range e.runs {
		n += len(r.topics)
	}
	return n
}

func sortedTopics(a map[string][]int32) []string {
	ts := make([]string, 0, len(a))
	for t := range a {
		ts = append(ts, t)
	}
	sort.Strings(ts)
	return ts
}

// encoding returns p, encoding the values of records to the topics of encoders first (sinks of
// format avro). A value that cannot be encoded fails its record like a refused produce: the
// checkpoint aborts, and the repeated failure is reported and bounded as any record that cannot
// be produced (consumer/failure.go).
func encoding(p task.Producer, encoders map[string]operators.ValueEncoder) task.Producer {
	if len(encoders) == 0 {
		return p
	}
	return encodingProducer{p: p, enc: encoders}
}

type encodingProducer struct {
	p   task.Producer
	enc map[string]operators.ValueEncoder
}

func (e encodingProducer) Produce(r *kgo.Record, promise func(*kgo.Record, error)) {
	if enc, ok := e.enc[r.Topic]; ok && r.Value != nil {
		v, err := enc.AppendValue(nil, r.Value)
		if err != nil {
			promise(r, fmt.Errorf("consumer: encoding a record for sink topic %s: %w", r.Topic, err))
			return
		}
		r.Value = v
	}
	e.p.Produce(r, promise)
}

// loadProgress gives the task the progress of the chains that read one of its topics together
// (several operators reading one input), committed as the metadata of the topic's offset: a
// chain ahead of the offset skips what it has done.
func (e *Engine) loadProgress(ctx context.Context, r *runner) error {
	var topics []string
	for _, topic := range r.topics {
		if r.t.Branches(topic) {
			topics = append(topics, topic)
		}
	}
	if len(topics) == 0 || e.o.Config.Processing.Guarantee != configs.ExactlyOnce {
		return nil
	}
	// Stable: a transaction of the previous owner still open holds its offsets back.
	committed, err := producer.Retry(ctx, func() (kadm.OffsetResponses, error) {
		rs, err := e.adm.FetchOffsets(kadm.RequireStable(ctx), e.o.Config.Group)
		if err == nil {
			err = rs.Error()
		}
		return rs, err
	})
	if errors.Is(err, kerr.GroupIDNotFound) {
		return nil // a new group: no chain has done anything
	}
	if err != nil {
		return fmt.Errorf("consumer: task %s[%d]: fetch the chains' progress: %w", r.key.topic, r.key.p, err)
	}
	for _, topic := range topics {
		o, ok := committed.Lookup(topic, r.key.p)
		if !ok {
			continue
		}
		progress, err := task.DecodeProgress(o.Metadata)
		if err != nil {
			return fmt.Errorf("consumer: %s[%d]: %w", topic, r.key.p, err)
		}
		if len(progress) > 0 {
			r.t.SetProgress(topic, o.At, progress)
			e.log.Info("branches resume where each left off", "topic", topic, "partition", r.key.p, "committed", o.At, "ahead", progress)
		}
	}
	return nil
}
