package task

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/operators"
	"github.com/sluice-dev/sluice/state"
)

// TestWindowsDataDriven runs the files of testdata/windows (rewrite with -rewrite). Commands:
//
//	pipeline max_delay=D   the input is the aggregate's window and emit lines (YAML); D is the
//	           source's watermark.max_delay; starts a fresh task over an empty store
//	mode m     m = backlog | realtime: the lag the next batches report (backlog: far behind;
//	           realtime: caught up). A switch out of backlog folds at the next batch.
//	records    one record per line: "key ts amount" (ts in ms); processes them as one batch and
//	           checkpoints; prints the outputs and dead letters that checkpoint committed
//	end        the input ends (a bounded run): every window closes; prints what was committed
//	state      prints the stored windows (key@start=count) and the watermark
func TestWindowsDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata/windows", func(t *testing.T, path string) {
		var (
			tk     *Task
			prod   *fakeProducer
			store  state.Store
			lag    int64
			offset int64
			seen   int // committed records already printed
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
					var reason, off string
					for _, h := range r.Headers {
						switch h.Key {
						case "sluice.error":
							reason = string(h.Value)
						case "sluice.source.offset":
							off = string(h.Value)
						}
					}
					lines = append(lines, fmt.Sprintf("dlq offset=%s %s", off, reason))
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
				if tk.WantsFold() {
					if err := tk.Prepare(t.Context(), prod); err != nil {
						t.Fatal(err)
					}
				}
				pd, err := tk.Checkpoint(prod)
				if err != nil {
					t.Fatal(err)
				}
				prod.commit()
				if err := tk.Committed(pd); err != nil {
					t.Fatal(err)
				}
				if !tk.NeedsCheckpoint() && !tk.WantsFold() {
					return
				}
			}
		}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "pipeline":
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
    aggregate:
      input: orders
      %s
      fields: {n: {count: {}}, total: {sum: amount}}
    output: out
sinks:
  out: {topic: %s}
`, testGroup, testTopic, d.CmdArgs[0].Vals[0], testOp, strings.ReplaceAll(strings.TrimSpace(d.Input), "\n", "\n      "), testSink)
				store = state.NewMem()
				tk = newTestTask(t, mustPlan(t, doc), store, 1<<20, 0)
				prod, offset, seen, lag = newFakeProducer(), 0, 0, 0
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
				return "ok\n"
			case "records":
				var recs []*kgo.Record
				for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
					f := strings.Fields(line)
					ts, _ := strconv.ParseInt(f[1], 10, 64)
					recs = append(recs, &kgo.Record{Topic: testTopic, Offset: offset, Key: []byte(f[0]),
						Value: fmt.Appendf(nil, `{"customer_id":%q,"amount":%s,"ts":%d}`, f[0], f[2], ts), Timestamp: time.UnixMilli(ts)})
					offset++
				}
				if tk.BeforeBatch(testTopic, Lag{Before: lag + int64(len(recs)), After: lag}) {
					checkpoint()
				}
				if err := tk.Process(testTopic, recs); err != nil {
					return "error: " + err.Error() + "\n"
				}
				tk.AfterBatch(testTopic, Lag{After: lag})
				checkpoint()
				return report()
			case "end":
				if err := tk.EndInput(testTopic); err != nil {
					t.Fatal(err)
				}
				checkpoint()
				return report()
			case "state":
				var b strings.Builder
				st := tk.Status().Chains[0]
				fmt.Fprintf(&b, "mode %s, watermark %s, late %d\n", st.Mode, fmtWM(st.WatermarkMs), st.LateRecords)
				err := store.Scan(tk.chains[0].ns, func(k, v []byte) error {
					if gk, start, ok := operators.SplitWindowKey(k); ok && tk.chains[0].win != nil {
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
	if wm == nil {
		return "none"
	}
	return strconv.FormatInt(*wm, 10)
}
