package configs

import (
	"fmt"
	"slices"
	"strings"
)

// count_distinct is Flink's split-distinct aggregation written out by the config: an aggregate
//
//	name: stats
//	aggregate: {input: in, group_by: day, fields: {bids: {count: {}}, bidders: {count_distinct: bidder, where: "price < 10"}}}
//
// becomes, in place of the aggregate and before it,
//
//	stats-by:                 rekey {input: in, by: day}                  (its other fields' records)
//	stats-distinct-bidder:    distinct {input: in, group_by: "day, bidder", flags: {bidders: "price < 10"}}
//	stats-distinct-bidder-by: rekey {input: stats-distinct-bidder, by: day}
//	stats:                    cogroup {inputs: [stats-by, stats-distinct-bidder-by],
//	                                   fields: {bids: {count: {}, from: stats-by},
//	                                            bidders: {sum: bidders, from: stats-distinct-bidder-by}}}
//
// The distinct passes on the first record of each (group, value) passing each flag with a 0/1
// column per flag, so the sums are exact distinct counts in every mode; a group's cost per record
// does not grow with its distinct values, and the values are never gathered in one state. With
// no other field, stats-by is left out; with one distinct value and no other field, stats is an
// aggregate with group_by over the distinct itself. Each internal operator has its own state,
// changelog and topics, named after it.
//
// With a tumbling or hopping window, the distinct and the cogroup (or the aggregate over the
// distinct) take the aggregate's window: the distinct marks first records per (group, value) and
// window, and writes each once per window with its window's end - 1 as event time, which the
// cogroup puts back into that window alone (window_finals: the distinct's inputs); a window's
// flags are forgotten once it closes.

// distinctName is the internal distinct's name for value path v of aggregate op.
func distinctName(op, v string) string {
	b := []byte(op + "-distinct-")
	for _, r := range strings.ToLower(v) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-' {
			b = append(b, byte(r))
		} else {
			b = append(b, '_')
		}
	}
	return string(b)
}

// ExpandedFrom returns the aggregate whose count_distinct fields this internal operator serves
// ("" for an operator of the config file).
func (o *Operator) ExpandedFrom() string { return o.expandedFrom }

// Key returns the operator's key in the config file, "operators[i].<kind>" for the operator at
// index i of Operators; for an operator written out for an aggregate's count_distinct fields,
// the key of that aggregate (whose index in the file may differ).
func (o *Operator) Key(i int) string {
	if o.origin != "" {
		return o.origin
	}
	return fmt.Sprintf("operators[%d].%s", i, o.Kind())
}

// expandCountDistinct rewrites every aggregate with count_distinct fields into the operators
// above. c must have been validated; the result validates too (each operator comes after its
// inputs).
func (c *Config) expandCountDistinct() *Error {
	var out []Operator
	for i := range c.Operators {
		op := c.Operators[i]
		a := op.Aggregate
		if a == nil || !slices.ContainsFunc(a.Specs(), func(s AggSpec) bool { return s.Func == CountDistinct }) {
			out = append(out, op)
			continue
		}
		kp := fmt.Sprintf("operators[%d].aggregate", i)
		internal := expandAggregate(op)
		for k := range internal {
			internal[k].origin = kp
		}
		for _, n := range internal[:len(internal)-1] {
			if j := slices.IndexFunc(c.Operators, func(o Operator) bool { return o.Name == n.Name }); j >= 0 {
				return errorf(kp+".fields", "count_distinct needs an internal operator named %q, which operators[%d] already is; rename one of them", n.Name, j)
			}
			if _, ok := c.Sources[n.Name]; ok {
				return errorf(kp+".fields", "count_distinct needs an internal operator named %q, which is a source's name; rename the source", n.Name)
			}
		}
		out = append(out, internal...)
	}
	if len(out) == len(c.Operators) {
		return nil
	}
	c.Operators = out
	if err := c.validateTopics(); err != nil {
		return err
	}
	return nil
}

// expandAggregate returns the operators that replace aggregate op, the last one named op.Name.
func expandAggregate(op Operator) []Operator {
	a := op.Aggregate
	var values []string                     // distinct value paths, in field name order
	flags := map[string]map[string]string{} // value path -> field name -> expression
	plain := map[string]map[string]any{}
	for _, sp := range a.Specs() {
		if sp.Func != CountDistinct {
			plain[sp.Name] = a.Fields[sp.Name]
			continue
		}
		if flags[sp.Field] == nil {
			values = append(values, sp.Field)
			flags[sp.Field] = map[string]string{}
		}
		flags[sp.Field][sp.Name] = cmpOr(sp.Where, "true")
	}
	var ops []Operator
	mark := func(o Operator) Operator { o.expandedFrom = op.Name; return o }
	var texts []string
	for _, p := range SplitGroupBy(a.GroupBy) {
		texts = append(texts, p.Text)
	}
	groups := strings.Join(texts, ", ")
	if len(values) == 1 && len(plain) == 0 {
		// The distinct's results, summed per group by the aggregate itself.
		d := distinctName(op.Name, values[0])
		ops = append(ops, mark(Operator{Name: d, Distinct: &Distinct{Input: a.Input, GroupBy: groups + ", " + values[0], Flags: flags[values[0]], Window: a.Window}}))
		fields := map[string]map[string]any{}
		for name := range flags[values[0]] {
			fields[name] = map[string]any{"sum": name}
		}
		return append(ops, Operator{Name: op.Name, Output: op.Output, Aggregate: &Aggregate{Input: d, GroupBy: a.GroupBy, Fields: fields, Emit: a.Emit, Window: a.Window, WindowFinals: a.Window != nil}})
	}
	cg := &Cogroup{Fields: map[string]map[string]any{}, Emit: a.Emit, KeyColumns: len(SplitGroupBy(a.GroupBy)) > 1, Window: a.Window}
	if len(plain) > 0 {
		by := op.Name + "-by"
		ops = append(ops, mark(Operator{Name: by, Rekey: &Rekey{Input: a.Input, By: a.GroupBy}}))
		cg.Inputs = append(cg.Inputs, by)
		for name, raw := range plain {
			f := make(map[string]any, len(raw)+1)
			for k, v := range raw {
				f[k] = v
			}
			f["from"] = by
			cg.Fields[name] = f
		}
	}
	for _, v := range values {
		d := distinctName(op.Name, v)
		ops = append(ops,
			mark(Operator{Name: d, Distinct: &Distinct{Input: a.Input, GroupBy: groups + ", " + v, Flags: flags[v], Window: a.Window}}),
			mark(Operator{Name: d + "-by", Rekey: &Rekey{Input: d, By: a.GroupBy}}))
		cg.Inputs = append(cg.Inputs, d+"-by")
		if a.Window != nil {
			cg.WindowFinals = append(cg.WindowFinals, d+"-by")
		}
		for name := range flags[v] {
			cg.Fields[name] = map[string]any{"sum": name, "from": d + "-by"}
		}
	}
	return append(ops, Operator{Name: op.Name, Output: op.Output, Cogroup: cg})
}

// cmpOr returns s, or d when s is empty.
func cmpOr(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
