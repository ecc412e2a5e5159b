// Package task is the per-partition runtime of sluice: it runs the operator chains that read
// one input topic-partition (a task is a topic-partition until operators with two inputs need a
// partition number across topics), in backlog mode (keyed operators pre-aggregate, sort and fold
// silently) or in real-time mode (a write-back cache over the state store), with event time,
// windows and timers (window.go), Keyed operators such as session windows (keyed.go), and makes
// its work durable through checkpoints driven by the consumer. Its calls follow the order of
// order.go, which it enforces.
//
// A Plan is the validated, compiled shape of a pipeline (built once from the config); a Task is
// one partition's instance of it. The consumer owns tasks: it creates one per assigned partition,
// feeds it fetched batches, and asks it to checkpoint inside the open Kafka transaction.
package task

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/operators"
)

// ChainPlan is one linear chain: a source, its stateless stages, and an optional keyed aggregate,
// writing to a sink topic.
type ChainPlan struct {
	SourceName string
	Source     configs.Source
	Stages     []configs.Operator // filter/map, in order
	Agg        *configs.Operator  // nil for a stateless chain
	Sink       string             // sink name ("" = the chain drops its output)
	SinkTopic  string
	Changelog  string // changelog topic of Agg ("" when stateless)
}

// Plan is a compiled pipeline. It is immutable after NewPlan and safe for concurrent use.
type Plan struct {
	Config *configs.Config
	Chains []ChainPlan
}

// NewPlan checks that the operators form linear chains (each source and operator feeds at most
// one operator; an aggregate ends its chain) and compiles every operator once so that expression
// errors surface at start-up, naming the operator.
func NewPlan(cfg *configs.Config) (*Plan, error) {
	consumers := map[string]int{} // input name -> index of the operator reading it
	for i, op := range cfg.Operators {
		in := opInput(op)
		if j, ok := consumers[in]; ok {
			return nil, &configs.Error{
				Key: fmt.Sprintf("operators[%d].%s.input", i, opKind(op)),
				Msg: fmt.Sprintf("%q already feeds operator %q; branching a stream into several operators is not supported yet", in, cfg.Operators[j].Name),
			}
		}
		consumers[in] = i
	}
	p := &Plan{Config: cfg}
	names := make([]string, 0, len(cfg.Sources))
	for n := range cfg.Sources {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, src := range names {
		c := ChainPlan{SourceName: src, Source: cfg.Sources[src]}
		cur := src
		for {
			i, ok := consumers[cur]
			if !ok {
				break
			}
			op := cfg.Operators[i]
			if op.Aggregate != nil {
				c.Agg = &cfg.Operators[i]
				c.Changelog = cfg.ChangelogTopic(op.Name)
			} else {
				c.Stages = append(c.Stages, op)
			}
			if op.Output != "" {
				c.Sink = op.Output
				c.SinkTopic = cfg.Sinks[op.Output].Topic
			}
			if op.Aggregate != nil {
				if _, more := consumers[op.Name]; more {
					return nil, &configs.Error{Key: fmt.Sprintf("operators[%d].output", i), Msg: "an aggregate must end its chain (operators after an aggregate are not supported yet)"}
				}
				break
			}
			cur = op.Name
		}
		if c.Agg == nil && len(c.Stages) == 0 {
			continue // a declared source nobody reads
		}
		if c.SinkTopic == "" && c.Agg == nil {
			last := c.Stages[len(c.Stages)-1].Name
			for i, op := range cfg.Operators {
				if op.Name == last {
					return nil, &configs.Error{Key: fmt.Sprintf("operators[%d].output", i), Msg: "a chain without an aggregate must end in an output sink"}
				}
			}
		}
		p.Chains = append(p.Chains, c)
	}
	if len(p.Chains) == 0 {
		return nil, &configs.Error{Key: "operators", Msg: "no operator reads any source"}
	}
	// Compile everything once now, so a bad expression is a config error, not a runtime one.
	for _, c := range p.Chains {
		if _, err := c.build(); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Topics returns the source topics, sorted.
func (p *Plan) Topics() []string {
	seen := map[string]bool{}
	var ts []string
	for _, c := range p.Chains {
		if !seen[c.Source.Topic] {
			seen[c.Source.Topic] = true
			ts = append(ts, c.Source.Topic)
		}
	}
	sort.Strings(ts)
	return ts
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
		ts := "record timestamp"
		if c.Source.Timestamp != "" {
			ts = "field " + c.Source.Timestamp
		}
		fmt.Fprintf(w, "chain %d: source %s (topic %s, %s, key: %s, time: %s)\n", i+1, c.SourceName, c.Source.Topic, orDefault(c.Source.Format, "json"), key, ts)
		for _, s := range c.Stages {
			fmt.Fprintf(w, "  -> %s %s (stateless, inline in both modes)\n", opKind(s), s.Name)
		}
		if c.Agg != nil {
			ops, _ := c.build()
			a := ops.agg.Attributes()
			var specs []string
			for _, s := range c.Agg.Aggregate.Specs() {
				if s.Field == "" {
					specs = append(specs, fmt.Sprintf("%s=%s()", s.Name, s.Func))
				} else {
					specs = append(specs, fmt.Sprintf("%s=%s(%s)", s.Name, s.Func, s.Field))
				}
			}
			fmt.Fprintf(w, "  -> aggregate %s [%s] emit=%s attributes{InternalSorter:%v OutputOnlyAtEnd:%v OutputOnCheckpoint:%v}\n",
				c.Agg.Name, strings.Join(specs, " "), orDefault(c.Agg.Aggregate.Emit, "updates"), a.InternalSorter, a.OutputOnlyAtEnd, a.OutputOnCheckpoint)
			if sw := c.Agg.Aggregate.Window; sw.Kind() == "session" {
				fmt.Fprintf(w, "     window session gap %v grace %v (a keyed operator: backlog replays each key's records in arrival order); watermark = max event time - %v; timers: one per key, in Pebble; late records -> dead letters\n",
					sw.Session, sw.Grace, c.Source.Watermark.MaxDelay)
			}
			if win, _ := operators.NewWindows(c.Agg.Aggregate.Window); win != nil {
				fmt.Fprintf(w, "     window %s; watermark = max event time - %v; timers: one per open (key, window) at end+grace, in Pebble; late records -> dead letters\n",
					win, c.Source.Watermark.MaxDelay)
			}
		}
		if c.SinkTopic != "" {
			fmt.Fprintf(w, "  -> sink %s (topic %s)\n", c.Sink, c.SinkTopic)
		}
	}
	fmt.Fprintln(w, "internal topics:")
	for _, c := range p.Chains {
		if c.Changelog != "" {
			fmt.Fprintf(w, "  %s (compacted, partitions = %s's)\n", c.Changelog, c.Source.Topic)
		}
	}
	fmt.Fprintf(w, "  %s (dead letters)\n", cfg.DLQTopic())
}

// chainOps are one task's compiled operator instances for a chain (operators are not safe for
// concurrent use, so every task gets its own).
type chainOps struct {
	src    *operators.Source
	stages []operators.Stage
	agg    *operators.Aggregate
	kop    operators.Keyed // session windows: the Keyed operator (its aggregate is agg)
}

func (c ChainPlan) build() (*chainOps, error) {
	src, err := operators.NewSource(c.SourceName, c.Source)
	if err != nil {
		return nil, err
	}
	ops := &chainOps{src: src}
	for _, s := range c.Stages {
		var st operators.Stage
		if s.Filter != nil {
			st, err = operators.NewFilter(s.Name, *s.Filter)
		} else {
			st, err = operators.NewMap(s.Name, *s.Map)
		}
		if err != nil {
			return nil, err
		}
		ops.stages = append(ops.stages, st)
	}
	if c.Agg != nil {
		if c.Agg.Aggregate.Window.Kind() == "session" {
			s, err := operators.NewSessions(c.Agg.Name, *c.Agg.Aggregate)
			if err != nil {
				return nil, err
			}
			ops.kop, ops.agg = s, s.Aggregate()
			return ops, nil
		}
		ops.agg, err = operators.NewAggregate(c.Agg.Name, *c.Agg.Aggregate)
		if err != nil {
			return nil, err
		}
	}
	return ops, nil
}

func opInput(op configs.Operator) string {
	switch {
	case op.Filter != nil:
		return op.Filter.Input
	case op.Map != nil:
		return op.Map.Input
	case op.Aggregate != nil:
		return op.Aggregate.Input
	}
	return ""
}

func opKind(op configs.Operator) string {
	switch {
	case op.Filter != nil:
		return "filter"
	case op.Map != nil:
		return "map"
	}
	return "aggregate"
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
