package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/integration/kafkatest"
)

// twoInputPipeline creates the orders topic and a second input topic (named after second), parts
// partitions each (co-partitioned), and writes the config of an operator of two inputs: the
// common settings (processingExtra is added to the processing line) and the pipeline
// body(orders topic, second topic, sink topic). It returns the pipeline and the second topic.
func twoInputPipeline(t *testing.T, brokers string, parts int32, second, sink, processingExtra string, body func(orders, second, sink string) string) (*pipeline, string) {
	t.Helper()
	other := kafkatest.UniqueName(t, second)
	kafkatest.CreateTopic(t, brokers, other, parts, nil)
	p := configuredPipeline(t, brokers, parts, sink, "commit_interval: 100ms"+processingExtra, "enter_lag: 1000, exit_lag: 200",
		func(p *pipeline) string { return body(p.topic, other, p.sink) })
	return p, other
}

// waitInputsCommitted polls until the group has committed every partition of topics to its
// end, checking that the instances stay alive.
func (p *pipeline) waitInputsCommitted(ctx context.Context, within time.Duration, ins []*instance, topics ...string) {
	p.t.Helper()
	adm := p.admin()
	wctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	poll(wctx, p.t, "the group to commit every input to its end", 200*time.Millisecond, func() (bool, error) {
		for _, in := range ins {
			in.checkAlive()
		}
		return committedAll(wctx, adm, p.group, topics...), nil
	})
}
