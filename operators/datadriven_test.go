package operators

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/sluice-dev/sluice/configs"
)

// TestDataDriven runs testdata/* files through a source, stages and an aggregate, the way the
// runtime does in real-time mode. Commands:
//
//	source [key=PATH] [timestamp=PATH]       (resets everything)
//	filter name=NAME         input: the expression
//	map name=NAME            input: "field: expression" lines
//	aggregate [emit=final]   input: "name: func [field] [type=string] [where EXPR]" lines
//	                         (resets state)
//	layout                   prints the aggregate's layout
//	distinct [window=DUR [advance=DUR]]
//	                         input: "column: expression" lines, the flags (resets state); with
//	                         window, tumbling (or with advance hopping) windows, watermark 0
//	records                  input: "KAFKAKEY KAFKATS VALUE" lines (KAFKAKEY "-" = null);
//	                         prints each record's fate and folds the kept ones (after a
//	                         distinct: prints what it emits, if anything, and the key's mask)
//	render                   prints every key's state, in key order
//	join left=L right=R [unique=SIDE] [within=DUR]
//	                         a stream-stream join (resets its state); input: its select, one
//	                         column a line ("name: expression" or a field name), none for none
//	pairs                    input: "SIDE KEY TS VALUE" lines (SIDE 0 left, 1 right); prints
//	                         what the join emits for each
func TestDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		if strings.HasPrefix(filepath.ToSlash(path), "testdata/fuzz/") {
			t.Skip("a fuzz corpus (go test -fuzz), not a datadriven file")
		}
		var (
			src    *Source
			stages []Stage
			agg    *Aggregate
			dist   *Distinct
			states map[string][]byte
			join   Keyed
			jstate map[string]*sessCtx
		)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			arg := func(key string) string {
				if a, ok := d.Arg(key); ok && len(a.Vals) > 0 {
					return a.Vals[0]
				}
				return ""
			}
			switch d.Cmd {
			case "source":
				var err error
				src, err = NewSource("orders", configs.Source{Topic: "orders", Key: arg("key"), Timestamp: arg("timestamp")})
				stages, agg, dist, states = nil, nil, nil, nil
				return errOrOK(err)
			case "filter":
				f, err := NewFilter(arg("name"), configs.Filter{Input: "orders", Expr: d.Input})
				if err == nil {
					stages = append(stages, f)
				}
				return errOrOK(err)
			case "map":
				set := map[string]string{}
				for _, line := range strings.Split(d.Input, "\n") {
					field, e, _ := strings.Cut(line, ":")
					set[strings.TrimSpace(field)] = strings.TrimSpace(e)
				}
				m, err := NewMap(arg("name"), configs.Map{Input: "orders", Set: set})
				if err == nil {
					stages = append(stages, m)
				}
				return errOrOK(err)
			case "aggregate":
				fields := map[string]map[string]any{}
				for _, line := range strings.Split(d.Input, "\n") {
					name, spec, _ := strings.Cut(line, ":")
					spec, where, hasWhere := strings.Cut(spec, " where ")
					f := strings.Fields(spec)
					var v any = map[string]any{}
					field := map[string]any{}
					for _, w := range f[1:] {
						if typ, ok := strings.CutPrefix(w, "type="); ok {
							field["type"] = typ
						} else {
							v = w
						}
					}
					field[f[0]] = v
					if hasWhere {
						field["where"] = strings.TrimSpace(where)
					}
					fields[strings.TrimSpace(name)] = field
				}
				var err error
				agg, err = NewAggregate("totals", configs.Aggregate{Input: "orders", Fields: fields, Emit: arg("emit")})
				states = map[string][]byte{}
				if err != nil {
					return err.Error() + "\n"
				}
				return fmt.Sprintf("state %d bytes, input %d bytes, emit %s, %+v\n", agg.StateSize(), agg.InputSize(), agg.Emit(), agg.Attributes())
			case "layout":
				return agg.Layout().String() + "\n"
			case "distinct":
				flags := map[string]string{}
				for _, line := range strings.Split(d.Input, "\n") {
					name, e, _ := strings.Cut(line, ":")
					flags[strings.TrimSpace(name)] = strings.TrimSpace(e)
				}
				cfg := configs.Distinct{Input: "orders", Flags: flags}
				if w := arg("window"); w != "" {
					size, err := time.ParseDuration(w)
					if err != nil {
						d.Fatalf(t, "window: %v", err)
					}
					cfg.Window = &configs.Window{Tumbling: size}
					if a := arg("advance"); a != "" {
						adv, err := time.ParseDuration(a)
						if err != nil {
							d.Fatalf(t, "advance: %v", err)
						}
						cfg.Window = &configs.Window{Hopping: size, Advance: adv}
					}
				}
				var keep []string
				if k := arg("keep"); k != "" {
					keep = strings.Split(k, ",")
				}
				var err error
				dist, err = NewDistinct("firsts", cfg, keep)
				states = map[string][]byte{}
				if err != nil {
					return err.Error() + "\n"
				}
				return fmt.Sprintf("%+v %s\n", dist.Attributes(), dist.Layout())
			case "records":
				var out strings.Builder
				var r Record
				var in []byte
				for _, line := range strings.Split(d.Input, "\n") {
					f := strings.SplitN(line, " ", 3)
					if len(f) != 3 {
						d.Fatalf(t, "bad record line %q", line)
					}
					var key []byte
					if f[0] != "-" {
						key = []byte(f[0])
					}
					ts, err := strconv.ParseInt(f[1], 10, 64)
					if err != nil {
						d.Fatalf(t, "bad timestamp in %q", line)
					}
					if dist != nil {
						out.WriteString(processDistinct(src, stages, dist, states, &r, key, []byte(f[2]), ts, &in))
					} else {
						out.WriteString(process(src, stages, agg, states, &r, key, []byte(f[2]), ts, &in))
					}
					out.WriteByte('\n')
				}
				return out.String()
			case "join":
				cfg := configs.Join{Left: arg("left"), Right: arg("right"), Unique: arg("unique"), Type: arg("type")}
				if w := arg("within"); w != "" {
					var err error
					if cfg.Within, err = time.ParseDuration(w); err != nil {
						d.Fatalf(t, "bad within %q", w)
					}
				}
				for _, line := range strings.Split(d.Input, "\n") {
					name, e, ok := strings.Cut(line, ":")
					switch {
					case strings.TrimSpace(line) == "":
					case strings.HasPrefix(line, "where "):
						cfg.Where = strings.TrimPrefix(line, "where ")
					case ok:
						cfg.Select = append(cfg.Select, map[string]any{strings.TrimSpace(name): strings.TrimSpace(e)})
					default:
						cfg.Select = append(cfg.Select, strings.TrimSpace(line))
					}
				}
				var err error
				join = nil
				if cfg.Within > 0 {
					var j *StreamJoin
					if j, err = NewStreamJoin("j", cfg); err == nil {
						join = j
					}
				} else {
					var j *RegularJoin
					if j, err = NewRegularJoin("j", cfg); err == nil {
						join = j
					}
				}
				jstate = map[string]*sessCtx{}
				return errOrOK(err)
			case "pairs":
				if join == nil {
					d.Fatalf(t, "pairs without a join")
				}
				var out strings.Builder
				for _, line := range strings.Split(d.Input, "\n") {
					f := strings.SplitN(line, " ", 4)
					if len(f) != 4 || (f[0] != "0" && f[0] != "1") {
						d.Fatalf(t, "bad pairs line %q", line)
					}
					ts, err := strconv.ParseInt(f[2], 10, 64)
					if err != nil {
						d.Fatalf(t, "bad timestamp in %q", line)
					}
					c := jstate[f[1]]
					if c == nil {
						c = &sessCtx{wm: math.MinInt64}
						jstate[f[1]] = c
					}
					c.outs = nil
					in := append([]byte{f[0][0] - '0'}, f[3]...)
					if err := join.Process(c, []byte(f[1]), ts, in); err != nil {
						fmt.Fprintf(&out, "%s: error: %v\n", line, err)
						continue
					}
					fmt.Fprintf(&out, "%s %s: %d\n", f[0], f[1], len(c.outs))
					for _, o := range c.outs {
						fmt.Fprintf(&out, "  %s\n", o)
					}
				}
				return out.String()
			case "timer":
				// "key wm": the key's timer fires at watermark wm.
				var out strings.Builder
				for _, line := range strings.Split(d.Input, "\n") {
					k, w, _ := strings.Cut(line, " ")
					wm, err := strconv.ParseInt(w, 10, 64)
					c := jstate[k]
					if err != nil || c == nil {
						d.Fatalf(t, "bad timer line %q", line)
					}
					c.outs = nil
					if err := join.OnTimer(c.at(wm), []byte(k), wm); err != nil {
						fmt.Fprintf(&out, "%s: error: %v\n", line, err)
						continue
					}
					fmt.Fprintf(&out, "%s: %d\n", k, len(c.outs))
					for _, o := range c.outs {
						fmt.Fprintf(&out, "  %s\n", o)
					}
				}
				return out.String()
			case "render":
				var out strings.Builder
				keys := make([]string, 0, len(states))
				for k := range states {
					keys = append(keys, k)
				}
				slices.Sort(keys)
				for _, k := range keys {
					out.Write(agg.Render([]byte(k), states[k], nil))
					out.WriteByte('\n')
				}
				return out.String()
			default:
				d.Fatalf(t, "unknown command %s", d.Cmd)
				return ""
			}
		})
	})
}

func process(src *Source, stages []Stage, agg *Aggregate, states map[string][]byte, r *Record, key, value []byte, ts int64, in *[]byte) string {
	if err := src.Decode(key, value, ts, r); err != nil {
		return "dlq: " + describe(err)
	}
	for _, s := range stages {
		keep, err := s.Apply(r)
		if err != nil {
			return "dlq: " + describe(err)
		}
		if !keep {
			return "dropped by " + s.Name()
		}
	}
	desc := fmt.Sprintf("key=%s ts=%d value=%s", r.Key, r.Time, r.Value)
	if agg == nil {
		return desc
	}
	var err error
	if *in, err = agg.Project(r, (*in)[:0]); err != nil {
		return "dlq: " + describe(err)
	}
	st, ok := states[string(r.Key)]
	if !ok {
		st = make([]byte, agg.StateSize())
		agg.InitState(st)
		states[string(r.Key)] = st
	}
	states[string(r.Key)] = agg.Fold(st, *in)
	if !agg.ValidState(states[string(r.Key)]) {
		return desc + " INVALID STATE"
	}
	return desc
}

// processDistinct runs one record through the source, the stages and a distinct, as the
// runtime does in real-time mode; it returns what the distinct emits and the key's mask.
func processDistinct(src *Source, stages []Stage, dist *Distinct, states map[string][]byte, r *Record, key, value []byte, ts int64, in *[]byte) string {
	if err := src.Decode(key, value, ts, r); err != nil {
		return "dlq: " + describe(err)
	}
	for _, s := range stages {
		keep, err := s.Apply(r)
		if err != nil {
			return "dlq: " + describe(err)
		}
		if !keep {
			return "dropped by " + s.Name()
		}
	}
	var err error
	if *in, err = dist.Project(0, r, (*in)[:0]); err != nil {
		return "dlq: " + describe(err)
	}
	ctx := &sessCtx{state: states[string(r.Key)]}
	if err := dist.Process(ctx, r.Key, r.Time, *in); err != nil {
		return "error: " + err.Error()
	}
	states[string(r.Key)] = ctx.state
	return fmt.Sprintf("key=%s emit=%s mask=%x", r.Key, bytes.Join(ctx.outs, []byte(" ")), ctx.state)
}

func describe(err error) string {
	var e *Error
	if !errors.As(err, &e) {
		return "NOT AN *Error: " + err.Error()
	}
	return err.Error()
}

func errOrOK(err error) string {
	if err != nil {
		return err.Error() + "\n"
	}
	return "ok\n"
}
