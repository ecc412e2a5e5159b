package consumer

import (
	"fmt"
	"sync/atomic"
)

// A checkpoint aborts when one of its records cannot be produced (Pending.Err); every task
// rewinds to its last commit and processes the same input again. A transient error passes, but
// a record the broker always refuses (too large for its topic, an unauthorized or deleted topic)
// would abort every checkpoint carrying it, and the pipeline would loop on it forever: no
// partition of the process commits again. The rule:
//
//   - count consecutive checkpoints aborted by a produce error (whatever the error: a loop over
//     several failing records is still a loop); a checkpoint that commits records or offsets
//     resets the count. The gauge sluice_checkpoint_failures_consecutive shows it.
//   - from min(10, processing.max_checkpoint_failures) on, every such abort in that many logs
//     an ERROR naming the error (the record's topic and partition, and for a dead letter the
//     input record it carries), and Ready (/readyz) is false;
//   - at processing.max_checkpoint_failures (default 100) the checkpoint returns an error: Run
//     ends, the open transaction is aborted, and sluice exits 1 naming the record. Restarting
//     does not help until the cause is fixed (the topic's max.message.bytes, its ACLs).
//
// Aborts for other causes (a rebalance, a failed commit) neither count nor reset.

// alarmFailures is the number of consecutive failures from which sluice reports them.
const alarmFailures = 10

// failStreak is the count. n and last belong to the poll loop; alarmed is read by Ready.
type failStreak struct {
	n       int
	last    string // the last failure's error text
	same    bool   // every failure of the streak had the same error
	alarmed atomic.Bool
}

// checkpointFailed counts a checkpoint aborted by err, a produce error. It returns an error
// once processing.max_checkpoint_failures checkpoints in a row failed.
func (e *Engine) checkpointFailed(err error) error {
	f := &e.fails
	text := err.Error()
	f.same = f.n == 0 || f.same && text == f.last
	f.n++
	f.last = text
	// The gauge moves last: whoever sees the count sees the alarm and its ERROR already there.
	defer e.m.ckptFailures.Set(float64(f.n))
	limit := max(e.o.Config.Processing.MaxCheckpointFailures, 1)
	alarm := min(alarmFailures, limit)
	if f.n >= alarm {
		f.alarmed.Store(true)
	}
	if f.n >= limit {
		return fmt.Errorf("consumer: %d checkpoints in a row aborted because a record could not be produced (processing.max_checkpoint_failures is %d); giving up: %w", f.n, limit, err)
	}
	if f.n%alarm == 0 {
		e.log.Error("checkpoints keep failing: a record cannot be produced; not ready, and exiting at processing.max_checkpoint_failures unless a checkpoint commits",
			"consecutive", f.n, "max", limit, "same_error", f.same, "err", err)
	}
	return nil
}

// checkpointCommitted ends a streak of failures.
func (e *Engine) checkpointCommitted() {
	f := &e.fails
	if f.n == 0 {
		return
	}
	if f.alarmed.Load() {
		e.log.Info("a checkpoint committed again after failures", "failures", f.n)
	}
	f.n, f.last, f.same = 0, "", false
	f.alarmed.Store(false)
	e.m.ckptFailures.Set(0)
}
