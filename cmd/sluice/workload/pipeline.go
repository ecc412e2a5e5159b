package workload

import "fmt"

// PipelineOperator is the name of Pipeline's aggregate: its changelog topic is
// "<group>-totals-changelog".
const PipelineOperator = "totals"

// Pipeline returns the sources, operators and sinks sections of a sluice config (YAML) that
// computes, from the orders on topic, what ReadTotals(..., "amount", "orders") reads back from
// sink: per customer_id, the sum of amount and the count of orders. Callers add kafka, group,
// processing and backlog settings before it. Topic names go in as plain YAML scalars.
func Pipeline(topic, sink string) string { return PipelineChangelog(topic, sink, "topic") }

// PipelineChangelog is Pipeline with the aggregate's changelog setting: topic (its own
// changelog topic) or output (its sink's topic is its changelog).
func PipelineChangelog(topic, sink, changelog string) string {
	return fmt.Sprintf(`sources:
  orders: {topic: %s, format: json, key: customer_id, timestamp: ts}
operators:
  - name: %s
    aggregate:
      input: orders
      fields: {amount: {sum: amount}, orders: {count: {}}}
      changelog: %s
    output: totals_out
sinks:
  totals_out: {topic: %s, format: json}
`, topic, PipelineOperator, changelog, sink)
}
