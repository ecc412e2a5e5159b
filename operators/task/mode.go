package task

import (
	"time"

	"github.com/sluice-dev/sluice/backlog"
)

// The task's side of the mode policy (package backlog owns the rules): observe gathers what the
// policy knows of a chain's keyed operator (policy), asks backlog.Decide and applies the
// decision (enterBacklog, leaveBacklog, their log lines and metrics); the checkpoint asks the
// same decision whether a fold is due (leaving, backlogCheckpointDue) and whether an operator
// streams (streaming).

// Observe feeds one lag of topic's partition (records still to process) and time lag (wall
// clock minus an event time) to its chains' detectors, as they are: BeforeBatch and AfterBatch
// choose which lag of a fetch counts (the engine calls those). It returns true when a chain
// changes mode and needs a checkpoint before the batch may be processed: entering backlog
// flushes the cache; leaving it merges and folds.
func (t *Task) Observe(topic string, lag int64, timeLag time.Duration) (needCheckpoint bool) {
	t.must("Observe", phaseIdle)
	for _, c := range t.byTopic[topic] {
		if t.observe(c, lag, timeLag) {
			needCheckpoint = true
		}
	}
	t.needCkpt = t.needCkpt || needCheckpoint
	return needCheckpoint
}

// observe feeds a lag to one chain's detector, asks the mode policy what the chain's operator
// does (backlog.Decide) and applies the decision; it reports whether a checkpoint is needed
// before the batch may be processed.
func (t *Task) observe(c *chain, lag int64, timeLag time.Duration) (needCheckpoint bool) {
	c.lag, c.timeLag = lag, timeLag
	defer t.announce(c, t.out.promise)
	// A chain that enters or leaves a backlog changes how far apart the checkpoints may be.
	defer func() { t.backlogged.Store(t.backlogNow()) }()
	if c.det == nil {
		if c.wdet != nil {
			c.wdet.Observe(lag, timeLag)
		}
		return false
	}
	_, _, first := c.det.Observe(lag, timeLag)
	s := c.policy()
	s.First = first
	d := backlog.Decide(s)
	switch d.Switch {
	case backlog.Start:
		t.log.Info("task starts in backlog mode", "operator", c.plan.Keyed.Name, "lag", lag, "time_lag", timeLag)
		t.enterBacklog(c)
	case backlog.Enter:
		t.d.Metrics.switched("to_backlog")
		if s.Shared {
			t.log.Info("switch to backlog mode", "operator", c.plan.Keyed.Name, "input", c.plan.SourceName, "lag", lag, "time_lag", timeLag,
				"upstream_backlog", s.Upstream.Backlog)
		} else {
			t.log.Info("switch to backlog mode", "operator", c.plan.Keyed.Name, "lag", lag, "time_lag", timeLag)
		}
		t.enterBacklog(c)
	case backlog.Leave:
		t.leaveBacklog(c, 0)
	}
	return d.Checkpoint
}

// policy gathers what the mode policy knows of the keyed operator of chain c (its First is
// the caller's to set).
func (c *chain) policy() backlog.State {
	s := backlog.State{
		Backlog:  c.inBack,
		Shared:   len(c.chains) > 1,
		Buffered: c.buffered() > 0,
		// Outputs of real-time calls waiting for a checkpoint count as dirty: once the operator
		// holds a backlog its progress stays put, so a checkpoint after the switch would commit
		// them without their offsets, and an abort before the fold would replay their records.
		Dirty:   len(c.dirty) > 0 || len(c.outbox) > 0,
		Pending: c.hasPending,
		Timed:   c.timed(),
		Ended:   c.ended,
	}
	for _, o := range c.chains {
		if o.det != nil {
			s.Detectors = backlog.Combine(s.Detectors, o.det.Attributes())
		}
		s.Upstream = backlog.Combine(s.Upstream, backlog.RecordAttributes{Backlog: o.upstreamSays()})
		s.Shared = s.Shared || o.upstream != nil
	}
	return s
}

func (t *Task) enterBacklog(c *chain) {
	c.inBack = true
	if c.jf != nil {
		c.jf.reset()
	}
	c.backStart = t.d.Clock()
	c.lastLog = c.backStart
	c.lastBackCkpt = c.backStart
	c.backRecords = 0
	t.d.Metrics.setBacklog(c, true)
}

func (t *Task) leaveBacklog(c *chain, folded int64) {
	c.inBack = false
	if c.jf != nil {
		c.jf.reset()
	}
	d := t.d.Clock().Sub(c.backStart)
	rate := 0.0
	if d > 0 {
		rate = float64(c.backRecords) / d.Seconds()
	}
	t.d.Metrics.switched("to_realtime")
	t.d.Metrics.setBacklog(c, false)
	t.log.Info("switch to real-time mode", "operator", c.plan.Keyed.Name, "records", c.backRecords, "keys", folded,
		"backlog_duration", d.Round(time.Millisecond), "rate_per_s", int64(rate), "lag", c.lag)
	c.backRecords = 0
}

// streaming reports whether the operator of the primary chain c streams (backlog.State.Streams):
// in real-time mode, with no backlog left to fold and no outputs owed by backlog checkpoints (a
// chain that left backlog with those folds them first: leaving).
func (c *chain) streaming() bool { return c.policy().Streams() }

// leaving reports whether the primary chain of a keyed operator is due to fold its backlog and
// stream (backlog.Decision.Fold).
func (c *chain) leaving() bool {
	return c.ops.Keyed() && c.primary && backlog.Decide(c.policy()).Fold
}

// backlogCheckpointDue reports whether a chain in backlog should fold its sorted records into
// state now (backlog.checkpoint_interval) to bound the re-work after a crash: the mode policy
// allows it (SilentFold) and the interval has passed since the last.
func (t *Task) backlogCheckpointDue(c *chain) bool {
	every := t.plan.Config.Backlog.CheckpointInterval
	return every > 0 && backlog.Decide(c.policy()).SilentFold && t.d.Clock().Sub(c.lastBackCkpt) >= every
}
