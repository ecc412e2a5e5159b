// Package task is the per-partition runtime of sluice: it runs the operator chains that read
// one partition number of a group of co-partitioned topics (a stream and the tables it joins,
// table.go; any other topic alone), in backlog mode (keyed operators pre-aggregate, sort and fold
// silently) or in real-time mode (a write-back cache over the state store), with event time,
// windows and timers (window.go), Keyed operators such as session windows, joins, dedup,
// top-N, changes and distinct (keyed.go), the mergeable aggregates (task.go, fold.go; hopping windows folded by slice in a backlog: slice.go), the backlog mode carried between stages through internal topics
// (attributes.go), records combined before a re-key (combine.go) or written with only the members their reader reads (project.go), the filters and maps after a keyed operator run on its results in its task (after.go), a join's records its results' filter would drop judged before its sorter (joinfilter.go), branches that start from
// what the first chain made of a record (fork.go), and makes its work durable through checkpoints driven by the consumer (a
// chain's progress as one value: progress.go; the mode policy it applies: mode.go and package
// backlog; the record layouts: changelog/codec). Its calls follow the order of
// order.go, which it enforces.
//
// A plan.Plan (package operators/plan, the planner) is the validated, compiled shape of a
// pipeline (built once from the config); a Task is one partition's instance of it. The consumer owns tasks: it creates one per assigned partition,
// feeds it fetched batches, and asks it to checkpoint inside the open Kafka transaction.
package task
