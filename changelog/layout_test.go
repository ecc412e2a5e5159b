package changelog

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/changelog/codec"
	"github.com/sluice-dev/sluice/integration/kafkatest"
	"github.com/sluice-dev/sluice/state"
)

// TestRestoreChecksLayout replays changelogs into an empty store (a new instance, or a lost
// state dir) against an in-process kfake broker: records of the config's layout, and headerless
// records of an older sluice that are valid states, are restored; a record of another layout,
// or a headerless one that is not a valid state, stops the restore with ErrLayout and a message
// naming the operator and sluice reset, and nothing of the log is applied.
func TestRestoreChecksLayout(t *testing.T) {
	const op, fp, text = "totals", "00000000000000aa", "aggregate/v1 n=count()"
	layout := []kgo.RecordHeader{{Key: codec.HeaderLayout, Value: []byte(fp)}}
	other := []kgo.RecordHeader{{Key: codec.HeaderPending, Value: []byte("1")}, {Key: codec.HeaderLayout, Value: []byte("00000000000000bb")}}
	valid := func(_ string, v []byte) bool { return len(v) == 3 }
	for _, c := range []struct {
		name    string
		records []*kgo.Record
		want    string // "" restores; else a substring of the error
	}{
		{"same layout", []*kgo.Record{{Key: []byte("a"), Value: []byte("v-1"), Headers: layout}, {Key: []byte("b"), Value: []byte("v-2"), Headers: layout}}, ""},
		{"older sluice, valid", []*kgo.Record{{Key: []byte("a"), Value: []byte("v-1")}, {Key: []byte("b"), Value: []byte("v-2"), Headers: layout}}, ""},
		{"another layout", []*kgo.Record{{Key: []byte("a"), Value: []byte("v-1"), Headers: layout}, {Key: []byte("b"), Value: []byte("v-2"), Headers: other}},
			"offset 1 holds a state of operator totals written under another layout (fingerprint 00000000000000bb; this config's is 00000000000000aa: aggregate/v1 n=count())"},
		{"older sluice, invalid", []*kgo.Record{{Key: []byte("a"), Value: []byte("v-1")}, {Key: []byte("b"), Value: []byte("v-22")}},
			"offset 1: its value (4 bytes) is not a state of operator totals under this config's layout (aggregate/v1 n=count())"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			const topic = "g-totals-changelog"
			brokers := kafkatest.Fake(t, 1, topic)
			cl := kafkatest.Client(t, brokers, kgo.DefaultProduceTopic(topic))
			for _, r := range c.records {
				if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			store := state.NewMem()
			rs := &Restorer{
				Brokers: kafkatest.SplitBrokers(brokers), Store: store, Admin: kadm.NewClient(cl), Valid: valid,
				Layout: func(string) (string, string) { return fp, text },
			}
			ns := state.Namespace{Operator: op, Partition: 0}
			_, err := rs.Restore(ctx, topic, ns)
			var got []string
			if serr := store.Scan(ns, func(k, v []byte) error { got = append(got, string(k)+"="+string(v)); return nil }); serr != nil {
				t.Fatal(serr)
			}
			if c.want == "" {
				if err != nil || len(got) != 2 {
					t.Fatalf("Restore = %v, state %q", err, got)
				}
				return
			}
			if !errors.Is(err, ErrLayout) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "sluice reset -c FILE --operator totals") {
				t.Fatalf("Restore = %v\nwant ErrLayout saying %q and sluice reset", err, c.want)
			}
			if len(got) != 0 {
				t.Fatalf("a refused restore applied %q", got)
			}
		})
	}
}

// TestCheckLayoutAccepted: a restore applies a record written under a layout the config's
// accepts as its own (operators.Layout.Accepts), and refuses one under any other.
func TestCheckLayoutAccepted(t *testing.T) {
	ns := state.Namespace{Operator: "j", Partition: 0}
	rec := func(fp string) *kgo.Record {
		return &kgo.Record{Topic: "cl", Key: []byte("k"), Value: []byte("v"), Headers: []kgo.RecordHeader{{Key: codec.HeaderLayout, Value: []byte(fp)}}}
	}
	if err := checkLayout(rec("old"), ns, "new", "kept", []string{"old"}); err != nil {
		t.Errorf("an accepted layout refused: %v", err)
	}
	if err := checkLayout(rec("new"), ns, "new", "kept", []string{"old"}); err != nil {
		t.Errorf("the config's own layout refused: %v", err)
	}
	if err := checkLayout(rec("other"), ns, "new", "kept", []string{"old"}); !errors.Is(err, ErrLayout) {
		t.Errorf("another layout: %v, want ErrLayout", err)
	}
	if err := checkLayout(rec("old"), ns, "new", "kept", nil); !errors.Is(err, ErrLayout) {
		t.Errorf("a layout nothing accepts: %v, want ErrLayout", err)
	}
}
