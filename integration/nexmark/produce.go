package nexmark

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
)

// Topics names the three topics events are produced to (DESIGN.md, "Nexmark topics").
type Topics struct {
	Person, Auction, Bid string
	// SideInput is q13's side input: SideInputRows rows {key, value}, keyed by key.
	SideInput string
}

// DefaultTopics returns the topics prefix+"person", prefix+"auction", prefix+"bid" and
// prefix+"side-input"; with the prefix "nexmark-", the design's topic names.
func DefaultTopics(prefix string) Topics {
	return Topics{Person: prefix + "person", Auction: prefix + "auction", Bid: prefix + "bid", SideInput: prefix + "side-input"}
}

// SideInputRows is the number of rows of the side input (Flink's nexmark: side_input_gen.sh
// --num 10000).
const SideInputRows = 10_000

// ProduceSideInput writes the side input to t.SideInput and waits for it: the rows key 0 to
// SideInputRows-1, each {"key":i,"value":"i"} under the Kafka key i (Flink's nexmark
// SideInputGenerator writes the lines "i,i"), at event time base.
func ProduceSideInput(ctx context.Context, cl *kgo.Client, t Topics, base int64) error {
	for i := range SideInputRows {
		k := strconv.Itoa(i)
		cl.Produce(ctx, &kgo.Record{Topic: t.SideInput, Key: []byte(k), Value: fmt.Appendf(nil, `{"key":%d,"value":%q}`, i, k),
			Timestamp: time.UnixMilli(base)}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		return fmt.Errorf("nexmark: side input: %w", err)
	}
	return nil
}

// Of returns the topic of events of kind k.
func (t Topics) Of(k Kind) string {
	switch k {
	case KindPerson:
		return t.Person
	case KindAuction:
		return t.Auction
	}
	return t.Bid
}

// All returns the three topic names.
func (t Topics) All() []string { return []string{t.Person, t.Auction, t.Bid, t.SideInput} }

// TopicConfigs are the configs of the topics CreateTopics creates: events carry their event
// time (2015 by default) as the record timestamp, so nothing may be deleted or refused by time.
func TopicConfigs() map[string]*string {
	keep := "-1"
	any := "9223372036854775807"
	create := "CreateTime"
	return map[string]*string{
		"retention.ms":                    &keep,
		"message.timestamp.type":          &create,
		"message.timestamp.before.max.ms": &any,
		"message.timestamp.after.max.ms":  &any,
	}
}

// CreateTopics creates the four topics with partitions partitions and TopicConfigs (the
// broker's default replication factor). A topic that exists already with that partition count
// is kept; with another count it is an error.
func CreateTopics(ctx context.Context, adm *kadm.Client, t Topics, partitions int32) error {
	for _, topic := range t.All() {
		resp, err := adm.CreateTopic(ctx, partitions, -1, TopicConfigs(), topic)
		if err == nil {
			err = resp.Err
		}
		if errors.Is(err, kerr.TopicAlreadyExists) {
			details, lerr := adm.ListTopics(ctx, topic)
			if lerr != nil {
				return fmt.Errorf("nexmark: list topic %s: %w", topic, lerr)
			}
			if n := len(details[topic].Partitions); n != int(partitions) {
				return fmt.Errorf("nexmark: topic %s exists with %d partitions, want %d", topic, n, partitions)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("nexmark: create topic %s: %w", topic, err)
		}
	}
	return nil
}

// ProducerOpts returns the franz-go options Produce is fastest with: the project's producing
// settings (workload.ProducerOpts: no compression, 5 ms linger, 1 MiB batches, a deep buffer)
// on the default idempotent acks=all producer and Kafka's murmur2 partitioner.
func ProducerOpts() []kgo.Opt { return workload.ProducerOpts() }

// Counts counts events by kind.
type Counts struct{ Persons, Auctions, Bids int64 }

// Total returns the number of events counted.
func (c Counts) Total() int64 { return c.Persons + c.Auctions + c.Bids }

func (c *Counts) add(k Kind) {
	switch k {
	case KindPerson:
		c.Persons++
	case KindAuction:
		c.Auctions++
	default:
		c.Bids++
	}
}

// Produce writes n events of g (fewer if g ends first) to their topics and returns once every
// record is acknowledged, or with the first produce error. See ProduceEach.
func Produce(ctx context.Context, cl *kgo.Client, t Topics, g *Generator, n int64) (Counts, error) {
	return ProduceEach(ctx, cl, t, func(yield func(*Event) error) error {
		for i := int64(0); i < n; i++ {
			ev, ok := g.Next()
			if !ok {
				return nil
			}
			if err := yield(&ev); err != nil {
				return err
			}
		}
		return nil
	})
}

// ProduceEach writes every event that each yields to its kind's topic: key = the decimal id
// (Event.Key), value = the JSON object (Event.AppendJSON), record timestamp = the event's
// dateTime, partition chosen by cl's partitioner. It returns once every record is acknowledged
// (it flushes cl, so it also waits for records others produce through cl), with the first
// produce or generator error. Records go out in the order yielded, so per partition in event
// time order. The event yield is given is read during the call only.
func ProduceEach(ctx context.Context, cl *kgo.Client, t Topics, each func(yield func(*Event) error) error) (Counts, error) {
	var (
		mu    sync.Mutex
		first error
		cnt   Counts
	)
	failed := func() error {
		mu.Lock()
		defer mu.Unlock()
		return first
	}
	promise := func(r *kgo.Record, err error) {
		if err == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if first == nil {
			first = fmt.Errorf("nexmark: producing to %s: %w", r.Topic, err)
		}
	}
	// Records are carved from slabs: kgo keeps each until it is acknowledged.
	const slabRecords, slabBytes = 4096, 1 << 20
	var (
		recs []kgo.Record
		buf  []byte
	)
	genErr := each(func(ev *Event) error {
		if cnt.Total()%1024 == 0 {
			if err := failed(); err != nil {
				return err
			}
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("nexmark: producing: %w", err)
			}
		}
		cnt.add(ev.Kind)
		if len(recs) == 0 {
			recs = make([]kgo.Record, slabRecords)
		}
		r := &recs[0]
		recs = recs[1:]
		if cap(buf)-len(buf) < 16<<10 {
			buf = make([]byte, 0, slabBytes)
		}
		start := len(buf)
		buf = strconv.AppendInt(buf, ev.Key(), 10)
		mid := len(buf)
		buf = ev.AppendJSON(buf) // events are at most a few KiB: no slab is outgrown
		r.Key, r.Value = buf[start:mid:mid], buf[mid:len(buf):len(buf)]
		r.Topic = t.Of(ev.Kind)
		r.Timestamp = time.UnixMilli(ev.Time())
		cl.Produce(ctx, r, promise)
		return nil
	})
	flushErr := cl.Flush(ctx)
	if err := failed(); err != nil {
		return cnt, err
	}
	if genErr != nil {
		return cnt, genErr
	}
	if flushErr != nil {
		return cnt, fmt.Errorf("nexmark: flushing: %w", flushErr)
	}
	return cnt, nil
}
