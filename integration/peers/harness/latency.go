package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/valyala/fastjson"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
)

// latencyStats is the produce-to-visible latency of the live records of one contender.
type latencyStats struct {
	produced int64         // live records produced
	seen     int64         // of which an output covering them became visible
	p50, p99 time.Duration // over the seen records
	max      time.Duration
	rate     float64 // achieved produce rate, records/s
}

// sent is one produced live record awaiting an output that covers it: the count its key
// reaches with it, and when it was handed to the producer.
type sent struct {
	count int64
	at    time.Time
}

// observation is one live record seen: when it became visible and its latency.
type observation struct {
	at  time.Time
	lat time.Duration
}

// tracker matches outputs to produced records. An output {"key":k,"orders":n} makes visible
// every record of k whose count is at most n, whichever contender emitted it and whether it
// carries headers or not. Safe for concurrent use.
type tracker struct {
	mu struct {
		sync.Mutex
		pending map[string][]sent // per key, in count order
		waiting int64             // records in pending
		seen    []observation     // in the order they became visible
	}
}

func newTracker() *tracker {
	t := &tracker{}
	t.mu.pending = map[string][]sent{}
	return t
}

func (t *tracker) produced(key string, count int64, at time.Time) {
	t.mu.Lock()
	t.mu.pending[key] = append(t.mu.pending[key], sent{count: count, at: at})
	t.mu.waiting++
	t.mu.Unlock()
}

func (t *tracker) visible(key string, count int64, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	q := t.mu.pending[key]
	i := 0
	for ; i < len(q) && q[i].count <= count; i++ {
		t.mu.seen = append(t.mu.seen, observation{at: at, lat: at.Sub(q[i].at)})
	}
	if i == 0 {
		return
	}
	t.mu.waiting -= int64(i)
	if i == len(q) {
		delete(t.mu.pending, key)
	} else {
		t.mu.pending[key] = q[i:]
	}
}

func (t *tracker) outstanding() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mu.waiting
}

func (t *tracker) stats() latencyStats {
	t.mu.Lock()
	lat := make([]time.Duration, len(t.mu.seen))
	for i, o := range t.mu.seen {
		lat[i] = o.lat
	}
	t.mu.Unlock()
	s := latencyStats{seen: int64(len(lat))}
	s.p50, s.p99, s.max = quantiles(lat)
	return s
}

// observations returns a copy of every record seen so far, in the order they became visible.
func (t *tracker) observations() []observation {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.mu.seen)
}

// quantiles sorts lat in place and returns its p50, p99 and maximum (zero when empty): the
// elements at len*50/100 and len*99/100 of the sorted slice.
func quantiles(lat []time.Duration) (p50, p99, most time.Duration) {
	if len(lat) == 0 {
		return 0, 0, 0
	}
	slices.Sort(lat)
	return lat[len(lat)*50/100], lat[min(len(lat)-1, len(lat)*99/100)], lat[len(lat)-1]
}

// point is the latency of the records that became visible in one second of a phase.
type point struct {
	second        int // [second, second+1) s after the phase began
	records       int // records that became visible in that second; 0: no figures
	p50, p99, max time.Duration
}

// bucket groups obs by the second of the phase (begun at start) in which they became
// visible: one point per second from 0 to the last second with a record, a second without
// records included with records 0. Records seen before start are left out.
func bucket(obs []observation, start time.Time) []point {
	var per [][]time.Duration
	for _, o := range obs {
		d := o.at.Sub(start)
		if d < 0 {
			continue
		}
		sec := int(d / time.Second)
		for len(per) <= sec {
			per = append(per, nil)
		}
		per[sec] = append(per[sec], o.lat)
	}
	pts := make([]point, len(per))
	for i, lat := range per {
		pts[i] = point{second: i, records: len(lat)}
		pts[i].p50, pts[i].p99, pts[i].max = quantiles(lat)
	}
	return pts
}

// watchOutputs consumes topic from the given offsets with read_committed and reports every
// output to t until ctx is done. With inputs set, topic holds the live records themselves (the
// broker floor): each record counts one for its key instead of carrying an "orders" count.
func watchOutputs(ctx context.Context, seeds []string, topic string, from offsets, t *tracker, inputs bool) error {
	start := map[int32]kgo.Offset{}
	for p, o := range from {
		start[p] = kgo.NewOffset().At(o)
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(seeds...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: start}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(50*time.Millisecond),
	)
	if err != nil {
		return fmt.Errorf("latency: output consumer: %w", err)
	}
	defer cl.Close()
	var p fastjson.Parser
	seen := map[string]int64{}
	for {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		now := time.Now()
		var ferr error
		fetches.EachError(func(tp string, part int32, err error) {
			if !errors.Is(err, context.Canceled) {
				ferr = fmt.Errorf("latency: fetching %s/%d: %w", tp, part, err)
			}
		})
		if ferr != nil {
			return ferr
		}
		var perr error
		fetches.EachRecord(func(r *kgo.Record) {
			if inputs {
				seen[string(r.Key)]++
				t.visible(string(r.Key), seen[string(r.Key)], now)
				return
			}
			v, err := p.ParseBytes(r.Value)
			if err != nil {
				perr = fmt.Errorf("latency: output %q: %w", r.Value, err)
				return
			}
			n, err := v.Get("orders").Int64()
			if err != nil {
				f, ferr := v.Get("orders").Float64()
				if ferr != nil {
					perr = fmt.Errorf("latency: output %q: orders: %w", r.Value, err)
					return
				}
				n = int64(f)
			}
			t.visible(string(r.Key), n, now)
		})
		if perr != nil {
			return perr
		}
	}
}

// liveLoad produces rate records/s to topic for dur, keys drawn uniformly from the workload's
// key space, each with a "sluice-produce-ns" header holding its produce time. counts holds the
// per-key count after the backlog and is updated; totals gains every live record.
func liveLoad(ctx context.Context, cl *kgo.Client, topic string, spec workload.Spec, rate int, dur time.Duration,
	counts map[string]workload.Total, t *tracker,
) (int64, float64, error) {
	rng := rand.New(rand.NewPCG(uint64(spec.Seed), 0x5eed))
	var (
		mu      sync.Mutex
		prodErr error
	)
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			mu.Lock()
			if prodErr == nil {
				prodErr = err
			}
			mu.Unlock()
		}
	}
	start := time.Now()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	var n int64
	ts := start.UnixMilli()
	for {
		elapsed := time.Since(start)
		if elapsed >= dur {
			break
		}
		target := int64(elapsed.Seconds() * float64(rate))
		for ; n < target; n++ {
			key := string(spec.Key(rng.IntN(spec.Keys)))
			cents := 1 + rng.Int64N(99999)
			tot := counts[key]
			tot.Count++
			tot.SumCents += cents
			counts[key] = tot
			now := time.Now()
			val := make([]byte, 0, 112)
			val = append(val, `{"order_id":"o-live-`...)
			val = strconv.AppendInt(val, n, 10)
			val = append(val, `","customer_id":"`...)
			val = append(val, key...)
			val = append(val, `","amount":`...)
			val = strconv.AppendInt(val, cents/100, 10)
			val = append(val, '.', byte('0'+cents%100/10), byte('0'+cents%10))
			val = append(val, `,"ts":`...)
			val = strconv.AppendInt(val, ts+n/int64(max(rate/1000, 1)), 10)
			val = append(val, '}')
			r := &kgo.Record{
				Topic: topic, Key: []byte(key), Value: val,
				Headers: []kgo.RecordHeader{{Key: "sluice-produce-ns", Value: strconv.AppendInt(nil, now.UnixNano(), 10)}},
			}
			t.produced(key, tot.Count, now)
			cl.Produce(ctx, r, promise)
		}
		select {
		case <-ctx.Done():
			return n, 0, ctx.Err()
		case <-tick.C:
		}
	}
	achieved := float64(n) / time.Since(start).Seconds()
	if err := cl.Flush(ctx); err != nil {
		return n, achieved, fmt.Errorf("latency: flushing: %w", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if prodErr != nil {
		return n, achieved, fmt.Errorf("latency: producing: %w", prodErr)
	}
	return n, achieved, nil
}
