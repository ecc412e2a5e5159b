// Package producer owns sluice's Kafka client and makes checkpoints atomic.
//
// Exactly-once: one franz-go GroupTransactSession per process, transactional.id
// <group>-<instance_id>. A transaction stays open between checkpoints; a checkpoint flushes the
// tasks' records (outputs, changelog, dead letters), commits the input offsets the tasks report
// in the same transaction (KIP-447: TxnOffsetCommit carries the group generation and member, so
// a zombie is fenced), and ends it. The offsets committed are the ones each task has folded into
// its state — not every offset polled, which is what franz-go would commit by default: a task in
// backlog mode has polled records that sit in its sorter and must not be committed yet. The
// session's TxnOffsetCommit is rewritten through kgo.PreTxnCommitFnContext.
//
// At-least-once: an idempotent producer; a checkpoint flushes, and once every record is
// acknowledged, commits the offsets with a plain OffsetCommit.
//
// Batches are sized per topic by what the broker accepts for it (Limits: each written topic's
// max.message.bytes, read at start), so no transaction aborts on a batch too large (unless a
// topic's limit is lowered while sluice runs).
//
// The same client consumes (it is the group member): the consumer package polls through Session.
// Its group balancer is cooperative-sticky, or CoPartitioned (balancer.go) when a pipeline has
// co-partitioned topics (joins, cogroups). A transaction end that hangs for 5 s lets a blocked
// rebalance callback run (Session.End): a member the group dropped would otherwise deadlock.
package producer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Guarantee is processing.guarantee.
type Guarantee int

const (
	ExactlyOnce Guarantee = iota
	AtLeastOnce
)

// Options configure a Session. Group options (rebalance callbacks) come in through GroupOpts.
type Options struct {
	Brokers            []string
	Group              string
	InstanceID         string // static member id (KIP-345)
	TransactionalID    string // exactly-once only
	TransactionTimeout time.Duration
	Guarantee          Guarantee
	Topics             []string // topics to consume
	// CoPartitioned are the groups of topics whose partition p must go to one member (a task
	// spans them); a topic in none is balanced alone.
	CoPartitioned [][]string
	FetchMaxBytes int64 // bound of one fetch response (kafka.fetch_max_bytes); 0: 32 MiB
	// Compression is the codec of the produced batches (kafka.compression: none, snappy, lz4,
	// zstd, gzip); "" is none.
	Compression string
	// Limits are the effective max.message.bytes of the topics the session writes
	// (changelog.MaxMessageBytes, read at start): each topic's batches are bounded by
	// Limits.BatchMaxBytes. A topic missing from it gets DefaultBatchMaxBytes.
	Limits Limits
	Logger *slog.Logger
	// Extra are appended to the client options: the connection's (dial.Opts: TLS, SASL),
	// callbacks, tuning, test hooks.
	Extra []kgo.Opt
}

// Session is the process's Kafka client: group consumer and (transactional) producer. Poll,
// AllowRebalance, Begin and End must be called from one goroutine (the consumer's poll loop);
// Produce is safe for concurrent use by task goroutines while a transaction is open.
type Session struct {
	g    Guarantee
	txn  *kgo.GroupTransactSession // exactly-once
	cl   *kgo.Client
	open bool
	// lost: End or Begin failed for want of a broker; the session can only be abandoned
	// (ErrSessionLost).
	lost bool
	// produced is set by Produce (any goroutine) and cleared by End: whether the open
	// transaction holds records.
	produced atomic.Bool
	log      *slog.Logger // Options.Logger, or nil
}

// Partitioner places records: a record with a partition set (>= 0: changelog records, which
// must land on the task's own partition) keeps it; a keyed record goes where Kafka's default
// partitioner would put it (murmur2), so sluice's outputs are co-partitioned with what a Java
// client would write; a record without key goes to partition 0.
func Partitioner() kgo.Partitioner {
	hash := kgo.KafkaHasher(Murmur2)
	return kgo.BasicConsistentPartitioner(func(string) func(*kgo.Record, int) int {
		return func(r *kgo.Record, n int) int {
			switch {
			case r.Partition >= 0:
				return int(r.Partition) % n
			case r.Key != nil:
				return hash(r.Key, n)
			}
			return 0
		}
	})
}

// endStuck is how long a transaction's end may take before End lets a blocked rebalance
// callback run (see End).
const endStuck = 5 * time.Second

// metadataMinAge is the least time between two metadata refreshes of a client.
const metadataMinAge = 500 * time.Millisecond

// DefaultFetchMaxWait is how long a fetch waits for data before the broker answers empty. A
// partition resumed after its restore joins the next fetch only, after the one in flight, which
// at the start of a backlog holds only idle topics and waits this long: 500 ms (the Java
// consumer's default) kept every task of a bounded run waiting about half a second at its start.
// Idle, a member sends ten fetches a second to each broker.
const DefaultFetchMaxWait = 100 * time.Millisecond

// BatchMaxBytes caps a produced batch before compression, whatever its topic accepts: the bound
// of the batches of a topic whose max.message.bytes is larger (bigger batches buy little
// throughput and hold more memory per partition).
const BatchMaxBytes = 4 << 20

// DefaultBatchMaxBytes bounds the batches of a topic whose max.message.bytes is not known (one
// not read at start): Kafka's historical default message.max.bytes, which franz-go also
// assumes, and no larger than any broker default since.
const DefaultBatchMaxBytes = 1_000_012

// minBatchMaxBytes is the smallest batch bound franz-go accepts.
const minBatchMaxBytes = 512

// Limits maps a topic to its effective max.message.bytes (its own override, or the broker's
// message.max.bytes): the largest record batch the broker accepts for it, measured after
// compression. Build it before Open and do not change it after: it is read concurrently.
type Limits map[string]int32

// BatchMaxBytes returns the bound of a produced batch of topic (kgo.ProducerBatchMaxBytesFn):
// the topic's max.message.bytes, at most BatchMaxBytes, at least 512 (franz-go's floor), and
// DefaultBatchMaxBytes for a topic not in l. franz-go counts a batch uncompressed, with 4 bytes
// of length prefix the broker does not count, and sends a batch compressed only when that is
// smaller; the broker checks the batch as sent, so a batch within this bound always fits (but
// for a topic that accepts less than 512 bytes). A record that does not fit in a batch of its
// own fails at once with kerr.MessageTooLarge (the tasks' producer turns those into dead
// letters before: operators/task.LimitSizes).
func (l Limits) BatchMaxBytes(topic string) int32 {
	n, ok := l[topic]
	if !ok {
		n = DefaultBatchMaxBytes
	}
	return max(min(n, BatchMaxBytes), minBatchMaxBytes)
}

// balancer is CoPartitioned(groups) when a group has several topics (a pipeline with joins),
// else franz-go's cooperative-sticky balancer (what groups without joins have always used, so
// their members keep agreeing on a protocol across an upgrade).
func balancer(groups [][]string) kgo.GroupBalancer {
	for _, g := range groups {
		if len(g) > 1 {
			return CoPartitioned(groups)
		}
	}
	return kgo.CooperativeStickyBalancer()
}

// FetchOpts are the fetch options of a Session whose Options.FetchMaxBytes is fetchMaxBytes (0:
// 32 MiB): read_committed, the response and per-partition bounds, and the wait of a fetch
// without data. A reader that must fetch as sluice does (sluice bench's consume-only ceiling)
// uses them too.
func FetchOpts(fetchMaxBytes int64) []kgo.Opt {
	if fetchMaxBytes <= 0 {
		fetchMaxBytes = 32 << 20
	}
	return []kgo.Opt{
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Large fetches keep a backlog flowing (smaller ones cost round trips), but records stay
		// in their response's buffer until processed: see kafka.fetch_max_bytes and the fetch
		// sizing figures in BENCHMARKS.md. Per partition a fetch brings at most 2 MiB (~20k
		// records): a task has at most two batches in hand (one queued), so that bounds the
		// decoded records alive per task, and one fetch serves many partitions at once (with
		// 8 MiB per partition, four partitions filled a fetch and starved the others).
		kgo.FetchMaxBytes(int32(fetchMaxBytes)),
		kgo.FetchMaxPartitionBytes(int32(min(fetchMaxBytes, 2<<20))),
		// A partition resumed after its restore joins the next fetch only, after the one in
		// flight returns; a fetch without data waits this long (kgo's default is 5s).
		kgo.FetchMaxWait(DefaultFetchMaxWait),
	}
}

// Codec returns the franz-go codec of a kafka.compression value ("" is none).
func Codec(name string) (kgo.CompressionCodec, error) {
	switch name {
	case "", "none":
		return kgo.NoCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	}
	return kgo.CompressionCodec{}, fmt.Errorf("kafka.compression: unknown codec %q", name)
}

// Open creates the client. It does not block on the network.
func Open(o Options) (*Session, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(o.Brokers...),
		kgo.ConsumerGroup(o.Group),
		kgo.ConsumeTopics(o.Topics...),
		kgo.Balancers(balancer(o.CoPartitioned)),
		kgo.RequireStableFetchOffsets(),
		kgo.BlockRebalanceOnPoll(),
		kgo.DisableAutoCommit(),
		kgo.RecordPartitioner(Partitioner()),
		kgo.SessionTimeout(10 * time.Second),
		kgo.RebalanceTimeout(5 * time.Minute),
		// Asked once per partition, when the client first sees it: the topics a pipeline
		// writes are all in o.Limits by then.
		kgo.ProducerBatchMaxBytesFn(o.Limits.BatchMaxBytes),
		kgo.MaxBufferedRecords(50000),
		kgo.ProducerLinger(5 * time.Millisecond),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// A produce to a topic created a moment ago (a sink, an internal topic) may find no
		// leader yet; franz-go retries after a metadata refresh, which it spaces by this much
		// (its default, 5s, stalled about one run in ten of a Nexmark query by 5 s).
		kgo.MetadataMinAge(metadataMinAge),
	}
	opts = append(opts, FetchOpts(o.FetchMaxBytes)...)
	codec, err := Codec(o.Compression)
	if err != nil {
		return nil, err
	}
	opts = append(opts, kgo.ProducerBatchCompression(codec))
	if o.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(o.InstanceID))
	}
	if o.Logger != nil {
		opts = append(opts, kgo.WithLogger(slogAdapter{o.Logger}))
	}
	s := &Session{g: o.Guarantee, log: o.Logger}
	if o.Guarantee == ExactlyOnce {
		if o.TransactionalID == "" {
			return nil, errors.New("producer: exactly-once needs a transactional id")
		}
		opts = append(opts, kgo.TransactionalID(o.TransactionalID))
		if o.TransactionTimeout > 0 {
			opts = append(opts, kgo.TransactionTimeout(o.TransactionTimeout))
		}
		opts = append(opts, o.Extra...)
		txn, err := kgo.NewGroupTransactSession(opts...)
		if err != nil {
			return nil, fmt.Errorf("producer: %w", err)
		}
		s.txn, s.cl = txn, txn.Client()
		return s, nil
	}
	opts = append(opts, o.Extra...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("producer: %w", err)
	}
	s.cl = cl
	return s, nil
}

// Client returns the underlying client (for polling helpers, pausing partitions, admin
// requests). Do not end transactions on it directly.
func (s *Session) Client() *kgo.Client { return s.cl }

// Poll fetches records; see kgo.Client.PollFetches. Call AllowRebalance when done with them.
func (s *Session) Poll(ctx context.Context) kgo.Fetches { return s.cl.PollFetches(ctx) }

// AllowRebalance lets a blocked rebalance proceed (kgo.BlockRebalanceOnPoll).
func (s *Session) AllowRebalance() { s.cl.AllowRebalance() }

// Begin opens a transaction if none is open (exactly-once); a no-op at-least-once.
func (s *Session) Begin() error {
	if s.txn == nil || s.open || s.lost {
		return nil
	}
	if err := s.txn.Begin(); err != nil && Retriable(err) {
		s.lost = true
		return fmt.Errorf("producer: begin transaction: %w: %w", ErrSessionLost, err)
	} else if err != nil {
		return fmt.Errorf("producer: begin transaction: %w", err)
	}
	s.open = true
	return nil
}

// Produce sends r; promise gets the result. Records for which the promise reports an error
// must make the caller end the checkpoint with commit=false.
func (s *Session) Produce(r *kgo.Record, promise func(*kgo.Record, error)) {
	if !s.produced.Load() { // a store on every record made the tasks fight over the line
		s.produced.Store(true)
	}
	s.cl.Produce(context.Background(), r, promise)
}

// Produced reports whether a record was produced since the last End.
func (s *Session) Produced() bool { return s.produced.Load() }

// Flush waits until every produced record has been acknowledged or failed (promises called).
func (s *Session) Flush(ctx context.Context) error {
	return s.cl.Flush(ctx)
}

// End finishes a checkpoint. With commit, the offsets (topic -> partition -> next offset) are
// committed atomically with every record produced since the previous End; without, or if
// anything fails, the transaction aborts. It reports whether the checkpoint committed. A false
// result with a nil error is an ordinary abort (for example a rebalance revoked partitions): the
// caller rewinds to the last committed checkpoint. An error is fatal for the session.
func (s *Session) End(ctx context.Context, offsets map[string]map[int32]int64, commit bool) (bool, error) {
	return s.EndWithMetadata(ctx, offsets, nil, commit)
}

// EndWithMetadata is End committing meta[topic][partition] as the metadata of those offsets
// (the rest carry the member id), in the same transaction. At least once, it is dropped.
func (s *Session) EndWithMetadata(ctx context.Context, offsets map[string]map[int32]int64, meta map[string]map[int32]string, commit bool) (bool, error) {
	if s.txn == nil {
		return s.endAtLeastOnce(ctx, offsets, commit)
	}
	if !s.open {
		return true, nil
	}
	if len(offsets) == 0 && !s.produced.Load() {
		// Nothing to commit or abort (a checkpoint while every task sorts a backlog): keep the
		// transaction open rather than end an empty one. franz-go ends a transaction without
		// offsets as if the broker lacked KIP-447 and holds its session lock for 500 ms after
		// it, which stalled the next checkpoint and every task waiting at its barrier.
		return commit, nil
	}
	s.open = false
	s.produced.Store(false)
	ctx = kgo.PreTxnCommitFnContext(ctx, func(req *kmsg.TxnOffsetCommitRequest) error {
		req.Topics = req.Topics[:0]
		for topic, parts := range offsets {
			t := kmsg.NewTxnOffsetCommitRequestTopic()
			t.Topic = topic
			for p, off := range parts {
				rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
				rp.Partition = p
				rp.Offset = off
				rp.LeaderEpoch = -1
				rp.Metadata = &req.MemberID
				if m, ok := meta[topic][p]; ok {
					rp.Metadata = &m
				}
				t.Partitions = append(t.Partitions, rp)
			}
			req.Topics = append(req.Topics, t)
		}
		return nil
	})
	// A member the group has dropped (its session expired: a long pause, SIGSTOP) deadlocks
	// GroupTransactSession.End under BlockRebalanceOnPoll: End waits to force a heartbeat, but
	// the heartbeat loop has exited, and franz-go's onLost, which would release End, waits
	// for AllowRebalance, which the poll loop calls only after End. A healthy End takes a few
	// round trips; one still running after endStuck lets the blocked callback run (a revoke
	// or a loss during End aborts the transaction).
	stuck := time.AfterFunc(endStuck, func() {
		if s.log != nil {
			s.log.Warn("a transaction's end has taken 5 s; letting a waiting rebalance run", "commit", commit)
		}
		s.cl.AllowRebalance()
	})
	committed, err := s.txn.End(ctx, kgo.TransactionEndTry(commit))
	stuck.Stop()
	if err != nil && Retriable(err) {
		s.lost = true
		return false, fmt.Errorf("producer: end transaction (outcome unknown): %w: %w", ErrSessionLost, err)
	}
	if err != nil {
		return false, fmt.Errorf("producer: end transaction: %w", err)
	}
	return committed, nil
}

func (s *Session) endAtLeastOnce(ctx context.Context, offsets map[string]map[int32]int64, commit bool) (bool, error) {
	if !commit || len(offsets) == 0 {
		return commit, nil
	}
	eo := make(map[string]map[int32]kgo.EpochOffset, len(offsets))
	for t, ps := range offsets {
		eo[t] = make(map[int32]kgo.EpochOffset, len(ps))
		for p, o := range ps {
			eo[t][p] = kgo.EpochOffset{Epoch: -1, Offset: o}
		}
	}
	var cerr error
	s.cl.CommitOffsetsSync(ctx, eo, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			cerr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if e := kerrFor(p.ErrorCode); e != nil && cerr == nil {
					cerr = fmt.Errorf("topic %s partition %d: %w", t.Topic, p.Partition, e)
				}
			}
		}
	})
	if cerr != nil {
		// A failed commit is not fatal: the records are durable, the offsets are not; the next
		// owner re-reads them (at-least-once).
		return false, nil
	}
	return true, nil
}

// ErrSessionLost is the error of End or Begin when a broker could not be reached and the
// session cannot go on: a transaction ended without a known outcome (it may have committed or
// aborted: its coordinator died, the group's coordinator moved), or the producer id could not be
// renewed for the next one. The session must be abandoned, as a crash would: the tasks drop what
// they hold and a new session resumes from what Kafka committed (the new producer's epoch aborts
// the transaction if it is still open; the state catches up from the changelog if it committed).
var ErrSessionLost = errors.New("the Kafka session is lost")

// Abandon closes the session's client without ending its transaction, as a crash would. A new
// session with the same transactional id fences it.
func (s *Session) Abandon() {
	if s.txn != nil {
		s.txn.Close()
		return
	}
	s.cl.Close()
}

// CloseWait bounds how long Close waits for the client to leave the group.
const CloseWait = 5 * time.Second

// Close leaves the group and closes the client (aborting an open transaction). It reports
// false if the client had not closed within CloseWait: franz-go's close waits for a JoinGroup or
// SyncGroup in flight, which a coordinator holds until every member has rejoined (a static
// member stopped a moment earlier counts until its session times out; franz-go's embedded broker
// waits up to the rebalance timeout, 5 minutes). By then the transaction has ended and the
// tasks have stopped, so the process loses nothing by exiting without that answer; the client's
// goroutines finish when it comes.
func (s *Session) Close(ctx context.Context) bool {
	if s.txn != nil && s.open {
		_, _ = s.txn.End(ctx, kgo.TryAbort)
		s.open = false
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if s.txn != nil {
			s.txn.Close()
			return
		}
		s.cl.Close()
	}()
	t := time.NewTimer(CloseWait)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}
