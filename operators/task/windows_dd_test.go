package task

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/changelog/codec"
	"github.com/sluice-dev/sluice/operators/plan"
	"github.com/sluice-dev/sluice/sorter"
	"github.com/sluice-dev/sluice/state"
)

// ddRefunds is the topic of a cogroup pipeline's second input (refunds) in testdata/windows.
const ddRefunds = "refunds"

// TestWindowsDataDriven runs the files of testdata/windows (rewrite with -rewrite). Commands:
//
//	pipeline max_delay=D [cogroup]
//	           the input is the aggregate's window and emit lines (YAML); D is the source's
//	           watermark.max_delay; starts a fresh task over an empty store. With cogroup the
//	           operator is a cogroup of the inputs orders (n, total: count and sum of amount) and
//	           refunds (r, refunded; max_delay D too), one task of both topics. With top the
//	           operator is a top over windows of orders and the input its lines (YAML: n, by,
//	           ties, window, ...).
//	mode m     m = backlog | realtime: the lag the next batches report (backlog: far behind;
//	           realtime: caught up). A switch out of backlog folds at the next batch. In a
//	           cogroup both inputs report the lag at once (Task.Observe), and a switch it causes
//	           is checkpointed now: prints what that committed.
//	records [input=I]
//	           one record per line: "key ts amount" (ts in ms) of input I (orders, the default, or
//	           refunds); processes them as one batch and checkpoints; prints the outputs and dead
//	           letters that checkpoint committed (a dead letter of a cogroup names its input)
//	restart    closes the task and starts a new one over the same store (everything was
//	           committed: it resumes from the committed state, watermarks and timers)
//	end [input=I]
//	           the input ends (a bounded run; a cogroup: input I, or both): every window closes
//	           once every input has ended; prints what was committed
//	state      prints the stored windows (key@start=count) and the watermark (a cogroup: also
//	           each input's)
func TestWindowsDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata/windows", func(t *testing.T, path string) {
		var (
			tk      *Task
			prod    *fakeProducer
			store   state.Store
			lag     int64
			offsets map[string]int64
			topics  []string // the task's input topics (testTopic, then ddRefunds in a cogroup)
			seen    int      // committed records already printed
		)
		report := func() string {
			var b strings.Builder
			recs := prod.log[seen:]
			seen = len(prod.log)
			var lines []string
			for _, r := range recs {
				switch r.Topic {
				case testSink:
					lines = append(lines, "out "+string(r.Value))
				case testGroup + "-dlq":
					var reason, off, topic string
					for _, h := range r.Headers {
						switch h.Key {
						case "sluice.error":
							reason = string(h.Value)
						case "sluice.source.offset":
							off = string(h.Value)
						case "sluice.source.topic":
							topic = string(h.Value)
						}
					}
					if len(topics) > 1 {
						lines = append(lines, fmt.Sprintf("dlq %s offset=%s %s", topic, off, reason))
					} else {
						lines = append(lines, fmt.Sprintf("dlq offset=%s %s", off, reason))
					}
				}
			}
			sort.Strings(lines)
			for _, l := range lines {
				b.WriteString(l + "\n")
			}
			if b.Len() == 0 {
				return "(nothing)\n"
			}
			return b.String()
		}
		checkpoint := func() {
			for range 3 {
				pd := checkpointTask(t, tk, prod)
				prod.commit()
				if err := tk.Committed(pd); err != nil {
					t.Fatal(err)
				}
				if !tk.NeedsCheckpoint() && !tk.WantsFold() {
					return
				}
			}
		}
		// start builds the task of the pipeline's topics over store (a restart: the same store,
		// so the new task restores the committed state, watermarks and timers).
		var plan *plan.Plan
		var fs *vfs.MemFS // with pipeline … bulk: the crashable file system of the Pebble store
		loader := 0       // Deps.LoaderThreshold
		openStore := func() {
			db, err := state.Open(state.Options{Dir: "/state", FS: fs})
			if err != nil {
				t.Fatal(err)
			}
			store = db
			t.Cleanup(func() { db.Close() })
		}
		start := func() {
			clk := &stepClock{now: time.Unix(1_700_000_000, 0)}
			var err error
			tk, err = NewGroup(plan, topics, 0, Deps{Store: store, Budget: sorter.NewBudget(1 << 20),
				SortDir: t.TempDir(), Clock: clk.Now, Logger: discardLogger(), LoaderThreshold: loader})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(tk.Close)
		}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "pipeline":
				window := strings.ReplaceAll(strings.TrimSpace(d.Input), "\n", "\n      ")
				if d.HasArg("cogroup") {
					doc := fmt.Sprintf(`
kafka: {brokers: [127.0.0.1:9092]}
group: %[1]s
instance_id: i-0
processing: {commit_interval: 100ms, state_dir: ./data}
backlog: {enter_lag: 100, exit_lag: 10, mode: auto, progress_interval: 0s}
sources:
  orders: {topic: %[2]s, key: customer_id, timestamp: ts, watermark: {max_delay: %[3]s}}
  refunds: {topic: %[4]s, key: customer_id, timestamp: ts, watermark: {max_delay: %[3]s}}
operators:
  - name: %[5]s
    cogroup:
      inputs: [orders, refunds]
      %[6]s
      fields:
        n: {count: {}, from: orders}
        total: {sum: amount, from: orders}
        r: {count: {}, from: refunds}
        refunded: {sum: amount, from: refunds}
    output: out
sinks:
  out: {topic: %[7]s}
`, testGroup, testTopic, d.CmdArgs[0].Vals[0], ddRefunds, testOp, window, testSink)
					store, plan = state.NewMem(), mustPlan(t, doc)
					topics = []string{testTopic, ddRefunds}
					start()
					prod, offsets, seen, lag = newFakeProducer(), map[string]int64{}, 0, 0
					return "ok\n"
				}
				op := fmt.Sprintf(`aggregate:
      input: orders
      %s
      fields: {n: {count: {}}, total: {sum: amount}}`, window)
				if d.HasArg("top") {
					op = fmt.Sprintf(`top:
      input: orders
      %s`, window)
				}
				doc := fmt.Sprintf(`
kafka: {brokers: [127.0.0.1:9092]}
group: %s
instance_id: i-0
processing: {commit_interval: 100ms, state_dir: ./data}
backlog: {enter_lag: 100, exit_lag: 10, mode: auto, progress_interval: 0s}
sources:
  orders: {topic: %s, key: customer_id, timestamp: ts, watermark: {max_delay: %s}}
operators:
  - name: %s
    %s
    output: out
sinks:
  out: {topic: %s}
`, testGroup, testTopic, d.CmdArgs[0].Vals[0], testOp, op, testSink)
				store, plan, loader = state.NewMem(), mustPlan(t, doc), 0
				if d.HasArg("bulk") {
					// A Pebble store on a crashable file system, and every switch a bulk load.
					fs, loader = vfs.NewCrashableMem(), 1
					openStore()
				}
				topics = []string{testTopic}
				start()
				prod, offsets, seen, lag = newFakeProducer(), map[string]int64{}, 0, 0
				return "ok\n"
			case "restart":
				tk.Close()
				start()
				return "ok\n"
			case "crash":
				// kill -9: the store keeps only what was synced (pipeline … bulk).
				tk.Close()
				image := fs.CrashClone(vfs.CrashCloneCfg{})
				store.Close()
				fs = image
				openStore()
				start()
				return "ok\n"
			case "mode":
				switch d.CmdArgs[0].Key {
				case "backlog":
					lag = 1 << 40
				case "realtime":
					lag = 0
				default:
					t.Fatalf("mode %s", d.CmdArgs[0].Key)
				}
				if len(topics) == 1 {
					return "ok\n"
				}
				need := false
				for _, tp := range topics {
					need = tk.Observe(tp, lag, 0) || need
				}
				if !need && !tk.WantsFold() {
					return "ok\n"
				}
				checkpoint()
				return report()
			case "records":
				topic := testTopic
				if d.HasArg("input") {
					var in string
					d.ScanArgs(t, "input", &in)
					if topic = map[string]string{"orders": testTopic, "refunds": ddRefunds}[in]; topic == "" || !slices.Contains(topics, topic) {
						t.Fatalf("records: no input %q", in)
					}
				}
				var recs []*kgo.Record
				for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
					f := strings.Fields(line)
					ts, _ := strconv.ParseInt(f[1], 10, 64)
					recs = append(recs, &kgo.Record{Topic: topic, Offset: offsets[topic], Key: []byte(f[0]),
						Value: fmt.Appendf(nil, `{"customer_id":%q,"amount":%s,"ts":%d}`, f[0], f[2], ts), Timestamp: time.UnixMilli(ts)})
					offsets[topic]++
				}
				if tk.BeforeBatch(topic, Lag{Before: lag + int64(len(recs)), After: lag}) {
					checkpoint()
				}
				if err := tk.Process(topic, recs); err != nil {
					return "error: " + err.Error() + "\n"
				}
				tk.AfterBatch(topic, Lag{After: lag})
				checkpoint()
				return report()
			case "end":
				ended := topics
				if d.HasArg("input") {
					var in string
					d.ScanArgs(t, "input", &in)
					ended = []string{map[string]string{"orders": testTopic, "refunds": ddRefunds}[in]}
				}
				for _, tp := range ended {
					if err := tk.EndInput(tp); err != nil {
						t.Fatal(err)
					}
				}
				checkpoint()
				return report()
			case "state":
				var b strings.Builder
				st := tk.Status().Chains[0]
				fmt.Fprintf(&b, "mode %s, watermark %s, late %d\n", st.Mode, fmtWM(st.WatermarkMs), st.LateRecords)
				if len(topics) > 1 {
					for _, c := range tk.chains {
						fmt.Fprintf(&b, "input %s: watermark %s\n", c.plan.SourceName, fmtWM(&c.iwm))
					}
				}
				err := store.Scan(tk.chains[0].ns, func(k, v []byte) error {
					if gk, start, ok := codec.SplitWindowKey(k); ok && tk.chains[0].ops.Agg != nil && tk.chains[0].ops.Agg.Closes() {
						fmt.Fprintf(&b, "window %s@%d: %d bytes\n", gk, start, len(v))
					} else {
						fmt.Fprintf(&b, "key %s: %d bytes\n", k, len(v))
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				return b.String()
			}
			t.Fatalf("unknown command %q", d.Cmd)
			return ""
		})
	})
}

func fmtWM(wm *int64) string {
	if wm == nil || *wm == math.MinInt64 {
		return "none"
	}
	return strconv.FormatInt(*wm, 10)
}
