package producer

import (
	"errors"
	"net"

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
