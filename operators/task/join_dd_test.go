package task

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/changelog/codec"
	"github.com/sluice-dev/sluice/operators/plan"
	"github.com/sluice-dev/sluice/sorter"
	"github.com/sluice-dev/sluice/state"
)

const (
	joinTable  = "customers" // the table's name and its topic
	joinRepart = testGroup + "-" + testOp + "-repartition"
)

// joinConfig returns the YAML of a join pipeline: orders (keyed by customer_id, event time ts)
// joined with the customers table (typ: inner or left). Without an aggregate the joined
// records go to testSink; with one (testOp: count and sum of amount) its results do, keyed by
// customer_id or, with groupBy, re-keyed through the repartition topic.
func joinConfig(typ string, agg bool, groupBy string, mode string, enter, exit int64, cacheKeys int, every string, fields string) string {
	ops := fmt.Sprintf(`  - name: enriched
    join: {stream: orders, table: %s, type: %s}
    output: out
`, joinTable, typ)
	if agg {
		gb := ""
		if groupBy != "" {
			gb = "\n      group_by: " + groupBy
		}
		if fields == "" {
			fields = "{n: {count: {}}, total: {sum: amount}}"
		}
		ops = fmt.Sprintf(`  - name: enriched
    join: {stream: orders, table: %s, type: %s}
  - name: %s
    aggregate:
      input: enriched%s
      fields: %s
    output: out
`, joinTable, typ, testOp, gb, fields)
	}
	return fmt.Sprintf(`
%ssources:
  orders: {topic: %s, format: json, key: customer_id, timestamp: ts}
tables:
  %s: {topic: %s, key: customer_id}
operators:
%ssinks:
  out: {topic: %s, format: json}
`, testHeader(mode, enter, exit, cacheKeys, every), testTopic, joinTable, joinTable, ops, testSink)
}

// newJoinTask builds the task of partition 0 of the group {customers, orders} over store.
func newJoinTask(t testing.TB, plan *plan.Plan, store state.Store, prod Producer, m *Metrics) *Task {
	t.Helper()
	clk := &stepClock{now: time.Unix(1_700_000_000, 0)}
	tk, err := NewGroup(plan, []string{joinTable, testTopic}, 0, Deps{
		Store: store, Budget: sorter.NewBudget(1 << 20), SortDir: t.TempDir(), Producer: prod,
		Clock: clk.Now, Logger: discardLogger(), Metrics: m, InternalPartitions: map[string]int32{joinRepart: 1},
	})
	if err != nil {
		t.Fatalf("NewGroup: %v", err)
	}
	t.Cleanup(tk.Close)
	return tk
}

// customerRec is a record of the customers topic: value "" is a tombstone.
func customerRec(offset int64, key, value string) *kgo.Record {
	r := &kgo.Record{Topic: joinTable, Offset: offset, Timestamp: time.UnixMilli(1_000)}
	if key != "-" {
		r.Key = []byte(key) // "-": a null key
	}
	if value != "" {
		r.Value = []byte(value)
	}
	return r
}

// orderRec returns a record of the orders topic; extra are more members of its value.
func orderRec(offset int64, key, amount string, ts int64, extra string) *kgo.Record {
	if extra != "" {
		extra = "," + extra
	}
	return &kgo.Record{Topic: testTopic, Offset: offset, Key: []byte(key), Timestamp: time.UnixMilli(ts),
		Value: fmt.Appendf(nil, `{"customer_id":%q,"amount":%s,"ts":%d%s}`, key, amount, ts, extra)}
}

// TestJoinDataDriven runs the files of testdata/join (rewrite with -rewrite). The task is
// partition 0 of {customers, orders}; the test plays the consumer. Commands:
//
//	pipeline type=inner|left [agg] [group_by=F]
//	           a fresh store and task: orders joined with the customers table (key customer_id);
//	           without agg the joined records go to the sink; with agg, count n and sum total
//	           of amount per customer (or per group_by field, through the repartition topic)
//	restart    closes the task (uncommitted work is lost, as in a crash) and builds a new one
//	           over the same store; prints TableStart
//	close      closes the task (a revoke)
//	table-end start=S end=E
//	           SetTableEnd: the table partition's log start and snapshot end offsets
//	table [next=N]
//	           one table batch (ProcessTable), one record per line: "offset key json", "offset
//	           key tombstone", or "offset key raw TEXT" (a value that is not JSON); key "-" is a
//	           null key; N is the offset after the batch as the fetch saw it (past transaction
//	           markers); no lines: a batch of transaction markers only
//	mode backlog|realtime
//	           the lag the next orders batches report (default realtime)
//	orders     one orders batch, one record per line: "key amount ts [members]" (offsets follow
//	           on; members are more JSON members of the value)
//	checkpoint [abort]
//	           a checkpoint, committed or aborted; prints the offsets it commits (or the seeks of
//	           the abort) and the records it committed
//	replay     after an abort, feeds the records again from the offsets the abort returned
//	           (tables first); a topic absent from them keeps its position
//	downstream the committed repartition records not fed yet go to the repartition topic's own
//	           task (built on first use), which checkpoints; prints what it committed
//	status     waiting reason, tables, chains, sluice_join_waiting
//	rows       the table's rows in the store, and its stored offset
func TestJoinDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata/join", func(t *testing.T, path string) {
		var (
			plan  *plan.Plan
			tk    *Task
			down  *Task // the repartition topic's task
			store state.Store
			prod  *fakeProducer
			m     *Metrics
			lag   int64
			seen  int                          // committed records already printed
			logs  = map[string][]*kgo.Record{} // every record fed, by topic
			seek  map[string]int64             // the last abort's seeks
			fedDn int                          // repartition records fed downstream
		)
		report := func() string {
			var lines []string
			for _, r := range prod.log[seen:] {
				switch r.Topic {
				case testSink:
					lines = append(lines, fmt.Sprintf("out %s %s", r.Key, r.Value))
				case joinRepart:
					if r.Key == nil && r.Value == nil {
						if wm := hdr(r, codec.HeaderWatermark); wm != "" {
							lines = append(lines, fmt.Sprintf("repartition attribute watermark=%s writer=%s", wm, hdr(r, codec.HeaderWriter)))
							continue
						}
						lines = append(lines, fmt.Sprintf("repartition attribute backlog=%s writer=%s", hdr(r, codec.HeaderBacklog), hdr(r, codec.HeaderWriter)))
						continue
					}
					if _, ok := codec.PartialOf(r.Headers); ok {
						// A combining writer's partial state (combine.go), as the reader's
						// aggregate renders it.
						var v []byte
						for _, c := range plan.Chains {
							if c.Source.Topic == joinRepart {
								ops, err := c.Build(nil, nil)
								if err != nil {
									t.Fatal(err)
								}
								v, _, _ = ops.Agg.Result(r.Key, r.Value, nil)
							}
						}
						lines = append(lines, fmt.Sprintf("repartition partial key=%s ts=%d %s", r.Key, r.Timestamp.UnixMilli(), v))
						continue
					}
					lines = append(lines, fmt.Sprintf("repartition key=%s ts=%d %s", r.Key, r.Timestamp.UnixMilli(), r.Value))
				case testGroup + "-dlq":
					lines = append(lines, fmt.Sprintf("dlq %s@%s %s: %s", hdr(r, codec.HeaderSourceTopic), hdr(r, codec.HeaderSourceOffset),
						hdr(r, codec.HeaderOperator), hdr(r, codec.HeaderError)))
				}
			}
			seen = len(prod.log)
			if len(lines) == 0 {
				return "(nothing committed)\n"
			}
			return strings.Join(lines, "\n") + "\n"
		}
		waiting := func() string {
			return fmt.Sprintf("waiting=%v join_waiting=%v\n", tk.Waiting(), gaugeValue(t, m.waiting))
		}
		start := func() {
			tk = newJoinTask(t, plan, store, prod, m)
			down = nil
		}
		feedOrders := func(recs []*kgo.Record) error {
			if tk.BeforeBatch(testTopic, Lag{Before: lag + int64(len(recs)), After: lag}) {
				ddCheckpoint(t, tk, prod, false)
			}
			if err := tk.Process(testTopic, recs); err != nil {
				return err
			}
			tk.AfterBatch(testTopic, Lag{After: lag})
			return nil
		}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "pipeline":
				typ, agg, groupBy := "inner", false, ""
				for _, a := range d.CmdArgs {
					switch a.Key {
					case "type":
						typ = a.Vals[0]
					case "agg":
						agg = true
					case "group_by":
						agg, groupBy = true, a.Vals[0]
					default:
						t.Fatalf("pipeline: unknown argument %s", a.Key)
					}
				}
				plan = mustPlan(t, joinConfig(typ, agg, groupBy, "auto", 100, 10, 1000, "0s", ""))
				store, prod, m = state.NewMem(), newFakeProducer(), NewMetrics(prometheus.NewRegistry())
				lag, seen, logs, seek, fedDn = 0, 0, map[string][]*kgo.Record{}, nil, 0
				start()
				return waiting()
			case "restart":
				tk.Close()
				prod.abort() // the open transaction dies with the process
				start()
				off, _ := tk.TableStart(joinTable)
				return fmt.Sprintf("table start %d\n", off) + waiting()
			case "close":
				tk.Close()
				return waiting()
			case "table-end":
				var s, e int64
				d.ScanArgs(t, "start", &s)
				d.ScanArgs(t, "end", &e)
				tk.SetTableEnd(joinTable, s, e)
				return waiting()
			case "table":
				next := int64(-1)
				if d.HasArg("next") {
					d.ScanArgs(t, "next", &next)
				}
				var recs []*kgo.Record
				for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
					if line == "" {
						continue // a batch of transaction markers only
					}
					f := strings.SplitN(line, " ", 3)
					off, err := strconv.ParseInt(f[0], 10, 64)
					if err != nil || len(f) < 3 {
						t.Fatalf("table record %q: want \"offset key value\"", line)
					}
					v := f[2]
					switch {
					case v == "tombstone":
						v = ""
					case strings.HasPrefix(v, "raw "):
						v = strings.TrimPrefix(v, "raw ")
					}
					recs = append(recs, customerRec(off, f[1], v))
				}
				logs[joinTable] = append(logs[joinTable], recs...)
				if err := tk.ProcessTable(joinTable, recs, next); err != nil {
					return "error: " + err.Error() + "\n"
				}
				ts := tk.Status().Tables[0]
				return fmt.Sprintf("next=%d lag=%d loaded=%v ", ts.NextOffset, ts.Lag, ts.Loaded) + waiting()
			case "mode":
				switch d.CmdArgs[0].Key {
				case "backlog":
					lag = 1 << 40
				case "realtime":
					lag = 0
				default:
					t.Fatalf("mode %s", d.CmdArgs[0].Key)
				}
				return "ok\n"
			case "orders":
				var recs []*kgo.Record
				for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
					f := strings.SplitN(line, " ", 4)
					ts, _ := strconv.ParseInt(f[2], 10, 64)
					extra := ""
					if len(f) == 4 {
						extra = f[3]
					}
					recs = append(recs, orderRec(int64(len(logs[testTopic])), f[0], f[1], ts, extra))
					logs[testTopic] = append(logs[testTopic], recs[len(recs)-1])
				}
				if err := feedOrders(recs); err != nil {
					return "error: " + err.Error() + "\n"
				}
				return "ok\n"
			case "checkpoint":
				abort := d.HasArg("abort")
				pd, sk := ddCheckpoint(t, tk, prod, abort)
				var b strings.Builder
				if abort {
					seek = sk
					fmt.Fprintf(&b, "aborted; seek %s\n", fmtOffsets(sk))
				} else {
					fmt.Fprintf(&b, "committed offsets %s\n", fmtOffsets(pd.Offsets))
				}
				b.WriteString(report())
				return b.String()
			case "replay":
				if seek == nil {
					t.Fatalf("replay without an abort")
				}
				var b strings.Builder
				for _, topic := range []string{joinTable, testTopic} {
					from, ok := seek[topic]
					if !ok {
						continue
					}
					var recs []*kgo.Record
					for _, r := range logs[topic] {
						if r.Offset >= from {
							recs = append(recs, r)
						}
					}
					fmt.Fprintf(&b, "%s: %d records from %d\n", topic, len(recs), from)
					if len(recs) == 0 {
						continue
					}
					var err error
					if topic == joinTable {
						err = tk.ProcessTable(topic, recs, -1)
					} else {
						err = feedOrders(recs)
					}
					if err != nil {
						t.Fatalf("replay %s: %v", topic, err)
					}
				}
				seek = nil
				return b.String()
			case "downstream":
				if down == nil {
					clk := &stepClock{now: time.Unix(1_700_000_000, 0)}
					var err error
					down, err = New(plan, joinRepart, 0, Deps{Store: store, Budget: sorter.NewBudget(1 << 20), SortDir: t.TempDir(), Producer: prod,
						Clock: clk.Now, Logger: discardLogger(), InternalPartitions: map[string]int32{joinRepart: 1}})
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(down.Close)
				}
				recs := prod.committed(joinRepart)[fedDn:]
				fedDn += len(recs)
				// The repartition topic's lag is 0 after the batch: its mode is the writers'.
				down.ReadAttributes(joinRepart, recs)
				var fold *Pending
				if down.BeforeBatch(joinRepart, Lag{Before: int64(len(recs))}) {
					fold, _ = ddCheckpoint(t, down, prod, false) // a switch before the batch
				}
				if err := down.Process(joinRepart, recs); err != nil {
					return "error: " + err.Error() + "\n"
				}
				mode := down.Status().Chains[0].Mode // the batch's (Process publishes it)
				down.AfterBatch(joinRepart, Lag{})
				up := down.Status().Chains[0].UpstreamBacklog
				pd, _ := ddCheckpoint(t, down, prod, false)
				switched := ""
				if fold != nil {
					switched = fmt.Sprintf("switched first, committed offsets %s; ", fmtOffsets(fold.Offsets))
				}
				return fmt.Sprintf("%s%d records in %s mode (writers in backlog after it: %v); committed offsets %s\n", switched, len(recs), mode, up, fmtOffsets(pd.Offsets)) + report()
			case "status":
				st := tk.Status()
				var b strings.Builder
				fmt.Fprintf(&b, "waiting: %q\n", st.Waiting)
				for _, ts := range st.Tables {
					fmt.Fprintf(&b, "table %s (topic %s): loaded=%v next=%d end=%d lag=%d rows_applied=%d waiting=%v\n",
						ts.Table, ts.Topic, ts.Loaded, ts.NextOffset, ts.EndOffset, ts.Lag, ts.Rows, ts.WaitingFor)
				}
				for _, cs := range st.Chains {
					fmt.Fprintf(&b, "chain %s (topic %s): mode=%s next=%d committed=%d in=%d out=%d dead=%d",
						cs.Source, cs.Topic, cs.Mode, cs.NextOffset, cs.CommittedOffset, cs.RecordsIn, cs.RecordsOut, cs.DeadLetters)
					if cs.Announced != "" {
						fmt.Fprintf(&b, " announced=%s", cs.Announced)
					}
					b.WriteString("\n")
				}
				b.WriteString(waiting())
				return b.String()
			case "rows":
				var b strings.Builder
				ns := codec.TableNamespace(joinTable, 0)
				if err := store.Scan(ns, func(k, v []byte) error {
					fmt.Fprintf(&b, "%s %s\n", k, v)
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				off, ok, err := store.Offset(ns)
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					fmt.Fprintf(&b, "offset %d\n", off)
				} else {
					b.WriteString("no offset\n")
				}
				return b.String()
			}
			t.Fatalf("unknown command %q", d.Cmd)
			return ""
		})
	})
}

// ddCheckpoint runs one checkpoint of tk (folding a switch first if one is due), committed or
// aborted; it checkpoints again while the task asks for it (a committed one only).
func ddCheckpoint(t testing.TB, tk *Task, prod *fakeProducer, abort bool) (*Pending, map[string]int64) {
	t.Helper()
	var first *Pending
	for range 3 {
		pd := checkpointTask(t, tk, prod)
		if abort || pd.Err() != nil {
			prod.abort()
			return pd, tk.Aborted(pd)
		}
		prod.commit()
		if err := tk.Committed(pd); err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = pd
		} else {
			for k, v := range pd.Offsets {
				first.Offsets[k] = v
			}
		}
		if !tk.NeedsCheckpoint() && !tk.WantsFold() {
			break
		}
	}
	return first, nil
}

func fmtOffsets(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// hdr returns the value of the record's header key ("" if it has none).
func hdr(r *kgo.Record, key string) string {
	v, _ := header(r, key)
	return v
}

// gaugeValue reads a gauge.
func gaugeValue(t testing.TB, g prometheus.Gauge) float64 {
	t.Helper()
	var out dto.Metric
	if err := g.Write(&out); err != nil {
		t.Fatal(err)
	}
	return out.GetGauge().GetValue()
}
