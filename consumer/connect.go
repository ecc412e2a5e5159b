package consumer

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/dial"
)

// Kafka unreachable at start. A sidecar starts beside its application, often before Kafka is
// up (a new cluster, a rollout, a network not ready yet). Run does not fail then: it pings the
// brokers until one answers, logging a WARN line per attempt that names the brokers and how
// long it has been trying, and Readiness says why it is not ready. /healthz stays true: a
// restart would not help. There is no bound: the wait ends when a broker answers or the process
// is stopped (SIGTERM exits 0). A broker that answers but refuses the connection's security
// (dial.Refused: a TLS or SASL failure) ends the wait: Run's first requests then fail with
// that error, naming the settings to check; waiting would not help.
// Attempts are spaced from connectRetryMin, doubling up to connectRetryMax; each gives the
// brokers connectAttempt to answer.
const (
	connectAttempt  = 3 * time.Second
	connectRetryMin = 500 * time.Millisecond
	connectRetryMax = 5 * time.Second
)

// kafkaWait is the state of the wait for Kafka, read by Readiness.
type kafkaWait struct {
	since atomic.Pointer[time.Time] // set while no broker has answered yet
}

// waitForKafka returns once a broker of the config answers or refuses the connection's
// security, or with ctx's error.
func (e *Engine) waitForKafka(ctx context.Context, cl *kgo.Client) error {
	brokers := e.o.Config.Kafka.Brokers
	start := e.o.Clock()
	retry := connectRetryMin
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, connectAttempt)
		err := cl.Ping(actx)
		cancel()
		if err == nil {
			if attempt > 1 {
				e.log.Info("kafka reachable", "brokers", brokers, "waited", e.o.Clock().Sub(start).Round(time.Millisecond), "attempts", attempt)
			}
			e.kafka.since.Store(nil)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if dial.Refused(err) {
			// A broker answered and refused the connection's security: waiting will not help.
			// Run's first requests fail the same way and say which settings to check.
			e.kafka.since.Store(nil)
			return nil
		}
		e.kafka.since.CompareAndSwap(nil, &start)
		e.log.Warn("kafka unreachable: no broker answers; retrying (not ready meanwhile)", "brokers", brokers,
			"waiting", e.o.Clock().Sub(start).Round(time.Millisecond), "attempt", attempt, "retry_in", retry, "err", err)
		t := time.NewTimer(retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		retry = min(2*retry, connectRetryMax)
	}
}

// kafkaWaitReason returns why the engine is not ready while it waits for Kafka, or "".
func (e *Engine) kafkaWaitReason() string {
	since := e.kafka.since.Load()
	if since == nil {
		return ""
	}
	return fmt.Sprintf("waiting for Kafka: no broker of %v has answered for %s", e.o.Config.Kafka.Brokers, e.o.Clock().Sub(*since).Round(time.Second))
}
