package backlog

import "time"

// Lag is what a fetch reported about one batch of an input: the records left to process before
// the batch (the batch included) and after it, and the time lags (wall clock minus the event
// time of the batch's first and last record). A plain value.
type Lag struct {
	Before, After         int64
	TimeBefore, TimeAfter time.Duration
}

// BeforeBatch returns the lag an input judges a batch by before it runs: what is left including
// the batch if the input has not been observed since its task started or was rewound, or if
// its operator is in backlog; what lies beyond the batch otherwise (see the package doc).
func (l Lag) BeforeBatch(observed, inBacklog bool) (lag int64, timeLag time.Duration) {
	if !observed || inBacklog {
		return l.Before, l.TimeBefore
	}
	return l.After, l.TimeAfter
}

// AfterBatch returns the lag an input judges by once a batch has run: what is left after it.
func (l Lag) AfterBatch() (lag int64, timeLag time.Duration) { return l.After, l.TimeAfter }

// State is what the policy knows of one keyed operator of a task when it decides: its mode, what
// its inputs say, and what it holds. A plain value; the task gathers it.
type State struct {
	// Backlog is the operator's mode: true from the moment it entered backlog until it left it
	// (the commit of the switch's fold, or a Leave with nothing to fold).
	Backlog bool
	// First: the input being observed sees its first lag since the task started or was
	// rewound (its detector's first observation).
	First bool
	// Shared: the operator has several inputs, or reads an internal topic; its first entry
	// into backlog counts as a switch.
	Shared bool
	// Detectors is what the detectors of the operator's inputs say (Combine of their
	// RecordAttributes); Upstream what the writers of the internal topics it reads announced.
	Detectors, Upstream RecordAttributes
	// Buffered: the operator holds records of a backlog not folded into state yet (sorted
	// records, pre-aggregated keys).
	Buffered bool
	// Dirty: its real-time cache holds entries not written yet, or outputs of real-time calls
	// wait for a checkpoint (a Keyed operator's outbox): both go out before it holds a backlog,
	// which keeps its progress where it is until the fold.
	Dirty bool
	// Pending: backlog checkpoints left keys whose outputs are still owed (the operator's
	// pending namespace may hold keys).
	Pending bool
	// Timed: the operator runs on event time (windows, sessions, joins by time): it has timers.
	Timed bool
	// Ended: every input of the operator ended (a bounded run).
	Ended bool
}

// Inputs returns the operator's inputs' combined mode: their detectors' and their writers'
// (the combiner rule).
func (s State) Inputs() RecordAttributes { return Combine(s.Detectors, s.Upstream) }

// wantsBacklog reports whether the operator's inputs call for backlog mode: any of them says
// so, and they have not ended.
func (s State) wantsBacklog() bool { return s.Inputs().Backlog && !s.Ended }

// Streams reports whether the operator streams: in real-time mode, with nothing of a backlog
// left to fold and no outputs owed by backlog checkpoints.
func (s State) Streams() bool { return !s.Backlog && !s.Pending && !s.Buffered }

// Switch is the change of mode a Decision asks the task to make now.
type Switch int8

const (
	// Stay: no change of mode now.
	Stay Switch = iota
	// Start: the operator starts in backlog (its first observation); not counted as a switch.
	Start
	// Enter: the operator switches to backlog mode.
	Enter
	// Leave: the operator switches to real-time mode now (it has nothing to fold).
	Leave
)

func (s Switch) String() string {
	switch s {
	case Start:
		return "start"
	case Enter:
		return "enter"
	case Leave:
		return "leave"
	}
	return "stay"
}

// Decision is what the policy asks of the task for one operator. A plain value.
type Decision struct {
	// Switch is the change of mode to make now.
	Switch Switch
	// Checkpoint: the task needs a checkpoint before it processes the batch (flush a dirty cache
	// before entering backlog, fold a backlog that ends, emit outputs owed, fire the timers of an
	// operator that left backlog).
	Checkpoint bool
	// Fold: the operator is due to fold what it holds of a backlog and emit it, then stream (the
	// switch's fold; it leaves backlog when the checkpoint holding it commits).
	Fold bool
	// SilentFold: the operator may fold its backlog without outputs and stay in backlog (a
	// backlog checkpoint, once backlog.checkpoint_interval has passed since the last).
	SilentFold bool
}

// Decide is the mode policy (see the package doc): given what the task knows of an operator, it
// returns the change of mode to make now, whether that needs a checkpoint, and which fold is
// due.
func Decide(s State) Decision {
	want := s.wantsBacklog()
	d := Decision{
		Fold:       !s.Dirty && !want && (s.Buffered || s.Pending || s.Ended && s.Backlog),
		SilentFold: s.Backlog && want && s.Buffered,
	}
	switch {
	case want && !s.Backlog:
		d.Switch = Enter
		if s.First && !s.Shared {
			d.Switch = Start
		}
		d.Checkpoint = s.Dirty // flush the cache first; the checkpoint then sorts
	case !want && s.Backlog && !s.Buffered && !s.Pending && !s.Ended:
		d.Switch = Leave
		d.Checkpoint = s.Timed // it fires the timers its watermark reached
	case !want && s.Backlog:
		d.Checkpoint = true // the checkpoint folds the backlog, then the operator streams
	case !want && s.First && s.Pending:
		d.Checkpoint = true // outputs owed by backlog checkpoints go out before it streams
	}
	return d
}
