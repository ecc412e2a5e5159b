package producer

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestRetriable(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"a retriable error code", kerr.NotLeaderForPartition, true},
		{"a refused dial, wrapped", fmt.Errorf("unable to dial: %w", refused), true},
		{"a group session that could not reach its coordinator", &kgo.ErrGroupSession{Err: fmt.Errorf("unable to dial: %w", refused)}, true},
		{"a connection closed at once", &kgo.ErrGroupSession{Err: &kgo.ErrFirstReadEOF{}}, true},
		{"shard errors, all retriable", &kadm.ShardErrors{Errs: []kadm.ShardError{{Err: refused}, {Err: kerr.LeaderNotAvailable}}}, true},
		{"shard errors, one not", &kadm.ShardErrors{Errs: []kadm.ShardError{{Err: refused}, {Err: kerr.TopicAuthorizationFailed}}}, false},
		{"no shard errors", &kadm.ShardErrors{}, false},
		{"an authorization failure", kerr.GroupAuthorizationFailed, false},
		{"another process with this instance id", &kgo.ErrGroupSession{Err: kerr.FencedInstanceID}, false},
		{"a plain error", errors.New("boom"), false},
		{"a broker the metadata no longer lists", &kadm.ShardErrors{Errs: []kadm.ShardError{{Err: errors.New("unknown broker")}}}, true},
	} {
		if got := Retriable(c.err); got != c.want {
			t.Errorf("%s: Retriable(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

func TestRejoinable(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"a member the coordinator forgot", &kgo.ErrGroupSession{Err: kerr.UnknownMemberID}, true},
		{"a stale generation", &kgo.ErrGroupSession{Err: kerr.IllegalGeneration}, true},
		{"a coordinator out of reach", &kgo.ErrGroupSession{Err: &kgo.ErrFirstReadEOF{}}, true},
		{"another process with this instance id", &kgo.ErrGroupSession{Err: kerr.FencedInstanceID}, false},
		{"refused credentials", &kgo.ErrGroupSession{Err: kerr.GroupAuthorizationFailed}, false},
		{"not a group error", kerr.UnknownMemberID, false},
	} {
		if got := Rejoinable(c.err); got != c.want {
			t.Errorf("%s: Rejoinable(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

func TestFenced(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"another member with this instance id", &kgo.ErrGroupSession{Err: kerr.FencedInstanceID}, true},
		{"wrapped", fmt.Errorf("fetch: %w", &kgo.ErrGroupSession{Err: kerr.FencedInstanceID}), true},
		{"a member the coordinator forgot", &kgo.ErrGroupSession{Err: kerr.UnknownMemberID}, false},
		{"not a group error", kerr.FencedInstanceID, false},
	} {
		if got := Fenced(c.err); got != c.want {
			t.Errorf("%s: Fenced(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
