package backlog

import (
	"fmt"
	"time"
)

// Mode is the backlog.mode setting.
type Mode int

const (
	// Auto follows the lag, in both directions, any number of times.
	Auto Mode = iota
	// Never is pure streaming: the detector never reports a backlog.
	Never
	// Always starts every task in backlog and keeps it there until it has caught up once;
	// from then on the task streams.
	Always
)

// ParseMode parses "auto", "never" or "always".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "auto", "":
		return Auto, nil
	case "never":
		return Never, nil
	case "always":
		return Always, nil
	}
	return Auto, fmt.Errorf("backlog: unknown mode %q (allowed: auto, never, always)", s)
}

func (m Mode) String() string {
	switch m {
	case Never:
		return "never"
	case Always:
		return "always"
	}
	return "auto"
}

// Options are the thresholds of a Detector. Zero time lags disable the time criteria.
type Options struct {
	Mode         Mode
	EnterLag     int64
	ExitLag      int64
	EnterTimeLag time.Duration
	ExitTimeLag  time.Duration
	// Bounded: the run is a batch job (sluice run --bounded); the detector behaves as mode
	// Always whatever Mode is.
	Bounded bool
}

// mode is the mode the detector follows: Mode, or Always in a bounded run.
func (o Options) mode() Mode {
	if o.Bounded {
		return Always
	}
	return o.Mode
}

// RecordAttributes is the mode of an input (Flink's RecordAttributes{isBacklog}), as a
// Detector reports it and as attribute records carry it between stages.
type RecordAttributes struct {
	Backlog bool
}

// Combine returns the attributes of an operator with several inputs (or of one input and the
// writers of the internal topic it reads): it is in backlog while any input is (the combiner
// rule).
func Combine(in ...RecordAttributes) RecordAttributes {
	for _, a := range in {
		if a.Backlog {
			return RecordAttributes{Backlog: true}
		}
	}
	return RecordAttributes{}
}

// Detector holds the mode of one input of a task. It is not safe for concurrent use: the task
// goroutine owns it.
type Detector struct {
	o       Options
	started bool
	backlog bool
	caught  bool // Always mode: has caught up once
}

// NewDetector returns a detector that has not observed any lag yet; it reports real-time
// until the first Observe.
func NewDetector(o Options) *Detector { return &Detector{o: o} }

// Backlog reports the current mode.
func (d *Detector) Backlog() bool { return d.backlog }

// Attributes reports the current mode as the RecordAttributes of the detector's input.
func (d *Detector) Attributes() RecordAttributes { return RecordAttributes{Backlog: d.backlog} }

// Started reports whether Observe has been called.
func (d *Detector) Started() bool { return d.started }

// Observe records the lag seen for the task (from a fetch response) and its time lag (wall
// clock minus the event time of the last fetched record; 0 if unknown). It returns the
// attributes now in force and whether they changed. The first observation puts a task in
// backlog without that counting as a change (changed is false, first is true).
func (d *Detector) Observe(lag int64, timeLag time.Duration) (attr RecordAttributes, changed, first bool) {
	first = !d.started
	d.started = true
	was := d.backlog
	switch d.o.mode() {
	case Never:
		d.backlog = false
	case Always:
		if first {
			d.backlog = true
		}
		if d.backlog && d.exits(lag, timeLag) {
			d.backlog = false
			d.caught = true
		}
	default:
		if d.backlog {
			if d.exits(lag, timeLag) {
				d.backlog = false
			}
		} else if d.enters(lag, timeLag) {
			d.backlog = true
		}
	}
	return RecordAttributes{Backlog: d.backlog}, !first && was != d.backlog, first
}

func (d *Detector) enters(lag int64, timeLag time.Duration) bool {
	if lag >= d.o.EnterLag {
		return true
	}
	return d.o.EnterTimeLag > 0 && timeLag >= d.o.EnterTimeLag
}

func (d *Detector) exits(lag int64, timeLag time.Duration) bool {
	if lag > d.o.ExitLag {
		return false
	}
	return d.o.ExitTimeLag <= 0 || timeLag <= d.o.ExitTimeLag
}

// Fresh returns a detector with the same options that has observed nothing (after an abort,
// a task decides its mode again from the next lag it sees).
func (d *Detector) Fresh() *Detector { return NewDetector(d.o) }
