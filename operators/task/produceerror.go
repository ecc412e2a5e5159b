package task

import (
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/changelog/codec"
)

// ProduceError is the error of a record the producer could not write: a checkpoint holding one
// must abort (Pending.Err). It names the record's topic and partition and, for a dead letter,
// the bad input record it carries, so that a checkpoint that keeps failing on one record says
// which. It is a plain value, safe to share once returned.
type ProduceError struct {
	Topic     string
	Partition int32  // -1: not assigned to a partition yet
	Source    string // a dead letter's input record, "topic[partition] offset N"; "" for other records
	Err       error
}

func (e *ProduceError) Error() string {
	s := "produce to " + e.Topic
	if e.Partition >= 0 {
		s += "[" + strconv.Itoa(int(e.Partition)) + "]"
	}
	if e.Source != "" {
		s += " (the dead letter of " + e.Source + ")"
	}
	return s + ": " + e.Err.Error()
}

func (e *ProduceError) Unwrap() error { return e.Err }

// produceError wraps err, the failure of producing r, in a *ProduceError.
func produceError(r *kgo.Record, err error) error {
	if r == nil {
		return err
	}
	pe := &ProduceError{Topic: r.Topic, Partition: r.Partition, Err: err}
	if topic, part, off := codec.DeadLetterSource(r.Headers); topic != "" {
		pe.Source = topic + "[" + part + "] offset " + off
	}
	return pe
}
