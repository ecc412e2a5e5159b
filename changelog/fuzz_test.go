package changelog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/changelog/codec"
	"github.com/sluice-dev/sluice/state"
)

// FuzzApplyRecord feeds the restore's decoding of one changelog record any key, value and
// headers (names from the list below, or any): it applies the record or refuses it with an error
// wrapping ErrLayout, never panics, and applies nothing it refuses. A watermark applied is 8
// bytes (9 for a writer's mark); a state applied passed the layout check and the Valid hook; a pending mark follows the
// header.
func FuzzApplyRecord(f *testing.F) {
	const fp = "0123456789abcdef"
	f.Add([]byte("c-1"), []byte("0123456789"), false, "sluice.layout="+fp)
	f.Add([]byte("c-1"), []byte("0123456789"), false, "sluice.layout=fedcba9876543210")
	f.Add([]byte("c-1"), []byte("short"), false, "")
	f.Add([]byte("c-1"), []byte(nil), true, "sluice.pending=")
	f.Add([]byte("wm"), binary.BigEndian.AppendUint64(nil, 42), false, "sluice.watermark=")
	f.Add([]byte("wm"), []byte("wm"), false, "sluice.watermark=,sluice.layout="+fp)
	f.Add([]byte("wm/0/1"), append(binary.BigEndian.AppendUint64(nil, 42), 1), false, "sluice.watermark=")
	f.Add([]byte(nil), []byte("0123456789"), false, "sluice.pending=,sluice.pending=x,other=y")
	ns := state.Namespace{Operator: "totals", Partition: 3}
	r := &Restorer{Valid: func(op string, v []byte) bool { return op == "totals" && len(v) == 10 }}
	f.Fuzz(func(t *testing.T, key, value []byte, tombstone bool, headers string) {
		rec := &kgo.Record{Topic: "g-totals-changelog", Partition: 3, Offset: 7, Key: key, Value: value}
		if tombstone {
			rec.Value = nil
		} else if rec.Value == nil {
			rec.Value = []byte{}
		}
		if headers != "" {
			for _, h := range strings.Split(headers, ",") {
				k, v, _ := strings.Cut(h, "=")
				rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
			}
		}
		st := state.NewMem()
		b := st.NewBatch()
		marks := false
		err := r.apply(b, rec, ns, fp, "n=count()", nil, &marks, nil)
		if err != nil {
			if !errors.Is(err, ErrLayout) {
				t.Fatalf("apply: %v, want ErrLayout", err)
			}
			if !strings.Contains(err.Error(), "g-totals-changelog[3] offset 7") {
				t.Fatalf("error %q does not name the record", err)
			}
			if b.Len() != 0 {
				t.Fatalf("a refused record applied %d writes", b.Len())
			}
			return
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		b.Close()
		if codec.HasHeader(rec, codec.HeaderWatermark) {
			if !codec.IsWatermarkKey(rec.Key) {
				t.Fatalf("a watermark record under key %q was applied", rec.Key)
			}
			wm, ok, err := st.Get(codec.WatermarkNamespace(ns), rec.Key, nil)
			writer := bytes.Count(rec.Key, []byte("/")) == 2 // a writer's mark may carry its idleness in a ninth byte
			if err != nil || !ok || len(wm) != 8 && !(writer && len(wm) == 9) || !bytes.Equal(wm, rec.Value) {
				t.Fatalf("watermark stored %x, %v, %v; record %x", wm, ok, err, rec.Value)
			}
			return
		}
		for _, h := range rec.Headers {
			if h.Key == codec.HeaderLayout && string(h.Value) != fp {
				t.Fatalf("a record of layout %q was applied", h.Value)
			}
		}
		got, ok, err := st.Get(ns, key, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tombstone {
			if ok {
				t.Fatalf("tombstone left state %x", got)
			}
		} else if !ok || len(got) != 10 || !bytes.Equal(got, rec.Value) {
			t.Fatalf("state %x (%v) after applying %x", got, ok, rec.Value)
		}
		_, pending, err := st.Get(codec.PendingNamespace(ns), key, nil)
		if err != nil || pending != codec.HasHeader(rec, codec.HeaderPending) {
			t.Fatalf("pending mark %v, header %v (err %v)", pending, codec.HasHeader(rec, codec.HeaderPending), err)
		}
	})
}
