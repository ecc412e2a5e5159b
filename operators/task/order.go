package task

import (
	"fmt"

	"github.com/sluice-dev/sluice/backlog"
)

// A Task's calls follow one order, which the task enforces (a call out of order is a bug in the
// caller: it panics, naming the call and the phase):
//
//	New ─▶ idle ──ReadAttributes, BeforeBatch/Observe, Process, AfterBatch, EndInput, Restored──▶ idle
//	       idle ──Prepare (a fold)──▶ prepared ──Checkpoint──▶ in flight
//	       idle ──Checkpoint──▶ in flight ──Committed or Aborted──▶ idle
//	       any ──Close──▶ closed
//
// Between Prepare and Checkpoint the task processes nothing (the fold's records are in the open
// transaction and the checkpoint completes it); between Checkpoint and its outcome it processes
// nothing either (its state writes wait for the transaction). A Checkpoint that fails leaves the
// task closed to everything but Close. Queries (Status, WantsFold, NeedsCheckpoint, InBacklog,
// Finished, Namespaces) may be made in any phase.
type phase int

const (
	phaseIdle     phase = iota // processing records; may checkpoint
	phasePrepared              // a switch's fold is in the open transaction: Checkpoint next
	phaseInFlight              // a checkpoint awaits its outcome: Committed or Aborted next
	phaseFailed                // a checkpoint failed: Close only
	phaseClosed
)

func (p phase) String() string {
	switch p {
	case phaseIdle:
		return "idle"
	case phasePrepared:
		return "prepared (a fold awaits its checkpoint)"
	case phaseInFlight:
		return "in flight (a checkpoint awaits its outcome)"
	case phaseFailed:
		return "failed"
	}
	return "closed"
}

// must panics unless the task is in one of the allowed phases.
func (t *Task) must(call string, allowed ...phase) {
	for _, p := range allowed {
		if t.phase == p {
			return
		}
	}
	panic(fmt.Sprintf("task %d: %s called while the task is %s (see the call order in operators/task/order.go)", t.partition, call, t.phase))
}

// Lag is what a fetch reported about one batch of a partition (backlog.Lag).
type Lag = backlog.Lag

// BeforeBatch decides the mode a batch of topic runs in and reports whether a switch needs a
// checkpoint before the batch is processed. Each chain judges the batch by the lag the mode
// policy chooses (backlog.Lag.BeforeBatch) and observes it; leaving backlog is decided after
// the batch (AfterBatch).
func (t *Task) BeforeBatch(topic string, l Lag) (needCheckpoint bool) {
	t.must("BeforeBatch", phaseIdle)
	for _, c := range t.byTopic[topic] {
		lag, timeLag := l.BeforeBatch(c.observed, c.inBack)
		c.observed = true
		if t.observe(c, lag, timeLag) {
			needCheckpoint = true
		}
	}
	t.needCkpt = t.needCkpt || needCheckpoint
	return needCheckpoint
}

// AfterBatch observes what is left after a batch of topic: a chain that has caught up leaves
// backlog (then WantsFold reports its fold).
func (t *Task) AfterBatch(topic string, l Lag) {
	t.must("AfterBatch", phaseIdle)
	for _, c := range t.byTopic[topic] {
		lag, timeLag := l.AfterBatch()
		if t.observe(c, lag, timeLag) {
			t.needCkpt = true
		}
	}
}
