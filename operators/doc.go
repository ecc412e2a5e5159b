// Package operators owns what sluice does to one record: decoding a source's Kafka records
// (JSON values, group key, event time) into Records, the stateless stages (filter and map,
// with expr-lang expressions, and the stream-table join's lookup, join.go), re-keying
// (rekey.go), event-time windows, and the keyed operators: the aggregate (sum, count, min, max,
// avg; a cogroup is an aggregate of several inputs; with retractions, sum, count and avg over a
// change stream), whose compact per-key state the runtime stores and folds, and the Keyed
// operators (keyed.go), whose results depend on order and time: session windows, the windowed
// and the regular stream-stream join (streamjoin.go, regularjoin.go), the join as of event time
// (asofjoin.go), dedup (dedup.go), top-N (top.go), an upsert stream's changes (changes.go)
// and distinct (distinct.go).
// Expressions compute on exact decimals (exprdec.go) and have SQL's functions (exprfunc.go);
// the usual ones also run as trees of Go functions on typed values (exprfast.go), with
// expr-lang's VM evaluating whatever a tree leaves to it.
//
// The runtime (operators/task) drives these types from one goroutine per task, in both modes:
// in real time it decodes, applies stages, projects and folds record by record; in backlog it
// decodes, applies stages and projects record by record, sorts the projected inputs by key and
// folds them per key. Project and Fold are split so the sorter holds only the few bytes each
// record contributes.
//
// One answer, two modes: Fold's result bytes depend only on the set of inputs, not on their
// order. Numbers are exact decimals (9 fractional digits, parsed from the JSON text, rounded
// half-to-even per record), sums are exact 192-bit integers, and avg is one exact division at
// render time. No float64 arithmetic touches aggregate state.
//
// Hot path: Decode and Project do not allocate. Decode validates the whole value with a small
// scanner and indexes its top-level members; later lookups (key, timestamp, aggregate fields,
// expression variables) read the index. Per-record failures are *Error values, which the
// runtime routes to the dead-letter topic.
package operators
