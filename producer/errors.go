package producer

import (
	"context"
	"errors"
	"net"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Rejoinable reports whether err is a group-management error that franz-go recovers from by
// itself, joining the group again (it always tries; the error only reaches the poll as a
// notification): the member was dropped (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION: its session
// expired while the group's coordinator moved to another broker, or while the process was
// paused), a rebalance, or a coordinator that cannot be reached. Another process holding this
// instance id (FENCED_INSTANCE_ID) and refused credentials are not.
func Rejoinable(err error) bool {
	gs, ok := errors.AsType[*kgo.ErrGroupSession](err)
	if !ok {
		return false
	}
	for _, e := range []error{kerr.UnknownMemberID, kerr.IllegalGeneration, kerr.RebalanceInProgress, kerr.StaleMemberEpoch} {
		if errors.Is(gs.Err, e) {
			return true
		}
	}
	return Retriable(gs.Err)
}

// Fenced reports whether err is the group's refusal of this member because another member has
// joined with its instance id since (FENCED_INSTANCE_ID).
func Fenced(err error) bool {
	gs, ok := errors.AsType[*kgo.ErrGroupSession](err)
	return ok && errors.Is(gs.Err, kerr.FencedInstanceID)
}

// Retriable reports whether err may go away if the request is sent again: a retriable Kafka
// error code, a broker that cannot be reached (connection refused while a dead leader is still in
// the client's metadata) or that closed a new connection at once (a node dying; franz-go also
// says this when SASL is required but missing, so the error is logged, never swallowed), or
// shard errors that are all of these.
func Retriable(err error) bool {
	if se, ok := errors.AsType[*kadm.ShardErrors](err); ok {
		for _, e := range se.Errs {
			if !Retriable(e.Err) {
				return false
			}
		}
		return len(se.Errs) > 0
	}
	if op, ok := errors.AsType[*net.OpError](err); ok && op.Op == "dial" {
		return true // franz-go leaves the retry of a refused dial to the caller
	}
	if _, ok := errors.AsType[*kgo.ErrFirstReadEOF](err); ok {
		return true
	}
	if strings.Contains(err.Error(), "unknown broker") {
		// franz-go's unexported errUnknownBroker: the request went to a broker the metadata
		// no longer lists (a dead node, until the cluster fenced it and moved its leaders).
		return true
	}
	return kerr.IsRetriable(err) || kgo.IsRetryableBrokerErr(err)
}

// retryFor bounds how long Retry keeps trying: longer than a dead broker takes to be fenced and
// its partitions' leaders moved.
const retryFor = 30 * time.Second

// Retry calls fn until it succeeds, fails with an error that is not Retriable, retryFor has
// passed (then it returns the last error) or ctx ends, backing off from 10 ms to 1 s (a topic
// just created is known to every broker some tens of milliseconds later).
func Retry[T any](ctx context.Context, fn func() (T, error)) (T, error) {
	wait := 10 * time.Millisecond
	deadline := time.Now().Add(retryFor)
	for {
		v, err := fn()
		if err == nil || !Retriable(err) || time.Now().After(deadline) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// RetryList is Retry for an offset listing, whose partitions' errors fail the call.
func RetryList(ctx context.Context, list func() (kadm.ListedOffsets, error)) (kadm.ListedOffsets, error) {
	return Retry(ctx, func() (kadm.ListedOffsets, error) {
		l, err := list()
		if err == nil {
			err = l.Error()
		}
		return l, err
	})
}
