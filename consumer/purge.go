package consumer

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// purgeEvery is how often committed records of the repartition topics are deleted.
const purgeEvery = 10 * time.Second

// purger deletes the records of repartition topics that the group has committed past
// (DeleteRecords): once the downstream part has committed a record, nothing reads it again. One
// purge runs at a time, in its own goroutine, started by the poll loop after a commit and
// joined by wait (Run's exit). The poll loop owns the fields except through mu.
type purger struct {
	topics map[string]bool // the repartition topics
	mu     sync.Mutex
	upTo   kadm.Offsets // committed offsets not purged yet
	last   time.Time
	busy   bool
	wg     sync.WaitGroup
}

// committed records the offsets a checkpoint committed and starts a purge if one is due.
func (p *purger) committed(ctx context.Context, adm *kadm.Client, log *slog.Logger, now time.Time, offsets map[string]map[int32]int64) {
	if len(p.topics) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for topic, ps := range offsets {
		if !p.topics[topic] {
			continue
		}
		if p.upTo == nil {
			p.upTo = kadm.Offsets{}
		}
		for part, off := range ps {
			p.upTo.Add(kadm.Offset{Topic: topic, Partition: part, At: off, LeaderEpoch: -1})
		}
	}
	if p.busy || len(p.upTo) == 0 || now.Sub(p.last) < purgeEvery {
		return
	}
	p.busy, p.last = true, now
	todo := p.upTo
	p.upTo = nil
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		res, err := adm.DeleteRecords(ctx, todo)
		if err == nil {
			err = res.Error()
		}
		if err != nil && ctx.Err() == nil {
			log.Warn("repartition topics: deleting committed records failed; the next purge tries again", "err", err)
		}
		p.mu.Lock()
		p.busy = false
		p.mu.Unlock()
	}()
}

// wait joins the purge in flight, if any.
func (p *purger) wait() { p.wg.Wait() }
