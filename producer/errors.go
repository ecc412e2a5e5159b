package producer

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

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
	return kerr.IsRetriable(err) || kgo.IsRetryableBrokerErr(err)
}

// retryFor bounds how long Retry keeps trying: longer than a dead broker takes to be fenced and
// its partitions' leaders moved.
const retryFor = 30 * time.Second

// Retry calls fn until it succeeds, fails with an error that is not Retriable, retryFor has
// passed (then it returns the last error) or ctx ends, backing off from 50 ms to 1 s.
func Retry[T any](ctx context.Context, fn func() (T, error)) (T, error) {
	wait := 50 * time.Millisecond
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
