// Package plan is sluice's planner: it turns a validated config into the chains a task runs
// (NewPlan: sources, stateless stages, the keyed operator a chain ends in, repartition and
// output topics, branches), explains them (Describe, printed by sluice validate), and is the one
// place an operator is compiled from its kind (ChainPlan.Build, into Ops). The runtime,
// operators/task, imports it; it imports only configs and operators.
package plan

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/operators"
)

// ChainPlan is one linear chain: a source, its stateless stages (filter, map, and stream-table
// joins), and an optional keyed operator, writing to a sink topic (or, when later operators
// read its results, to its output topic: Output; or, when those are only filters and maps
// ending in a sink, through them in the same task: After). An aggregate with group_by
// splits its chain in two: the first ends by writing its records, re-keyed by the group_by
// field, to the aggregate's repartition topic (Rekey), and the second reads that topic as its
// source; unless the group_by keeps the input's partition (processing.local_rekey,
// keepsPartition): then one chain gives each record its group key (LocalKey) before the
// operator.
type ChainPlan struct {
	SourceName string
	Source     configs.Source
	Stages     []configs.Operator // filter/map/join, in order
	Keyed      *configs.Operator  // the keyed operator the chain ends in; nil for a stateless chain
	Sink       string             // sink name ("" = the chain drops its output)
	SinkTopic  string
	Changelog  string // changelog topic of Keyed ("" when stateless)
	// OutputChangelog: Keyed is an aggregate or a top whose results are its changelog
	// (changelog: output): Changelog is SinkTopic, each result goes to the task's partition
	// with the layout header, and a restore rebuilds the states from them
	// (operators.Aggregate.StateOf; a top's rows carry their key's header, and
	// operators.Top.GatherRow puts each back into its key's state).
	OutputChangelog bool
	Tables          []string         // the tables its joins read, in stage order
	Cogroup         *configs.Cogroup // the cogroup Keyed is (Keyed.Aggregate is its fields as an aggregate's), or nil
	StreamJoin      *configs.Join    // the windowed stream-stream join Keyed is, or nil
	AsOf            *configs.Join    // the stream-table join as of event time Keyed is, or nil (Input 1: the table's chain)
	Versions        time.Duration    // AsOf: the table's versions
	Taps            []Tap            // stages whose records also go to a sink as they leave them
	Input           int              // a cogroup's chain: the index of its input
	Rekey           string           // the group_by field path the records are re-keyed by ("" = none); SinkTopic is then the repartition topic
	RekeyExpr       bool             // Rekey is an expression (rekey.expr), not field paths
	RekeyFor        string           // with Rekey: the aggregate the records are re-keyed for
	Output          bool             // Keyed's results go to its output topic (SinkTopic), which later operators read
	// LocalKey: Keyed's group_by, whose records stay in their input's partition (one of its
	// fields is the source's key, unchanged by the stages: processing.local_rekey; see
	// keepsPartition): the chain sets each record's key to it before Keyed, and no repartition
	// topic is written. "" = none.
	LocalKey string
	// Combine: with Rekey, the one chain that reads the repartition topic, when the writer
	// combines its records for that chain's operator (processing.combine_before_rekey; see
	// combines): partial states for an aggregate or cogroup, new flags only for a distinct.
	// nil: every record goes as it is.
	Combine *ChainPlan
	// Project: with Rekey and no Combine, the one chain that reads the repartition topic, when
	// its operator's results are made of a few members of its records (an aggregate of one
	// input, windowed or over sessions, no stage before it: operators.MemberReader): the writer
	// writes a record with only those members when the reader would fold it (it projects, and
	// it is not late by the largest watermark the writer announces), and the record whole
	// otherwise, so that a dead letter of the reader holds the whole record
	// (processing.combine_before_rekey). nil: records go whole.
	Project *ChainPlan
	// Keep: a distinct's (Output) members its one reader reads of its results: that reader
	// re-keys them by these fields, with no stage before, and combines them for, or projects
	// them to, an operator that reads the others (see keepsFor). The distinct writes only these
	// members and its columns (processing.combine_before_rekey). nil: its records whole.
	Keep []string
	// TimedOutput: the chain's records in its internal topic carry their event time as record
	// timestamp and the chain announces its output watermark there (attributes.go). With
	// Output, Keyed's results are the finals of windows (tumbling, hopping or session), each at its
	// window's end - 1, and the output watermark is the operator's minus grace; with Rekey, every
	// record is at its own event time and the output watermark is the chain's input's.
	// TimedInput: the chain reads such a topic (windows' finals, or a repartition topic); its
	// watermark is the smallest of its writers' announced ones, not its records' times minus
	// max_delay.
	TimedOutput, TimedInput bool
	// WindowFinals: the chain's records are each the final of a window of its operator's size
	// and advance, at the window's end - 1 (configs.Aggregate.WindowFinals, Cogroup.WindowFinals):
	// each folds into that window alone (operators.Mergeable.AssignFinal).
	WindowFinals bool
	// Tombstones: the chain reads an upsert stream whose tombstones (null values) it passes on
	// rather than dead-letters: to its changes operator (which it reads with no stage before
	// it), or past its stages to its sink (the results of an aggregate with retractions).
	Tombstones bool
	// Fork: an earlier chain reads the same source and SharedStages first stages too (several
	// operators read one input): that chain dead-letters their bad records and writes their
	// taps, this one skips them. Each chain's progress is committed with the offsets.
	Fork         bool
	SharedStages int
	// After: the stateless chain that alone read Keyed's results from its output topic, run
	// instead on each result as Keyed emits it, in this chain's task and transaction
	// (processing.inline_stages; inlineReaders): its source decodes the result as it decoded
	// the topic's records (at the time the result would have had there), its stages run, and
	// what they keep goes to its sink. SinkTopic still names the output topic, which is
	// neither created nor read: what the task produces to it goes to these stages
	// (operators/task/after.go). nil: none.
	After *ChainPlan
	// TapsOnly: the chain writes its Taps and nothing else, split from the chain after it,
	// whose operator may hold that chain's progress (splitTaps).
	TapsOnly bool
}

// windowed reports whether op keeps event-time windows.
func windowed(op *configs.Operator) bool {
	switch {
	case op.Aggregate != nil:
		return op.Aggregate.Window.Kind() != ""
	case op.Top != nil:
		return op.Top.Window.Kind() != ""
	case op.Distinct != nil:
		return op.Distinct.Window.Kind() != ""
	}
	return false
}

// keepsPartition reports whether a group_by over records that went through stages keeps them in
// their input partition: the source's key is a field (key), one of the group_by's paths (not
// an expression's column) is that field, and every stage leaves it as it is (a filter; a map's select that copies it by
// name, a map's set that does not assign it). The input is partitioned by its key (as every
// keyed operator reading a source assumes), so all the records of one group key are in one
// partition. A stream-table join adds a member and is not looked into: false.
func keepsPartition(stages []configs.Operator, key, groupBy string) bool {
	if key == "" || !slices.ContainsFunc(configs.SplitGroupBy(groupBy), func(p configs.GroupByPart) bool { return p.Expr == "" && p.Text == key }) {
		return false // an expression's column, even one named like the key, may not be the key's value
	}
	top, _, _ := strings.Cut(key, ".")
	for _, s := range stages {
		switch {
		case s.Filter != nil:
		case s.Map != nil && len(s.Map.Select) > 0:
			if !slices.ContainsFunc(s.Map.Columns(), func(c configs.Column) bool { return c.Name == top && strings.TrimSpace(c.Expr) == top }) {
				return false
			}
		case s.Map != nil:
			for f := range s.Map.Set {
				if f == top || strings.HasPrefix(f, top+".") {
					return false
				}
			}
		default:
			return false
		}
	}
	return true
}

// ID names the chain among those reading its topic: its keyed operator or its last stage (the
// chains of one topic part at a branch, so they end at different operators).
func (c ChainPlan) ID() string {
	switch {
	case c.Keyed != nil:
		return c.Keyed.Name
	case c.Rekey != "":
		// Forks that share their stages re-key for different operators, and a combining one
		// holds its progress while the others go on (operators/task/combine.go). No name has
		// a colon.
		return "rekey:" + c.RekeyFor
	case c.TapsOnly:
		return "taps:" + c.LegacyID()
	}
	return c.LegacyID()
}

// LegacyID is the ID a re-keying chain had before "rekey:<operator>": its last stage or its
// source, which forks sharing their stages shared (harmless then: such chains were always at
// one progress). Commits of that sluice name it so.
func (c ChainPlan) LegacyID() string {
	if len(c.Stages) > 0 {
		return c.Stages[len(c.Stages)-1].Name
	}
	return c.SourceName
}

// Tap is a stage's output in the middle of a chain: the records leaving Stages[Stage] also go
// to SinkTopic (inside the open transaction, like any stateless output).
type Tap struct {
	Stage           int
	Sink, SinkTopic string
}

// Plan is a compiled pipeline. It is immutable after NewPlan and safe for concurrent use.
type Plan struct {
	Config *configs.Config
	Chains []ChainPlan
}

// noValues stands in for the value decoder in compile checks, which decode nothing.
type noValues struct{}

func (noValues) AppendJSON(dst, _ []byte) ([]byte, error) {
	return dst, errors.New("task: no value decoder (a compile check)")
}

// repartitionSource is the source of the chain that reads an aggregate's repartition topic:
// the record key is the group key and the record timestamp the event time (the first chain
// writes both), with the original source's watermark.
func repartitionSource(cfg *configs.Config, op string, orig configs.Source) configs.Source {
	return configs.Source{Topic: cfg.RepartitionTopic(op), Format: "json", Watermark: orig.Watermark}
}

// outputSource is the source of the chain that reads keyed operator op's output topic: JSON
// records whose key is the operator's key and whose timestamp is when they were emitted, or for
// the finals of windows their window's end - 1 (timedResults).
func outputSource(cfg *configs.Config, op string) configs.Source {
	return configs.Source{Topic: cfg.OutputTopic(op), Format: "json"}
}

// timedResults reports whether keyed operator op's results carry an event time: the finals of
// its windows (emit: final; tumbling, hopping or session, but not a session cogroup's), or a
// windowed distinct's firsts, each at its window's end - 1, with the output watermark its
// writers announce (attributes.go).
func timedResults(op *configs.Operator) bool {
	var w *configs.Window
	var emit string
	switch {
	case op.Aggregate != nil:
		w, emit = op.Aggregate.Window, op.Aggregate.Emit
	case op.Cogroup != nil:
		w, emit = op.Cogroup.Window, op.Cogroup.Emit
		if w.Kind() == "session" {
			return false // its bound (Sessions.OutputLag) is not tested through a topic yet
		}
	case op.Top != nil:
		w, emit = op.Top.Window, configs.EmitFinal // a top over windows writes their finals
	case op.Distinct != nil:
		w, emit = op.Distinct.Window, configs.EmitFinal // each first once per window, at its end - 1
	}
	return w.Kind() != "" && emit == configs.EmitFinal
}

// checkReadsResults checks keyed operator op (operators[i]), which reads the results of keyed
// operator up: they are facts (finals of windows, join pairs), each emitted once, and if op is
// an event-time window, they are the finals of windows, which carry an event time
// (timedResults).
func checkReadsResults(i int, op configs.Operator, up *configs.Operator) error {
	key := fmt.Sprintf("operators[%d].%s", i, op.Kind())
	if up.Changes != nil {
		// Retractions and rows: only an aggregate that subtracts the retractions reads them.
		if op.Aggregate == nil || !op.Aggregate.Retractions {
			return &configs.Error{Key: key + ".input", Msg: fmt.Sprintf("%q writes changes (rows and their retractions, \"retract\": true); only an aggregate with retractions: true reads them", up.Name)}
		}
		return nil
	}
	if op.Aggregate != nil && op.Aggregate.Retractions {
		return &configs.Error{Key: key + ".retractions", Msg: fmt.Sprintf("%q writes no retractions; read the changes of its results: a changes operator with input %q, and this aggregate's input that operator", up.Name, up.Name)}
	}
	if op.Changes != nil {
		// An upsert stream keyed by row: updates of one result per key (no window), top's
		// rows, dedup's latest records.
		var w *configs.Window
		switch {
		case up.Aggregate != nil:
			w = up.Aggregate.Window
		case up.Cogroup != nil:
			w = up.Cogroup.Window
		case up.Top != nil && up.Top.Window != nil:
			return &configs.Error{Key: key + ".input", Msg: fmt.Sprintf("%q is a top over windows: it writes each window's rows once, when it closes, not an upsert stream; a changes operator reads a top without window", up.Name)}
		case up.Top != nil, up.Dedup != nil && up.Dedup.Keep == configs.KeepLast:
		default:
			return &configs.Error{Key: key + ".input", Msg: fmt.Sprintf("%q does not write an upsert stream (one row per Kafka key, the latest wins); a changes operator reads the results of an unwindowed aggregate or cogroup, a top, or a dedup with keep: last", up.Name)}
		}
		if w != nil {
			return &configs.Error{Key: key + ".input", Msg: fmt.Sprintf("%q writes rows per key and window under the key alone, not an upsert stream; a changes operator reads an unwindowed aggregate's results", up.Name)}
		}
		return nil
	}
	if op.Join != nil && !(op.Join.StreamStream() && op.Join.Within == 0) {
		return &configs.Error{Key: key, Msg: fmt.Sprintf("a join by event time (stream-stream with within, or as_of: event_time) over the results of keyed operator %q is not supported yet; a regular join (no within), a join with a table as_of: processing, an aggregate or a cogroup can read them", up.Name)}
	}
	var w *configs.Window
	if op.Aggregate != nil {
		w = op.Aggregate.Window
	} else if op.Cogroup != nil {
		w = op.Cogroup.Window
	} else if op.Top != nil {
		w = op.Top.Window
	}
	if w != nil && !timedResults(up) {
		return &configs.Error{Key: key + ".window", Msg: fmt.Sprintf("event-time windows over the results of keyed operator %q need the finals of its windows (emit: final; not a session cogroup's), which carry their window's end as event time; its results carry the time they were emitted; leave the window out", up.Name)}
	}
	var emit string
	switch {
	case up.Aggregate != nil:
		emit = up.Aggregate.Emit
	case up.Cogroup != nil:
		emit = up.Cogroup.Emit
	case up.Top != nil && up.Top.Window != nil:
		emit = configs.EmitFinal // each window's rows once
	case up.Dedup != nil && up.Dedup.Keep == configs.KeepLast, up.Top != nil:
		emit = configs.EmitUpdates
	default:
		return nil // join pairs, a dedup's first records and a distinct's firsts are emitted once each
	}
	if emit != configs.EmitFinal {
		hint := ""
		if (up.Aggregate != nil && up.Aggregate.Window == nil || up.Cogroup != nil && up.Cogroup.Window == nil || up.Top != nil || up.Dedup != nil) && op.Aggregate != nil {
			hint = fmt.Sprintf(", or aggregate its changes: a changes operator reading %q, and %q reading that with retractions: true", up.Name, op.Name)
		}
		return &configs.Error{Key: fmt.Sprintf("operators[%d].%s.input", i, op.Kind()), Msg: fmt.Sprintf(
			"%q emits updates (its current value, again at every commit that changes it), so %q would aggregate each key's updates rather than its results; give %q a window and emit: final%s",
			up.Name, op.Name, up.Name, hint)}
	}
	return nil
}

// NewPlan splits the operators into linear chains (a source or an operator read by several
// operators starts one chain per branch, repeating what comes before; a keyed operator ends its
// chain, and later operators read its results through its output topic in chains of their
// own), checks what may read a keyed operator's results, and compiles every operator once so
// that expression errors surface at start-up, naming the operator.
func NewPlan(cfg *configs.Config) (*Plan, error) {
	consumers := map[string][]int{} // input name -> indexes of the operators reading it, in config order
	cogroups := map[string]*configs.Operator{}
	for i, op := range cfg.Operators {
		for _, in := range op.Inputs() {
			consumers[in] = append(consumers[in], i)
		}
		if op.Cogroup != nil {
			// A cogroup runs as an aggregate of its fields whose state counts per input.
			cogroups[op.Name] = &configs.Operator{Name: op.Name, Aggregate: op.Cogroup.Aggregate(), Output: op.Output}
		}
		if op.Join != nil && (op.Join.StreamStream() || op.Join.AsOf == "event_time") {
			cogroups[op.Name] = &cfg.Operators[i] // a Keyed operator of two inputs
		}
	}
	p := &Plan{Config: cfg}
	// A walk builds the chains from one start: a source, or a keyed operator whose results later
	// operators read through its output topic. Sources first (sorted), then those operators in
	// config order, so an operator's chain is built before the chains that read its results.
	type start struct {
		name     string
		src      configs.Source
		orig     configs.Source    // the source whose watermark a repartition topic takes
		upstream *configs.Operator // the keyed operator whose results the chain reads, or nil
		tap      *Tap              // the upstream's own output: its results also go to its sink
	}
	var starts []start
	names := make([]string, 0, len(cfg.Sources))
	for n := range cfg.Sources {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		starts = append(starts, start{name: n, src: cfg.Sources[n], orig: cfg.Sources[n]})
	}
	walked := map[string]bool{}
	// A branch is a chain being built: the operator that extends it next, read from cur.
	type branch struct {
		c   ChainPlan
		cur string
		op  int
	}
	// fork returns the branches that extend c from cur, one per operator reading cur: the first
	// goes on with c; each other repeats c's source and stages (a fork: it leaves their dead
	// letters and taps to the first).
	fork := func(c ChainPlan, cur string) []branch {
		var out []branch
		for k, i := range consumers[cur] {
			b := branch{c: c, cur: cur, op: i}
			if k > 0 {
				b.c.Fork, b.c.SharedStages = true, len(c.Stages)
				b.c.Stages, b.c.Tables = slices.Clone(c.Stages), slices.Clone(c.Tables)
				b.c.Taps = nil
			}
			out = append(out, b)
		}
		return out
	}
	for si := 0; si < len(starts); si++ {
		st := starts[si]
		c := ChainPlan{SourceName: st.name, Source: st.src, TimedInput: st.upstream != nil && timedResults(st.upstream)}
		if st.tap != nil {
			c.Taps = append(c.Taps, *st.tap)
		}
		todo := fork(c, st.name)
		if len(todo) == 0 && len(c.Taps) > 0 {
			todo = []branch{{c: c, op: -1}}
		}
		for len(todo) > 0 {
			b := todo[0]
			todo = todo[1:]
			c, cur := b.c, b.cur
			for i := b.op; i >= 0; {
				op := cfg.Operators[i]
				if st.upstream != nil && op.Keyed() {
					if err := checkReadsResults(i, op, st.upstream); err != nil {
						return nil, err
					}
				}
				if op.GroupBy() != "" && cfg.Processing.LocalRekey && op.Keyed() && !windowed(&op) && st.upstream == nil &&
					c.Source.Topic == st.src.Topic && keepsPartition(c.Stages, st.src.Key, op.GroupBy()) {
					// The group key holds the source's key: its records are in one partition
					// of the input already, and the operator runs there. Not with windows:
					// behind a repartition topic their lateness is judged by the watermark of
					// every input partition (the smallest), here it would be by one's.
					c.LocalKey = op.GroupBy()
				} else if op.GroupBy() != "" {
					// Re-keying: this chain ends at the repartition topic; the keyed operator's
					// chain (or, for a rekey, the chain of the operators after it) reads it.
					// Event time crosses it as the writers' announcements (TimedOutput,
					// TimedInput): the reader's watermark is the smallest of its writers'.
					c.Rekey, c.RekeyFor, c.RekeyExpr = op.GroupBy(), op.Name, op.RekeyExpr()
					c.SinkTopic = cfg.RepartitionTopic(op.Name)
					c.Sink = ""
					c.TimedOutput = true
					p.Chains = append(p.Chains, c)
					c = ChainPlan{SourceName: op.Name + "-repartition", Source: repartitionSource(cfg, op.Name, st.orig), TimedInput: true}
				}
				streamJoin := op.Join != nil && op.Join.StreamStream()
				asOf := op.Join != nil && op.Join.AsOf == "event_time"
				if asOf {
					c.Keyed, c.AsOf = cogroups[op.Name], op.Join
					c.Versions = cfg.Tables[op.Join.Table].Versions
					c.Changelog = cfg.ChangelogTopic(op.Name)
				} else if op.Cogroup != nil {
					c.Keyed, c.Cogroup = cogroups[op.Name], op.Cogroup
					c.Input = slices.Index(op.Cogroup.Inputs, cur)
					c.Changelog = cfg.ChangelogTopic(op.Name)
					c.WindowFinals = slices.Contains(op.Cogroup.WindowFinals, cur)
				} else if streamJoin {
					c.Keyed, c.StreamJoin = cogroups[op.Name], op.Join
					if cur == op.Join.Right {
						c.Input = 1
					}
					c.Changelog = cfg.ChangelogTopic(op.Name)
				} else if op.Keyed() {
					c.Keyed = &cfg.Operators[i]
					c.Changelog = cfg.ChangelogTopic(op.Name)
					c.WindowFinals = op.Aggregate != nil && op.Aggregate.WindowFinals
					c.Tombstones = op.Changes != nil && len(c.Stages) == 0
				} else if op.Rekey != nil {
					// Nothing more: the chain now reads the re-keyed records (above).
				} else {
					if st.upstream != nil && st.upstream.Changes != nil && op.Map != nil && len(op.Map.Select) > 0 &&
						!slices.ContainsFunc(op.Map.Columns(), func(col configs.Column) bool { return col.Name == configs.RetractField }) {
						return nil, &configs.Error{Key: fmt.Sprintf("operators[%d].map.select", i), Msg: fmt.Sprintf(
							"reads the changes of %q, whose retractions carry %q: true; list %s among the columns (or use set), or the retractions would be added as rows", st.upstream.Name, configs.RetractField, configs.RetractField)}
					}
					c.Stages = append(c.Stages, op)
					if op.Join != nil {
						c.Tables = append(c.Tables, op.Join.Table)
					}
				}
				more := len(consumers[op.Name]) > 0
				stage := op.Filter != nil || op.Map != nil || op.Rekey != nil || op.Join != nil && !streamJoin && !asOf
				if more && op.Output != "" && stage {
					// A stage with an output that also feeds later operators: its records go to
					// the sink as they leave it (a tap), and on down the chain.
					c.Taps = append(c.Taps, Tap{Stage: len(c.Stages) - 1, Sink: op.Output, SinkTopic: cfg.Sinks[op.Output].Topic})
				} else if op.Output != "" && !more {
					c.Sink = op.Output
					c.SinkTopic = cfg.Sinks[op.Output].Topic
				}
				if op.Keyed() {
					if more && !walked[op.Name] {
						// Later operators read its results: the operator writes them to its
						// output topic (inside the transaction of its checkpoint), and chains of
						// their own read it, writing them to the operator's sink too, if it has one.
						walked[op.Name] = true
						next := start{name: op.Name, src: outputSource(cfg, op.Name), orig: st.orig, upstream: &cfg.Operators[i]}
						if timedResults(&op) {
							// Its readers' writers may go idle, and so may a reader that writes
							// timed results in turn: the source's idle_after carries over.
							next.src.Watermark.IdleAfter = st.orig.Watermark.IdleAfter
						}
						if op.Output != "" {
							next.tap = &Tap{Stage: -1, Sink: op.Output, SinkTopic: cfg.Sinks[op.Output].Topic}
						}
						starts = append(starts, next)
					}
					if more {
						c.SinkTopic, c.Output = cfg.OutputTopic(op.Name), true
						c.TimedOutput = timedResults(&op)
					} else if op.Aggregate.OutputChangelog() || op.Top.OutputChangelog() {
						// Its results are its changelog (validated: a sink of its own, no
						// window, no avg): one write per key (a top: per row).
						c.Changelog, c.OutputChangelog = c.SinkTopic, true
					}
					break
				}
				if !more {
					break
				}
				// On to the operators that read this one: the first extends c, the others
				// are forks, built after it.
				bs := fork(c, op.Name)
				c, cur, i = bs[0].c, op.Name, bs[0].op
				todo = append(bs[1:], todo...)
			}
			if c.Keyed == nil && len(c.Stages) == 0 && len(c.Taps) == 0 && c.SinkTopic == "" {
				continue // a declared source nobody reads
			}
			if up := st.upstream; c.Keyed == nil && c.Rekey == "" && up != nil && up.Aggregate != nil && up.Aggregate.Retractions {
				c.Tombstones = true // the rows that leave the aggregate's result
			}
			if c.SinkTopic == "" && c.Keyed == nil && len(c.Stages) > 0 {
				last := c.Stages[len(c.Stages)-1].Name
				for i, op := range cfg.Operators {
					if op.Name == last {
						return nil, &configs.Error{Key: fmt.Sprintf("operators[%d].output", i), Msg: "a chain without an aggregate must end in an output sink"}
					}
				}
			}
			p.Chains = append(p.Chains, c)
		}
	}
	// A join as of event time reads its table as its second input: a chain of its own.
	for i, op := range cfg.Operators {
		if op.Join == nil || op.Join.AsOf != "event_time" {
			continue
		}
		tb := cfg.Tables[op.Join.Table]
		for _, c := range p.Chains {
			if slices.Contains(c.Tables, op.Join.Table) {
				return nil, &configs.Error{Key: fmt.Sprintf("operators[%d].join.as_of", i),
					Msg: fmt.Sprintf("table %q is also joined as_of processing; a table is joined one way", op.Join.Table)}
			}
		}
		p.Chains = append(p.Chains, ChainPlan{
			SourceName: op.Join.Table,
			Source:     configs.Source{Topic: tb.Topic, Format: tb.Format, KeyFormat: tb.KeyFormat, Key: tb.Key, Timestamp: tb.Timestamp, Watermark: tb.Watermark},
			Keyed:      cogroups[op.Name], AsOf: op.Join, Input: 1, Versions: tb.Versions,
			Changelog: cfg.ChangelogTopic(op.Name), Sink: op.Output, SinkTopic: sinkTopic(cfg, op.Output),
		})
	}
	if len(p.Chains) == 0 {
		return nil, &configs.Error{Key: "operators", Msg: "no operator reads any source"}
	}
	if cfg.Processing.CombineBeforeRekey {
		for i := range p.Chains {
			w := &p.Chains[i]
			if w.Rekey == "" {
				continue
			}
			var readers []*ChainPlan
			for j := range p.Chains {
				if p.Chains[j].Source.Topic == w.SinkTopic {
					readers = append(readers, &p.Chains[j])
				}
			}
			if len(readers) != 1 {
				continue
			}
			if w.Rekey != "" && combines(w, readers[0], cfg.Processing.Guarantee == configs.ExactlyOnce) {
				r := *readers[0]
				w.Combine = &r
			} else if projects(readers[0]) {
				r := *readers[0]
				w.Project = &r
			}
		}
		// Then the keyed operators' results, whose filter may ask what a re-keying reader
		// combines for (filtersOutput).
		for i := range p.Chains {
			w := &p.Chains[i]
			if w.Rekey != "" || !w.Output {
				continue
			}
			var readers []*ChainPlan
			for j := range p.Chains {
				if p.Chains[j].Source.Topic == w.SinkTopic {
					readers = append(readers, &p.Chains[j])
				}
			}
			if len(readers) == 1 && filtersOutput(w, readers[0]) {
				r := *readers[0]
				w.Combine = &r
			}
			if len(readers) == 1 && w.Keyed.Distinct != nil {
				w.Keep = keepsFor(readers[0])
			}
		}
	}
	if cfg.Processing.InlineStages {
		p.Chains = inlineReaders(p.Chains)
	}
	p.Chains = splitTaps(p.Chains)
	// Compile everything once now, so a bad expression is a config error, not a runtime one.
	for _, c := range p.Chains {
		if _, err := c.Build(nil, nil); err != nil {
			return nil, fieldError(cfg, err)
		}
	}
	return p, nil
}

// judgedBeforeSorting reports whether the regular join of chain c judges in a backlog the
// records of its side that is not unique before it sorts them (operators/task's joinFilter;
// operators.RegularJoin.Judge): its results go, with no stage between, to the top of chain r,
// or (r nil) through a re-key by columns of its unique side alone to an aggregate of each key's
// best value.
func judgedBeforeSorting(c, r *ChainPlan) bool {
	if r != nil && (len(r.Stages) > 0 || r.Keyed.Top.Window != nil || r.Keyed.Top.N > operators.TopBoundMaxN || strings.Contains(r.Keyed.Top.By, ".")) {
		return false
	}
	ops, err := c.Build(nil, nil)
	if err != nil {
		return false
	}
	j, ok := ops.Kop.(*operators.RegularJoin)
	if !ok {
		return false
	}
	if r != nil {
		return j.Judge(r.Keyed.Top.By, nil) != nil
	}
	rd := ops.Combine // the re-keying reader, and after it the aggregate
	if rd == nil || rd.Rekey == nil || len(rd.Stages) > 0 || rd.Combine == nil {
		return false
	}
	a, ok := rd.Combine.Agg.(*operators.Aggregate)
	if !ok {
		return false
	}
	b := a.Bound()
	return b != nil && j.Judge(b.Member(), rd.Rekey.Members()) != nil
}

// inlineReaders runs each chain of filters and maps that alone reads a keyed operator's results
// and writes them to a sink in the task of that operator, on each result as it is emitted
// (ChainPlan.After), rather than through the output topic: the results are produced once, not
// twice, and need not wait for their transaction's commit to be read (read_committed) before
// the stages see them. The reader is stateless, so which task runs it changes nothing in what
// it writes: each result is decoded as it would have been read (key, value, and the timestamp
// the writer gives it), and per key the results come in the same order. Not for a reader with
// taps (its own output: the keyed operator's sink), a join as of processing time (its tables
// are read in the partitions of the output topic), a re-key or an operator, nor for a writer
// whose output topic something else depends on (its changelog, a combining or projecting
// reader, a distinct writing only what its reader reads).
func inlineReaders(chains []ChainPlan) []ChainPlan {
	inlined := map[int]bool{}
	for i := range chains {
		w := &chains[i]
		if !w.Output || w.Keyed == nil || w.Rekey != "" || w.OutputChangelog || w.Combine != nil || w.Project != nil || w.Keep != nil {
			continue
		}
		reader, n := -1, 0
		for j := range chains {
			if chains[j].Source.Topic == w.SinkTopic {
				reader, n = j, n+1
			}
		}
		if n != 1 || !inlinable(&chains[reader]) {
			continue
		}
		r := chains[reader]
		w.After, w.Output = &r, false
		inlined[reader] = true
	}
	if len(inlined) == 0 {
		return chains
	}
	out := make([]ChainPlan, 0, len(chains)-len(inlined))
	for i, c := range chains {
		if !inlined[i] {
			out = append(out, c)
		}
	}
	return out
}

// inlinable reports whether r, the one chain reading a keyed operator's results, can run on
// them in the writer's task (inlineReaders): filters and maps ending in a sink, nothing else.
func inlinable(r *ChainPlan) bool {
	if r.Keyed != nil || r.Rekey != "" || r.LocalKey != "" || r.Sink == "" || len(r.Taps) > 0 || r.TapsOnly || r.Fork ||
		len(r.Tables) > 0 || r.Combine != nil || r.Project != nil || r.After != nil {
		return false
	}
	for _, s := range r.Stages {
		if s.Filter == nil && s.Map == nil {
			return false
		}
	}
	return true
}

// splitTaps gives the taps of a chain that may hold its progress behind its last record a
// chain of their own, just before it: its source and its stages up to the last tapped one,
// writing the taps and nothing else (TapsOnly). A keyed operator holds its chain's progress
// while it sorts a backlog, and a combining writer (Combine) while it holds its table; the taps
// go out as their records pass, so a rewind to that progress (a restart, or an abort that keeps
// the sorted backlog) would write them twice or lose them. The chain that fed them becomes a
// fork of the new one (SharedStages: its tapped stages), which dead-letters their bad records;
// each chain's progress is committed with the offsets.
func splitTaps(chains []ChainPlan) []ChainPlan {
	out := make([]ChainPlan, 0, len(chains))
	for _, c := range chains {
		if len(c.Taps) == 0 || c.Keyed == nil && c.Combine == nil {
			out = append(out, c)
			continue
		}
		last := -1
		for _, tp := range c.Taps {
			last = max(last, tp.Stage)
		}
		taps := ChainPlan{
			SourceName: c.SourceName, Source: c.Source, Stages: slices.Clone(c.Stages[:last+1]),
			Taps: c.Taps, TapsOnly: true, TimedInput: c.TimedInput, Tombstones: c.Tombstones && c.Keyed == nil,
			Fork: c.Fork, SharedStages: min(c.SharedStages, last+1),
		}
		for _, st := range taps.Stages {
			if st.Join != nil {
				taps.Tables = append(taps.Tables, st.Join.Table)
			}
		}
		c.Taps = nil
		c.Fork, c.SharedStages = true, max(c.SharedStages, last+1)
		out = append(out, taps, c)
	}
	return out
}

// combines reports whether the writers of r's repartition topic may combine their records
// for r's operator, r being its only reader and running no stage and writing no tap (which
// writes r's records to a sink as they come) before it: an aggregate or a
// cogroup without windows or retractions takes partial states (operators.Mergeable.Merge: a
// state depends only on the multiset of its inputs), and so does one over tumbling windows
// (per window), an aggregate of one input over sessions partial sessions
// (operators.PartialMerger), and a distinct needs only the records that
// set a flag their writer has not yet passed for their key (the others it drops anyway), and a
// top (of n at most operators.TopBoundMaxN) only those that may still enter it: for a top over
// windows, only under exactly_once, whose commits carry what a writer announced of its
// watermark to its next owner (a bound of what the reader knows).
//
// Over windows or sessions a writer's partial reaches the reader later than its records would
// have, so the writer combines only records on time by the largest watermark it announced,
// which must bound the reader's: under exactly_once, whose commits carry what the writer
// announced to its partition's next owner, and only when the writer w never announces that it
// is idle (its source's watermark.idle_after is 0): while it is idle the reader's watermark may
// pass its own, and never goes back.
func combines(w, r *ChainPlan, exactlyOnce bool) bool {
	if r.Keyed == nil || len(r.Stages) > 0 || len(r.Taps) > 0 || r.Tombstones || r.StreamJoin != nil || r.AsOf != nil {
		return false
	}
	if t := r.Keyed.Top; t != nil {
		return t.N <= operators.TopBoundMaxN && (t.Window == nil || exactlyOnce)
	}
	if r.Cogroup != nil {
		return r.Cogroup.Window == nil
	}
	if r.Keyed.Distinct != nil {
		return r.Keyed.Distinct.Window == nil // a writer's flags passed would be per window
	}
	a := r.Keyed.Aggregate
	if a == nil || a.Retractions || r.WindowFinals {
		return false
	}
	switch a.Window.Kind() {
	case "":
		return true
	case "session", "tumbling":
		return exactlyOnce && w.Source.Watermark.IdleAfter == 0
	}
	return false // hopping: each record in several windows (a writer's partial would be per slice)
}

// keepNote is the explain line of a distinct's Keep.
func keepNote(w io.Writer, keep []string) {
	if keep != nil {
		fmt.Fprintf(w, "     of its records it writes only the members its reader reads (%s), beside its columns (processing.combine_before_rekey)\n", strings.Join(keep, ", "))
	}
}

// projectedMembers names the members the operator of r reads ("none" for none).
func projectedMembers(r *ChainPlan) string {
	names, ok := readMembers(r)
	switch {
	case !ok:
		return "?"
	case len(names) == 0:
		return "none"
	}
	names = slices.Clone(names)
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// projects reports whether the writer of r's repartition topic may write only the members r's
// operator reads (ChainPlan.Project): r ends in an aggregate of one input that says which
// members it reads (operators.MemberReader), with no stage before it, and sends nothing to a
// sink on the way.
func projects(r *ChainPlan) bool {
	if r.Keyed == nil || r.Keyed.Aggregate == nil || r.Cogroup != nil || len(r.Stages) > 0 || len(r.Taps) > 0 ||
		r.Fork || r.Tombstones || r.WindowFinals || r.StreamJoin != nil || r.AsOf != nil {
		return false
	}
	_, ok := readMembers(r)
	return ok
}

// readMembers returns the members the operator of r reads (operators.MemberReader; of a
// cogroup, those of r's input); false when it does not say or may read any.
func readMembers(r *ChainPlan) ([]string, bool) {
	ops, err := r.Build(nil, nil)
	if err != nil {
		return nil, false
	}
	if a, ok := ops.Operator().(*operators.Aggregate); ok && r.Cogroup != nil {
		return a.ReadsInput(r.Input)
	}
	m, ok := ops.Operator().(operators.MemberReader)
	if !ok {
		return nil, false
	}
	return m.ReadsMembers()
}

// keepsFor returns the members r reads of the records it reads (ChainPlan.Keep): r re-keys
// them with no stage before and sends nothing to a sink, and its writer combines them for, or
// projects them to, its reader, which says what it reads (readMembers). nil: any.
func keepsFor(r *ChainPlan) []string {
	if r.Rekey == "" || len(r.Stages) > 0 || len(r.Taps) > 0 || r.Fork || r.Tombstones {
		return nil
	}
	reader := r.Combine
	if reader == nil {
		reader = r.Project
	}
	if reader == nil || len(reader.Taps) > 0 { // a tap writes the records whole to a sink
		return nil
	}
	names, ok := readMembers(reader)
	if !ok {
		return nil
	}
	keep := slices.Clone(names)
	k, err := r.newRekey()
	if err != nil {
		return nil
	}
	tops := k.Members()
	if tops == nil { // an expression that reads more than members (the time, $env)
		return nil
	}
	for _, top := range tops {
		if !slices.Contains(keep, top) {
			keep = append(keep, top)
		}
	}
	slices.Sort(keep)
	return keep
}

// filtersOutput reports whether the keyed operator of w, whose results only r reads (its
// output topic), may drop those the operator after r would drop or ignore
// (operators/task/combine.go): a top without windows (n at most operators.TopBoundMaxN) that
// keys by the results' own key, after filters only; or an aggregate whose one field is the max
// or min of a number (operators.Aggregate.Bound: only each key's best value counts), after
// filters and maps, keyed by the results' key, r's local key or r's re-key (then the one
// reader of r's repartition topic, which r combines for); or, when w is an aggregate over
// windows that writes each window's final once (TimedOutput), a top over windows after filters
// and maps and r's re-key. r's stages must read no event time unless w's results carry theirs,
// and r sends nothing to a sink on the way. A cogroup's results are never filtered.
func filtersOutput(w, r *ChainPlan) bool {
	if w.Keyed == nil || w.Cogroup != nil ||
		len(r.Taps) > 0 || r.Fork || r.Tombstones || r.StreamJoin != nil || r.AsOf != nil {
		return false
	}
	maps := true
	switch {
	case w.Keyed.Aggregate != nil:
		// The finals of its windows, each written once at its window's end - 1, for a top over
		// windows through r's re-key (Nexmark q5: the counts per auction and window, for the
		// auctions at each window's highest count).
		if !w.TimedOutput || w.OutputChangelog || r.Rekey == "" || r.Combine == nil || !windowTop(r.Combine) {
			return false
		}
	case r.Keyed != nil && r.Keyed.Top != nil:
		if r.Keyed.Top.Window != nil || r.Keyed.Top.N > operators.TopBoundMaxN || r.Rekey != "" || r.LocalKey != "" {
			return false
		}
		maps = false // its bound reads the value before the stages first (TopBound.Beaten)
	case r.Keyed != nil:
		if r.Rekey != "" || !bestOnly(r) {
			return false
		}
	case r.Rekey != "":
		if r.Combine == nil || !bestOnly(r.Combine) {
			return false
		}
	default:
		return false
	}
	for _, s := range r.Stages {
		var st operators.Stage
		var err error
		switch {
		case s.Filter != nil:
			st, err = operators.NewFilter(s.Name, *s.Filter)
		case s.Map != nil && maps:
			st, err = operators.NewMap(s.Name, *s.Map)
		default:
			return false
		}
		if err != nil || operators.ReadsTime(st) && !w.TimedOutput {
			return false
		}
	}
	return true
}

// windowTop reports whether a's operator is a top over windows whose writers may filter for it
// (n at most operators.TopBoundMaxN) and whose input only grows.
func windowTop(a *ChainPlan) bool {
	return a.Keyed != nil && a.Keyed.Top != nil && a.Keyed.Top.Window != nil &&
		a.Keyed.Top.N <= operators.TopBoundMaxN && !a.Tombstones && a.Cogroup == nil
}

// bestOnly reports whether a's operator is an aggregate of its records' best value alone
// (operators.Aggregate.Bound).
func bestOnly(a *ChainPlan) bool {
	if a.Keyed == nil || a.Keyed.Aggregate == nil || a.Cogroup != nil || a.Tombstones {
		return false
	}
	agg, err := operators.NewAggregate(a.Keyed.Name, *a.Keyed.Aggregate)
	return err == nil && agg.Bound() != nil
}

// fieldError turns an aggregate field's compile error (its where) into a config error naming
// the field's key; any other error is returned as it is.
func fieldError(cfg *configs.Config, err error) error {
	var fe *operators.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	for i := range cfg.Operators {
		op := &cfg.Operators[i]
		if op.Name != fe.Operator {
			continue
		}
		if fe.Part == "flags" {
			if op.ExpandedFrom() != "" {
				// A distinct's flag written out for a count_distinct field: its where.
				return &configs.Error{Key: op.Key(i) + ".fields." + fe.Field + ".where", Msg: fe.Err.Error()}
			}
			return &configs.Error{Key: op.Key(i) + ".flags." + fe.Field, Msg: fe.Err.Error()}
		}
		return &configs.Error{Key: op.Key(i) + ".fields." + fe.Field + "." + fe.Part, Msg: fe.Err.Error()}
	}
	return err
}

// Topics returns the topics the pipeline consumes, sorted: its sources, its tables and the
// repartition topics it reads.
func (p *Plan) Topics() []string {
	seen := map[string]bool{}
	var ts []string
	add := func(t string) {
		if !seen[t] {
			seen[t] = true
			ts = append(ts, t)
		}
	}
	for _, c := range p.Chains {
		add(c.Source.Topic)
		for _, tb := range c.Tables {
			add(p.Config.Tables[tb].Topic)
		}
	}
	sort.Strings(ts)
	return ts
}

// TableTopics returns the topics of the tables the pipeline joins, by topic: the table's name.
func (p *Plan) TableTopics() map[string]string {
	out := map[string]string{}
	for _, c := range p.Chains {
		for _, tb := range c.Tables {
			out[p.Config.Tables[tb].Topic] = tb
		}
	}
	return out
}

// CoPartitioned returns the groups of topics a task spans: a stream and the tables its chain
// joins (transitively: two streams joining one table are one group), each group sorted, the
// groups sorted by their first topic. Topics in no join are groups of one. Partition p of every
// topic of a group belongs to one task, so to one group member.
func (p *Plan) CoPartitioned() [][]string {
	parent := map[string]string{}
	var find func(string) string
	find = func(t string) string {
		if parent[t] == "" || parent[t] == t {
			parent[t] = t
			return t
		}
		r := find(parent[t])
		parent[t] = r
		return r
	}
	for _, t := range p.Topics() {
		find(t)
	}
	union := func(x, y string) {
		if a, b := find(x), find(y); a != b {
			parent[max(a, b)] = min(a, b)
		}
	}
	cogroupTopic := map[string]string{} // a cogroup's first input topic
	for _, c := range p.Chains {
		for _, tb := range c.Tables {
			union(c.Source.Topic, p.Config.Tables[tb].Topic)
		}
		if c.Cogroup != nil || c.StreamJoin != nil || c.AsOf != nil {
			if first, ok := cogroupTopic[c.Keyed.Name]; ok {
				union(first, c.Source.Topic)
			} else {
				cogroupTopic[c.Keyed.Name] = c.Source.Topic
			}
		}
	}
	groups := map[string][]string{}
	for _, t := range p.Topics() {
		r := find(t)
		groups[r] = append(groups[r], t)
	}
	out := make([][]string, 0, len(groups))
	for _, g := range groups {
		sort.Strings(g)
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}

// Repartitions returns the internal topics the pipeline writes and reads (the repartition
// topics of group_by and the output topics of keyed operators that later operators read), with
// the input topic whose partition count each takes (not itself one of them). The pipeline
// purges the records it has committed past from each.
func (p *Plan) Repartitions() map[string]string {
	out := map[string]string{}
	for _, c := range p.Chains {
		if c.Rekey != "" || c.Output {
			out[c.SinkTopic] = c.Source.Topic
		}
	}
	for t, from := range out {
		for range len(out) { // bounded: the chains form no cycle
			up, internal := out[from]
			if !internal {
				break
			}
			from = up
		}
		out[t] = from
	}
	return out
}

// Describe prints the operator plan with attributes and the internal topics it will use.
func (p *Plan) Describe(w io.Writer) {
	cfg := p.Config
	fmt.Fprintf(w, "group %s, instance %s, transactional.id %s, guarantee %s\n", cfg.Group, cfg.InstanceID, cfg.TransactionalID(), cfg.Processing.Guarantee)
	fmt.Fprintf(w, "backlog: mode=%s enter_lag=%d exit_lag=%d sort_memory=%v checkpoint_interval=%v\n",
		cfg.Backlog.Mode, cfg.Backlog.EnterLag, cfg.Backlog.ExitLag, cfg.Backlog.SortMemory, cfg.Backlog.CheckpointInterval)
	for i, c := range p.Chains {
		key := "record key"
		if c.Source.Key != "" {
			key = "field " + c.Source.Key
		}
		if kf := c.Source.KeyFormat; kf != "" && kf != configs.KeyBytes {
			key += " (key_format " + kf + ")"
		}
		ts := "record timestamp"
		if c.Source.Timestamp != "" {
			ts = "field " + c.Source.Timestamp
		}
		fmt.Fprintf(w, "chain %d: source %s (topic %s, %s, key: %s, time: %s)\n", i+1, c.SourceName, c.Source.Topic, orDefault(c.Source.Format, "json"), key, ts)
		if c.Fork {
			first := slices.IndexFunc(p.Chains, func(o ChainPlan) bool { return o.SourceName == c.SourceName && !o.Fork })
			shared := ""
			if c.SharedStages > 0 {
				shared = fmt.Sprintf(" and its first %d stage(s)", c.SharedStages)
			}
			fmt.Fprintf(w, "  (a branch: chain %d reads this source%s too and dead-letters the bad records there; each chain's progress is committed with the offsets)\n", first+1, shared)
		}
		if c.TapsOnly {
			fmt.Fprintf(w, "  (its taps, a chain of their own: chain %d, which they fed, may hold its progress behind its records while it sorts a backlog or holds its combined records)\n", i+2)
		}
		for si, s := range c.Stages {
			for _, tap := range c.Taps {
				if tap.Stage == si-1 {
					fmt.Fprintf(w, "     (and on to sink %s, topic %s)\n", tap.Sink, tap.SinkTopic)
				}
			}
			if s.Join != nil {
				tb := cfg.Tables[s.Join.Table]
				fmt.Fprintf(w, "  -> join %s: %s join with table %s (topic %s, key: %s), as_of processing: the stream waits until the table partition has loaded its snapshot; the row goes under %q\n",
					s.Name, orDefault(s.Join.Type, "inner"), s.Join.Table, tb.Topic, orDefault(tb.Key, "record key"), s.Join.Table)
				continue
			}
			fmt.Fprintf(w, "  -> %s %s (stateless, inline in both modes)\n", s.Kind(), s.Name)
		}
		for _, tap := range c.Taps {
			if tap.Stage == len(c.Stages)-1 {
				fmt.Fprintf(w, "     (and on to sink %s, topic %s)\n", tap.Sink, tap.SinkTopic)
			}
		}
		if c.LocalKey != "" {
			fmt.Fprintf(w, "  -> key by %s in the input's partition (it holds the source's key %s: no repartition topic; processing.local_rekey)\n", c.LocalKey, c.Source.Key)
		}
		if c.Rekey != "" {
			by := c.Rekey
			if c.RekeyExpr {
				by = "the expression " + by
			}
			fmt.Fprintf(w, "  -> re-key by %s -> repartition topic %s (in the transaction of the input offsets)\n", by, c.SinkTopic)
			switch {
			case c.Combine != nil && c.Combine.Keyed.Top != nil:
				of := "its key"
				if c.Combine.Keyed.Top.Window != nil {
					of = "its key in a window the writer's watermark has not closed"
				}
				fmt.Fprintf(w, "     combined for top %s: a record the writer's own earlier records for %s leave no rank in the top does not go on (processing.combine_before_rekey)\n", c.Combine.Keyed.Name, of)
			case c.Combine != nil && c.Combine.Keyed.Distinct != nil:
				fmt.Fprintf(w, "     combined for distinct %s: only a record that sets a flag not yet passed for its key goes on (processing.combine_before_rekey)\n", c.Combine.Keyed.Name)
			case c.Combine != nil && c.Combine.Keyed.Aggregate != nil && c.Combine.Keyed.Aggregate.Window.Kind() == "session":
				fmt.Fprintf(w, "     combined for %s: one partial state of the key's sessions per key and checkpoint, for up to cache_keys keys; beyond them, and a record the sessions might take as late, records go as they are (processing.combine_before_rekey)\n", c.Combine.Keyed.Name)
			case c.Combine != nil && c.Combine.Keyed.Aggregate != nil && c.Combine.Keyed.Aggregate.Window != nil:
				fmt.Fprintf(w, "     combined for %s: one partial state per key, window and checkpoint, for up to cache_keys windows; beyond them, and a record whose window the aggregate might have closed, records go as they are (processing.combine_before_rekey)\n", c.Combine.Keyed.Name)
			case c.Combine != nil:
				fmt.Fprintf(w, "     combined for %s: one partial state per key and checkpoint, for up to cache_keys keys; beyond them records go as they are (processing.combine_before_rekey)\n", c.Combine.Keyed.Name)
			case c.Project != nil:
				fmt.Fprintf(w, "     projected for %s: a record it would fold goes with only the members it reads (%s), one it might dead-letter goes whole (processing.combine_before_rekey)\n", c.Project.Keyed.Name, projectedMembers(c.Project))
			}
		}
		if c.AsOf != nil {
			side := "stream"
			if c.Input == 1 {
				side = "table, read as versions"
			}
			fmt.Fprintf(w, "  -> join %s (%s side): %s join with table %s as of event time: a stream record waits until the watermark of both inputs has passed its time, then joins the row version valid then%s; table versions kept %v behind the watermark; late table versions -> dead letters; state in Pebble, one timer per key\n",
				c.Keyed.Name, side, orDefault(c.AsOf.Type, "inner"), c.AsOf.Table, selectNote(c.AsOf), c.Versions)
		} else if j := c.StreamJoin; j != nil && j.Within == 0 {
			side := "left"
			if c.Input == 1 {
				side = "right"
			}
			state := "every record of both sides, for ever"
			if j.Unique != "" {
				state = fmt.Sprintf("per key the %s side's one record (once it came; the other side's records wait until then)", j.Unique)
			}
			fmt.Fprintf(w, "  -> regular join %s (%s side): inner join of %s and %s, every pair of one key once %s, whenever each arrived; state in Pebble: %s\n",
				c.Keyed.Name, side, j.Left, j.Right, pairsAs(j), state)
		} else if c.StreamJoin != nil {
			j := c.StreamJoin
			side := "left"
			if c.Input == 1 {
				side = "right"
			}
			fmt.Fprintf(w, "  -> stream-stream join %s (%s side): %s join of %s and %s within %v, pairs %s; a record is late once its input's watermark passes its time + within (dead letters); unmatched records only after their window closed; state in Pebble, one timer per key\n",
				c.Keyed.Name, side, orDefault(j.Type, "inner"), j.Left, j.Right, j.Within, pairsAs(j))
		} else if c.Keyed != nil && c.Keyed.Dedup != nil {
			describeDedup(w, c.Keyed.Name, c.Keyed.Dedup, c.Source.Watermark.MaxDelay)
		} else if d := c.Keyed; d != nil && d.Distinct != nil && d.Distinct.Window != nil {
			win, _ := operators.NewWindows(d.Distinct.Window)
			fmt.Fprintf(w, "  -> distinct %s: per key and %s window, a key's first record passing some flag goes on once per window with the 0/1 columns %s, window_start and window_end, at the window's end - 1; its other records are dropped; state: a bitmask per key and open window, forgotten when the window closes, one timer per key; late records -> dead letters; backlog replays each key's records in arrival order\n",
				d.Name, win, strings.Join(sortedFlags(d.Distinct.Flags), ", "))
			keepNote(w, c.Keep)
		} else if d := c.Keyed; d != nil && d.Distinct != nil {
			fmt.Fprintf(w, "  -> distinct %s: a key's first record passing some flag goes on with the 0/1 columns %s (1: the key's first passing that flag), its other records are dropped; state: a bitmask per key, for ever; backlog replays each key's records in arrival order\n",
				d.Name, strings.Join(sortedFlags(d.Distinct.Flags), ", "))
			keepNote(w, c.Keep)
		} else if t := c.Keyed; t != nil && t.Top != nil && t.Top.Window != nil {
			win, _ := operators.NewWindows(t.Top.Window)
			ranks := fmt.Sprintf("ranked 1 to %d, ties in arrival order", t.Top.N)
			if t.Top.Ties {
				ranks = fmt.Sprintf("with ties: every record of rank (1 + those strictly better) at most %d", t.Top.N)
			}
			column := fmt.Sprintf("with a %s column", t.Top.Rank)
			if t.Top.OmitRank {
				column = "without a rank column (omit_rank)"
			}
			fmt.Fprintf(w, "  -> top %s: per key and %s window the records with the %s %s (%s), written once %s when the window closes, at its end - 1; state in Pebble: only those rows per open window, one timer per key; late records -> dead letters; backlog replays each key's records in arrival order\n",
				t.Name, win, map[bool]string{true: "largest", false: "smallest"}[t.Top.Order != configs.OrderAsc], t.Top.By, ranks, column)
		} else if t := c.Keyed; t != nil && t.Top != nil {
			rows := "rows"
			if t.Top.OmitRank {
				rows = "the records as they came (omit_rank)"
			}
			fmt.Fprintf(w, "  -> top %s: each key's %d records with the %s %s (ties in arrival order), an upsert stream of %s keyed by key and %s, written at most once per row per commit; backlog replays each key's records in arrival order\n",
				t.Name, t.Top.N, map[bool]string{true: "largest", false: "smallest"}[t.Top.Order != configs.OrderAsc], t.Top.By, rows, t.Top.Rank)
			if t.Top.N <= operators.TopBoundMaxN && !c.Tombstones {
				earlier := fmt.Sprintf("%d earlier records", t.Top.N)
				if t.Top.N == 1 {
					earlier = "an earlier record"
				}
				fmt.Fprintf(w, "     filtered before it: a record that ranks after %s of its key is dropped (neither sorted nor replayed)\n", earlier)
			}
		} else if c.Keyed != nil && c.Keyed.Changes != nil {
			fmt.Fprintf(w, "  -> changes %s: each key's latest row; when it changes, the retraction of the row it replaces (\"retract\": true) then the new row, at most once per key per commit (a tombstone: the retraction alone); state in Pebble: each key's published row; backlog replays each key's records in arrival order\n", c.Keyed.Name)
		} else if c.Keyed != nil {
			ops, _ := c.Build(nil, nil)
			a := ops.Attributes()
			var specs []string
			for _, s := range c.Keyed.Aggregate.Specs() {
				args := s.Field
				if s.Type != "" {
					args += ", type=" + s.Type
				}
				if s.Where != "" {
					args = strings.TrimPrefix(args+", where="+s.Where, ", ")
				}
				specs = append(specs, fmt.Sprintf("%s=%s(%s)", s.Name, s.Func, args))
			}
			kind := "aggregate"
			if c.Cogroup != nil {
				kind = fmt.Sprintf("cogroup (input %d of %s: fields %s)", c.Input+1, strings.Join(c.Cogroup.Inputs, ", "), strings.Join(cogroupFields(c.Cogroup, c.Cogroup.Inputs[c.Input]), ", "))
			}
			fmt.Fprintf(w, "  -> %s %s [%s] emit=%s attributes{InternalSorter:%v OutputOnlyAtEnd:%v OutputOnCheckpoint:%v}\n",
				kind, c.Keyed.Name, strings.Join(specs, " "), orDefault(c.Keyed.Aggregate.Emit, "updates"), a.InternalSorter, a.OutputOnlyAtEnd, a.OutputOnCheckpoint)
			if c.Keyed.Aggregate.Retractions {
				fmt.Fprintf(w, "     retractions: a record with \"retract\": true is subtracted (count -1); a key with no record left writes a tombstone\n")
			}
			wmIs := fmt.Sprintf("max event time - %v", c.Source.Watermark.MaxDelay)
			if c.TimedInput && c.Source.Topic == cfg.RepartitionTopic(c.Keyed.Name) {
				wmIs = "the smallest of the watermarks its writers (the re-keying tasks) announce in the repartition topic (their inputs' watermarks)"
			} else if c.TimedInput {
				wmIs = "the smallest of the watermarks its writers announce (results at their window's end - 1 are never late)"
			}
			if sw := c.Keyed.Aggregate.Window; sw.Kind() == "session" && c.Cogroup != nil {
				fmt.Fprintf(w, "     window session gap %v grace %v over the records of every input (a keyed operator: backlog replays each key's records of all inputs in arrival order); this input's watermark = %s, the operator's the smallest of its inputs' (it closes sessions); timers: one per key, in Pebble; a record late by its own input's watermark -> dead letters\n",
					sw.Session, sw.Grace, wmIs)
			} else if sw.Kind() == "session" {
				fmt.Fprintf(w, "     window session gap %v grace %v (a keyed operator: backlog replays each key's records in arrival order); watermark = %s; timers: one per key, in Pebble; late records -> dead letters\n",
					sw.Session, sw.Grace, wmIs)
			}
			if win, _ := operators.NewWindows(c.Keyed.Aggregate.Window); win != nil {
				finals := ""
				if c.WindowFinals {
					finals = "; its records are finals of windows (window_finals), each folded into its own window alone"
				}
				if win.Sliced() && !c.WindowFinals {
					finals = fmt.Sprintf("; a backlog sorts a record once, under its %v slice, merged into its windows at the fold", time.Duration(win.Advance)*time.Millisecond)
				}
				fmt.Fprintf(w, "     window %s%s; watermark = %s; timers: one per open (key, window) at end+grace, in Pebble; late records -> dead letters\n",
					win, finals, wmIs)
			}
		}
		if c.Output && c.TimedOutput {
			fmt.Fprintf(w, "  -> output topic %s (results, in the transaction of the checkpoint that emits them, each final at its window's end - 1; after them the task announces its output watermark, its watermark - grace, under which no later final lies; later operators read them)\n", c.SinkTopic)
		} else if c.Output {
			fmt.Fprintf(w, "  -> output topic %s (results, in the transaction of the checkpoint that emits them; later operators read them)\n", c.SinkTopic)
		} else if a := c.After; a != nil {
			fmt.Fprintf(w, "  -> on each result as it is emitted, in this task and transaction (processing.inline_stages: no output topic):\n")
			for _, s := range a.Stages {
				fmt.Fprintf(w, "  -> %s %s (stateless)\n", s.Kind(), s.Name)
			}
			fmt.Fprintf(w, "  -> sink %s (topic %s)\n", a.Sink, a.SinkTopic)
		} else if c.SinkTopic != "" && c.Rekey == "" {
			if sk := cfg.Sinks[c.Sink]; sk.Format == configs.FormatAvro {
				fmt.Fprintf(w, "  -> sink %s (topic %s, avro, subject strategy %s)\n", c.Sink, c.SinkTopic, sk.SubjectStrategy)
			} else {
				fmt.Fprintf(w, "  -> sink %s (topic %s)\n", c.Sink, c.SinkTopic)
			}
		}
		if c.Output && c.Combine != nil {
			if r := c.Combine; r.Keyed == nil && r.Combine != nil && windowTop(r.Combine) {
				fmt.Fprintf(w, "     filtered for top %s: a final its filters drop, or that the finals written before it leave no rank in the top's window under its re-key, does not go on (processing.combine_before_rekey)\n", r.Combine.Keyed.Name)
			} else if r.Keyed != nil && r.Keyed.Top != nil {
				fmt.Fprintf(w, "     filtered for top %s: a result its filters drop, or that the results written before it for its key leave no rank in the top, does not go on (processing.combine_before_rekey)\n", r.Keyed.Name)
				if judgedBeforeSorting(&c, r) {
					fmt.Fprintf(w, "     and in a backlog before its sorter: a record whose pair with its key's unique record the where refuses, or whose row the rows of the key's records kept before it leave no rank in the top, is dropped (neither sorted nor replayed)\n")
				}
			} else {
				if r.Keyed == nil {
					r = r.Combine
				}
				fmt.Fprintf(w, "     filtered for %s, an aggregate of each key's best value: a result the stages before it drop, or that a result written before it for its key equals or beats, does not go on (processing.combine_before_rekey)\n", r.Keyed.Name)
				if judgedBeforeSorting(&c, nil) {
					fmt.Fprintf(w, "     and in a backlog before its sorter: a record whose pair with its key's unique record the where refuses, or whose row the rows of the key's records kept before it equal or beat, is dropped (neither sorted nor replayed)\n")
				}
			}
		}
	}
	groups := p.CoPartitioned()
	for _, g := range groups {
		if len(g) > 1 {
			fmt.Fprintf(w, "co-partitioned (one task per partition number, same partition count required): %s\n", strings.Join(g, ", "))
		}
	}
	fmt.Fprintln(w, "internal topics:")
	listed := map[string]bool{}
	for _, c := range p.Chains {
		if c.OutputChangelog {
			fmt.Fprintf(w, "  none for %s: its sink's topic %s is its changelog (compacted, partitions = %s's)\n", c.Keyed.Name, c.SinkTopic, c.Source.Topic)
		} else if c.Changelog != "" && !listed[c.Changelog] {
			listed[c.Changelog] = true
			fmt.Fprintf(w, "  %s (compacted, partitions = %s's)\n", c.Changelog, c.Source.Topic)
		}
		if (c.Rekey != "" || c.Output) && !listed[c.SinkTopic] {
			listed[c.SinkTopic] = true
			kind := "repartition"
			if c.Output {
				kind = "results of " + c.Keyed.Name
			}
			says := "their backlog mode"
			if c.TimedOutput && c.Rekey != "" {
				says = "their backlog mode and watermark"
			} else if c.TimedOutput {
				says = "their backlog mode and output watermark"
			}
			fmt.Fprintf(w, "  %s (%s, partitions = %s's; committed records purged; its writers announce %s in it)\n", c.SinkTopic, kind, p.Repartitions()[c.SinkTopic], says)
		}
	}
	fmt.Fprintf(w, "  %s (dead letters)\n", cfg.DLQTopic())
}

// Ops are one task's compiled operator instances for a chain (operators are not safe for
// concurrent use, so every task gets its own).
type Ops struct {
	Src    *operators.Source
	Stages []operators.Stage
	// The keyed operator the chain ends in, if any, by its capability: Agg for a mergeable one
	// (an aggregate, windowed or not: pre-aggregated in backlog), Kop for one whose records are
	// replayed per key in arrival order (session windows, joins, dedup, top, changes, distinct).
	Agg   operators.Mergeable
	Kop   operators.Keyed
	Rekey *operators.Rekey // group_by: the key of the repartition topic's records
	// LocalKey: ChainPlan.LocalKey, the key the chain gives each record before its operator.
	LocalKey *operators.Rekey
	// Combine: with Rekey, the operators of the chain the writer combines its records for
	// (ChainPlan.Combine): its Agg or its Kop (a distinct).
	Combine *Ops
	// Project: with Rekey, the operators of the chain the writer projects its records for
	// (ChainPlan.Project).
	Project *Ops
	// After: the operators of ChainPlan.After (its source and stages), run on each result.
	After *Ops
}

// Operator is the keyed operator the chain ends in, whatever its capability (nil: none).
func (ops *Ops) Operator() operators.Operator {
	switch {
	case ops.Kop != nil:
		return ops.Kop
	case ops.Agg != nil:
		return ops.Agg
	}
	return nil
}

// Attributes are the keyed operator's attributes.
func (ops *Ops) Attributes() operators.Attributes { return ops.Operator().Attributes() }

// Keyed reports whether the chain ends in a keyed operator (state, a mode, checkpoints).
func (ops *Ops) Keyed() bool { return ops.Agg != nil || ops.Kop != nil }

// newRekey returns the re-keying of a chain with Rekey: by field paths, or by an expression
// (RekeyExpr).
func (c ChainPlan) newRekey() (*operators.Rekey, error) {
	if c.RekeyExpr {
		return operators.NewRekeyExpr(c.RekeyFor, c.Rekey)
	}
	return operators.NewRekey(c.RekeyFor, c.Rekey)
}

// Build compiles the chain's operators; rows serves the joins' tables (nil: a compile check,
// the joins are never applied).
//
// values decodes the values of a source of another format than JSON (nil: a compile check,
// nothing is decoded).
func (c ChainPlan) Build(rows func(table string) operators.Rows, values operators.ValueDecoder) (*Ops, error) {
	if values == nil {
		values = noValues{}
	}
	src, err := operators.NewSourceDecoding(c.SourceName, c.Source, values)
	if err != nil {
		return nil, err
	}
	ops := &Ops{Src: src}
	if c.Rekey != "" {
		if ops.Rekey, err = c.newRekey(); err != nil {
			return nil, err
		}
	}
	if c.LocalKey != "" {
		if ops.LocalKey, err = operators.NewRekey(c.Keyed.Name, c.LocalKey); err != nil {
			return nil, err
		}
	}
	if c.Combine != nil {
		if ops.Combine, err = c.Combine.Build(nil, values); err != nil {
			return nil, err
		}
	}
	if c.Project != nil {
		if ops.Project, err = c.Project.Build(nil, values); err != nil {
			return nil, err
		}
	}
	if c.After != nil {
		if ops.After, err = c.After.Build(nil, values); err != nil {
			return nil, err
		}
	}
	for _, s := range c.Stages {
		var st operators.Stage
		switch {
		case s.Filter != nil:
			st, err = operators.NewFilter(s.Name, *s.Filter)
		case s.Join != nil:
			var r operators.Rows
			if rows != nil {
				r = rows(s.Join.Table)
			}
			st, err = operators.NewJoin(s.Name, *s.Join, r)
		default:
			st, err = operators.NewMap(s.Name, *s.Map)
		}
		if err != nil {
			return nil, err
		}
		ops.Stages = append(ops.Stages, st)
	}
	if c.Cogroup != nil && c.Cogroup.Window.Kind() == "session" {
		// A session cogroup is a Keyed operator of several inputs (its records are replayed
		// per key in arrival order, not pre-aggregated); agg is the cogroup it folds per
		// session.
		s, err := operators.NewSessionCogroup(c.Keyed.Name, *c.Cogroup)
		if err != nil {
			return nil, err
		}
		ops.Kop = s
		return ops, nil
	}
	if c.Cogroup != nil {
		ops.Agg, err = operators.NewCogroup(c.Keyed.Name, *c.Cogroup)
		return ops, err
	}
	if c.AsOf != nil {
		ops.Kop, err = operators.NewAsOfJoin(c.Keyed.Name, *c.AsOf, c.Versions.Milliseconds())
		return ops, err
	}
	if c.StreamJoin != nil {
		if c.StreamJoin.Within == 0 {
			ops.Kop, err = operators.NewRegularJoin(c.Keyed.Name, *c.StreamJoin)
		} else {
			ops.Kop, err = operators.NewStreamJoin(c.Keyed.Name, *c.StreamJoin)
		}
		return ops, err
	}
	if c.Keyed != nil && c.Keyed.Dedup != nil {
		ops.Kop, err = operators.NewDedup(c.Keyed.Name, *c.Keyed.Dedup)
		return ops, err
	}
	if c.Keyed != nil && c.Keyed.Top != nil && c.Keyed.Top.Window != nil {
		ops.Kop, err = operators.NewWindowTop(c.Keyed.Name, *c.Keyed.Top)
		return ops, err
	}
	if c.Keyed != nil && c.Keyed.Top != nil {
		ops.Kop, err = operators.NewTop(c.Keyed.Name, *c.Keyed.Top)
		return ops, err
	}
	if c.Keyed != nil && c.Keyed.Changes != nil {
		ops.Kop, err = operators.NewChanges(c.Keyed.Name, *c.Keyed.Changes)
		return ops, err
	}
	if c.Keyed != nil && c.Keyed.Distinct != nil {
		ops.Kop, err = operators.NewDistinct(c.Keyed.Name, *c.Keyed.Distinct, c.Keep)
		return ops, err
	}
	if c.Keyed != nil {
		if c.Keyed.Aggregate.Window.Kind() == "session" {
			s, err := operators.NewSessions(c.Keyed.Name, *c.Keyed.Aggregate)
			if err != nil {
				return nil, err
			}
			ops.Kop = s
			return ops, nil
		}
		if ops.Agg, err = operators.NewAggregate(c.Keyed.Name, *c.Keyed.Aggregate); err != nil {
			return nil, err
		}
	}
	return ops, nil
}

// cogroupFields returns the fields of cg that aggregate input in, sorted.
func cogroupFields(cg *configs.Cogroup, in string) []string {
	var out []string
	for name, from := range cg.From() {
		if from == in {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

func sinkTopic(cfg *configs.Config, sink string) string {
	if sink == "" {
		return ""
	}
	return cfg.Sinks[sink].Topic
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// sortedFlags returns the names of a distinct's flags, sorted.
func sortedFlags(flags map[string]string) []string {
	out := make([]string, 0, len(flags))
	for f := range flags {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}

// describeDedup writes the explain line of dedup operator name.
func describeDedup(w io.Writer, name string, d *configs.Dedup, maxDelay time.Duration) {
	if d.Keep == configs.KeepLast {
		fmt.Fprintf(w, "  -> dedup %s: keep each key's latest record, written at most once per key per commit (an upsert stream); backlog replays each key's records in arrival order; no state past the commit that writes a key\n", name)
		return
	}
	forget := "a key remembers its first record for ever (its state grows with the keys)"
	if d.Within > 0 {
		forget = fmt.Sprintf("a key forgets it once the watermark (max event time - %v) passes its time + %v, one timer per key in Pebble; records later than that -> dead letters", maxDelay, d.Within)
	}
	fmt.Fprintf(w, "  -> dedup %s: keep each key's first record, emitted once, drop the key's later ones; %s; backlog replays each key's records in arrival order\n", name, forget)
}

// pairsAs says what a stream-stream join writes of each pair: the pair, or its select's columns.
func pairsAs(j *configs.Join) string {
	as := "as the columns " + columnNames(j)
	if len(j.Select) == 0 {
		as = fmt.Sprintf("as {%q: ..., %q: ...}", j.Left, j.Right)
	}
	if j.Where != "" {
		return fmt.Sprintf("where %s (not true: no pair), %s", j.Where, as)
	}
	return as
}

// selectNote says which columns a join with a select writes ("" without one).
func selectNote(j *configs.Join) string {
	if len(j.Select) == 0 {
		return ""
	}
	return ", written as the columns " + columnNames(j)
}

func columnNames(j *configs.Join) string {
	cols := j.Columns()
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.Name
	}
	return strings.Join(names, ", ") + " (select; a column that fails on a pair is null)"
}
