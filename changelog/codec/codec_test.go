package codec

import (
	"bytes"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/state"
)

// The header keys and values are a user contract (consumers of sinks and dead-letter topics
// read them) and a persistent format (changelog topics): the expected strings are written out
// here, not taken from the constants.
func TestHeaderKeys(t *testing.T) {
	for got, want := range map[string]string{
		HeaderLayout:            "sluice.layout",
		HeaderPending:           "sluice.pending",
		HeaderWatermark:         "sluice.watermark",
		HeaderBacklog:           "sluice.backlog",
		HeaderWriter:            "sluice.writer",
		HeaderPartial:           "sluice.partial",
		IdleMark:                "idle",
		HeaderError:             "sluice.error",
		HeaderOperator:          "sluice.operator",
		HeaderSourceTopic:       "sluice.source.topic",
		HeaderSourcePartition:   "sluice.source.partition",
		HeaderSourceOffset:      "sluice.source.offset",
		HeaderSourceTimestamp:   "sluice.source.timestamp",
		HeaderOriginalKeySize:   "sluice.original.key.size",
		HeaderOriginalValueSize: "sluice.original.value.size",
		HeaderDestinationTopic:  "sluice.destination.topic",
	} {
		if got != want {
			t.Errorf("header %q, want %q", got, want)
		}
	}
}

func TestNamespaces(t *testing.T) {
	ns := state.Namespace{Operator: "totals", Partition: 3}
	for _, tc := range []struct {
		got  state.Namespace
		want string
	}{
		{PendingNamespace(ns), "totals#pending"},
		{WatermarkNamespace(ns), "totals#watermark"},
		{TimerNamespace(ns), "totals#timers"},
		{LayoutNamespace(ns), "totals#layout"},
		{TableNamespace("users", 3), "users#table"},
	} {
		if tc.got != (state.Namespace{Operator: tc.want, Partition: 3}) {
			t.Errorf("namespace %+v, want %s partition 3", tc.got, tc.want)
		}
	}
	if !IsPendingNamespace(PendingNamespace(ns)) || IsPendingNamespace(ns) || IsPendingNamespace(WatermarkNamespace(ns)) {
		t.Error("IsPendingNamespace")
	}
	for op, want := range map[string]bool{"totals": true, "totals#layout": true, "totals#pending": true, "totalsx": false, "total": false, "x#totals": false} {
		if got := OwnedBy(state.Namespace{Operator: op}, "totals"); got != want {
			t.Errorf("OwnedBy(%s, totals) = %v", op, got)
		}
	}
	if string(LayoutFingerprintKey) != "fingerprint" || string(LayoutTextKey) != "text" {
		t.Errorf("layout keys %q, %q", LayoutFingerprintKey, LayoutTextKey)
	}
}

func TestWatermarkKeys(t *testing.T) {
	if string(WatermarkKey) != "wm" || string(InputWatermarkKey(3)) != "wm/3" || string(WriterWatermarkKey(1, 12)) != "wm/1/12" {
		t.Fatalf("keys %q %q %q", WatermarkKey, InputWatermarkKey(3), WriterWatermarkKey(1, 12))
	}
	for k, want := range map[string]bool{
		"wm": true, "wm/0": true, "wm/12": true, "wm/0/3": true, "wm/1/9999": true,
		"": false, "w": false, "wm/": false, "wm/a": false, "wm/0/": false, "wm//1": false,
		"wm/0/1/2": false, "wm/12345": false, "wm/0/12345": false, "wmx": false, "xwm/0": false,
	} {
		if got := IsWatermarkKey([]byte(k)); got != want {
			t.Errorf("IsWatermarkKey(%q) = %v", k, got)
		}
		if got := IsWriterWatermarkKey([]byte(k)); got != (want && bytes.Count([]byte(k), []byte("/")) == 2) {
			t.Errorf("IsWriterWatermarkKey(%q) = %v", k, got)
		}
	}
	for _, k := range [][]byte{WatermarkKey, InputWatermarkKey(0), InputWatermarkKey(9999), WriterWatermarkKey(0, 0), WriterWatermarkKey(9999, 9999)} {
		if !IsWatermarkKey(k) {
			t.Errorf("IsWatermarkKey(%q) = false", k)
		}
	}
}

func TestTimerAndWindowKeys(t *testing.T) {
	for _, tc := range []struct {
		at   int64
		key  string
		want []byte
	}{
		{0, "k", []byte{0x80, 0, 0, 0, 0, 0, 0, 0, 'k'}},
		{-1, "", []byte{0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
		{math.MinInt64, "ab", []byte{0, 0, 0, 0, 0, 0, 0, 0, 'a', 'b'}},
		{258, "x", []byte{0x80, 0, 0, 0, 0, 0, 1, 2, 'x'}},
	} {
		tk := AppendTimerKey(nil, tc.at, []byte(tc.key))
		if !bytes.Equal(tk, tc.want) {
			t.Errorf("AppendTimerKey(%d, %q) = %x, want %x", tc.at, tc.key, tk, tc.want)
		}
		if at, k, ok := SplitTimerKey(tk); !ok || at != tc.at || string(k) != tc.key {
			t.Errorf("SplitTimerKey(%x) = %d, %q, %v", tk, at, k, ok)
		}
		// A window key is the same 8 bytes after the key.
		wk := AppendWindowKey(nil, []byte(tc.key), tc.at)
		if want := append([]byte(tc.key), tc.want[:8]...); !bytes.Equal(wk, want) {
			t.Errorf("AppendWindowKey(%q, %d) = %x, want %x", tc.key, tc.at, wk, want)
		}
		if k, start, ok := SplitWindowKey(wk); !ok || start != tc.at || string(k) != tc.key {
			t.Errorf("SplitWindowKey(%x) = %q, %d, %v", wk, k, start, ok)
		}
	}
	if _, _, ok := SplitTimerKey(make([]byte, 7)); ok {
		t.Error("SplitTimerKey of 7 bytes ok")
	}
	if _, _, ok := SplitWindowKey(make([]byte, 7)); ok {
		t.Error("SplitWindowKey of 7 bytes ok")
	}
	// Byte order is time order.
	if bytes.Compare(AppendTimerKey(nil, -5, []byte("z")), AppendTimerKey(nil, 3, []byte("a"))) >= 0 {
		t.Error("timer keys out of time order")
	}
}

func TestKeyedValue(t *testing.T) {
	v := AppendKeyed([]byte("x"), true, 5, []byte("st"))
	if want := []byte{'x', 1, 0, 0, 0, 0, 0, 0, 0, 5, 's', 't'}; !bytes.Equal(v, want) {
		t.Fatalf("AppendKeyed = %x, want %x", v, want)
	}
	has, timer, st, err := ParseKeyed(v[1:])
	if err != nil || !has || timer != 5 || string(st) != "st" {
		t.Fatalf("ParseKeyed = %v %d %q %v", has, timer, st, err)
	}
	// Without a timer the time is kept as given (a stale one, byte for byte).
	v = AppendKeyed(nil, false, -2, nil)
	if want := []byte{0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe}; !bytes.Equal(v, want) {
		t.Fatalf("AppendKeyed = %x, want %x", v, want)
	}
	if has, timer, st, err := ParseKeyed(v); err != nil || has || timer != -2 || len(st) != 0 {
		t.Fatalf("ParseKeyed = %v %d %q %v", has, timer, st, err)
	}
	if st, ok := KeyedState(AppendKeyed(nil, true, 1, []byte("abc"))); !ok || string(st) != "abc" {
		t.Fatalf("KeyedState = %q, %v", st, ok)
	}
	for _, bad := range [][]byte{nil, {1, 0, 0, 0, 0, 0, 0, 0}, {2, 0, 0, 0, 0, 0, 0, 0, 0}} {
		if _, _, _, err := ParseKeyed(bad); !errors.Is(err, state.ErrCorrupt) {
			t.Errorf("ParseKeyed(%x) err = %v", bad, err)
		}
		if _, ok := KeyedState(bad); ok {
			t.Errorf("KeyedState(%x) ok", bad)
		}
	}
}

func TestWatermarkValues(t *testing.T) {
	v := AppendWatermark(nil, 0x0102030405060708)
	if want := []byte{1, 2, 3, 4, 5, 6, 7, 8}; !bytes.Equal(v, want) {
		t.Fatalf("AppendWatermark = %x", v)
	}
	if wm, ok := ParseWatermark(v); !ok || wm != 0x0102030405060708 {
		t.Fatalf("ParseWatermark = %d, %v", wm, ok)
	}
	if _, ok := ParseWatermark(append(v, 1)); ok {
		t.Fatal("ParseWatermark of 9 bytes ok")
	}
	for _, tc := range []struct {
		wm   int64
		idle bool
		want []byte
	}{
		{math.MinInt64, false, []byte{0x80, 0, 0, 0, 0, 0, 0, 0}},
		{-1, true, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1}},
	} {
		v := AppendWriterMark(nil, tc.wm, tc.idle)
		if !bytes.Equal(v, tc.want) {
			t.Errorf("AppendWriterMark(%d, %v) = %x, want %x", tc.wm, tc.idle, v, tc.want)
		}
		if wm, idle, ok := ParseWriterMark(v); !ok || wm != tc.wm || idle != tc.idle {
			t.Errorf("ParseWriterMark(%x) = %d, %v, %v", v, wm, idle, ok)
		}
	}
	for _, bad := range [][]byte{nil, make([]byte, 7), {0, 0, 0, 0, 0, 0, 0, 0, 2}, make([]byte, 10)} {
		if _, _, ok := ParseWriterMark(bad); ok {
			t.Errorf("ParseWriterMark(%x) ok", bad)
		}
	}
}

func TestChangelogHeaders(t *testing.T) {
	plain, pending := ChangelogHeaders("0123456789abcdef")
	wantPlain := []kgo.RecordHeader{{Key: "sluice.layout", Value: []byte("0123456789abcdef")}}
	wantPending := []kgo.RecordHeader{{Key: "sluice.pending", Value: []byte("1")}, wantPlain[0]}
	if !equalHeaders(plain, wantPlain) || !equalHeaders(pending, wantPending) {
		t.Fatalf("ChangelogHeaders = %v, %v", plain, pending)
	}
	wm := &kgo.Record{Key: WatermarkKey, Value: AppendWatermark(nil, 1), Headers: WatermarkRecordHeaders()}
	if !equalHeaders(wm.Headers, []kgo.RecordHeader{{Key: "sluice.watermark", Value: []byte{}}}) || !IsWatermarkRecord(wm) || IsPendingRecord(wm) {
		t.Fatalf("watermark record headers %v", wm.Headers)
	}
	if !IsPendingRecord(&kgo.Record{Headers: pending}) || IsPendingRecord(&kgo.Record{Headers: plain}) || IsWatermarkRecord(&kgo.Record{Headers: pending}) {
		t.Fatal("IsPendingRecord / IsWatermarkRecord")
	}
	for _, tc := range []struct {
		key, val string
		want     bool
	}{
		{"wm", "12345678", true},
		{"wm/1", "12345678", true},
		{"wm/1/2", "12345678", true},
		{"wm/1/2", "123456789", true},
		{"wm", "123456789", false},
		{"wm/1", "123456789", false},
		{"wm", "1234567", false},
		{"c-1", "12345678", false},
	} {
		if got := ValidWatermarkRecord([]byte(tc.key), []byte(tc.val)); got != tc.want {
			t.Errorf("ValidWatermarkRecord(%q, %d bytes) = %v", tc.key, len(tc.val), got)
		}
	}
}

func TestPartialHeaders(t *testing.T) {
	h := PartialHeaders("fp-1")
	if len(h) != 1 || h[0].Key != "sluice.partial" || string(h[0].Value) != "fp-1" {
		t.Fatalf("PartialHeaders = %v", h)
	}
	plain, _ := ChangelogHeaders("x")
	if fp, ok := PartialOf(append(plain, h...)); !ok || fp != "fp-1" {
		t.Errorf("PartialOf = %q, %v; want fp-1, true", fp, ok)
	}
	if _, ok := PartialOf(plain[:1]); ok {
		t.Errorf("PartialOf a changelog record's headers: ok")
	}
}

func TestAttributes(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    *kgo.Record
		ok   bool
		want Attribute
	}{
		{"backlog", &kgo.Record{Headers: ModeHeaders(true, 7)}, true, Attribute{Writer: "7", HasMode: true, Backlog: true}},
		{"real-time", &kgo.Record{Headers: ModeHeaders(false, 0)}, true, Attribute{Writer: "0", HasMode: true}},
		{"watermark", &kgo.Record{Headers: MarkHeaders(AppendMark(nil, -42), 3)}, true, Attribute{Writer: "3", HasWatermark: true, Watermark: -42}},
		{"idle", &kgo.Record{Headers: MarkHeaders([]byte(IdleMark), 3)}, true, Attribute{Writer: "3", Idle: true}},
		{"bad mark", &kgo.Record{Headers: MarkHeaders([]byte("soon"), 3)}, true, Attribute{Writer: "3"}},
		{"other mode", &kgo.Record{Headers: []kgo.RecordHeader{{Key: "sluice.backlog", Value: []byte("maybe")}, {Key: "sluice.writer", Value: []byte("x")}}}, true, Attribute{Writer: "x", HasMode: true}},
		{"with key", &kgo.Record{Key: []byte{}, Headers: ModeHeaders(true, 1)}, false, Attribute{}},
		{"with value", &kgo.Record{Value: []byte{}, Headers: ModeHeaders(true, 1)}, false, Attribute{}},
		{"no writer", &kgo.Record{Headers: ModeHeaders(true, 1)[:1]}, false, Attribute{}},
		{"writer only", &kgo.Record{Headers: ModeHeaders(true, 1)[1:]}, false, Attribute{}},
	} {
		got, ok := ParseAttribute(tc.r)
		if ok != tc.ok || got != tc.want {
			t.Errorf("%s: ParseAttribute = %+v, %v; want %+v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
	hs := ModeHeaders(true, 12)
	if !equalHeaders(hs, []kgo.RecordHeader{{Key: "sluice.backlog", Value: []byte("true")}, {Key: "sluice.writer", Value: []byte("12")}}) {
		t.Errorf("ModeHeaders = %v", hs)
	}
	a := Attribute{Writer: "12"}
	if i, ok := a.WriterIndex(); !ok || i != 12 {
		t.Errorf("WriterIndex = %d, %v", i, ok)
	}
	a.Writer = "w"
	if _, ok := a.WriterIndex(); ok {
		t.Error("WriterIndex of w ok")
	}
}

func TestDeadLetterHeaders(t *testing.T) {
	src := &kgo.Record{Topic: "orders", Partition: 2, Offset: 99, Timestamp: time.UnixMilli(1700000000123)}
	hs := AppendDeadLetterHeaders(nil, "bad json", "totals", src)
	hs = AppendOriginalSizes(hs, 10, 2000000)
	hs = append(hs, LateHeader(-5))
	want := []kgo.RecordHeader{
		{Key: "sluice.error", Value: []byte("bad json")},
		{Key: "sluice.operator", Value: []byte("totals")},
		{Key: "sluice.source.topic", Value: []byte("orders")},
		{Key: "sluice.source.partition", Value: []byte("2")},
		{Key: "sluice.source.offset", Value: []byte("99")},
		{Key: "sluice.source.timestamp", Value: []byte("1700000000123")},
		{Key: "sluice.original.key.size", Value: []byte("10")},
		{Key: "sluice.original.value.size", Value: []byte("2000000")},
		{Key: "sluice.watermark", Value: []byte("-5")},
	}
	if !equalHeaders(hs, want) {
		t.Fatalf("dead-letter headers\n got %v\nwant %v", hs, want)
	}
	if topic, part, off := DeadLetterSource(hs); topic != "orders" || part != "2" || off != "99" {
		t.Fatalf("DeadLetterSource = %s %s %s", topic, part, off)
	}
	if topic, part, off := DeadLetterSource(nil); topic != "" || part != "" || off != "" {
		t.Fatalf("DeadLetterSource(nil) = %s %s %s", topic, part, off)
	}
	hs = AppendTooLargeHeaders(nil, "too large", "produce out", "out")
	want = []kgo.RecordHeader{
		{Key: "sluice.error", Value: []byte("too large")},
		{Key: "sluice.operator", Value: []byte("produce out")},
		{Key: "sluice.destination.topic", Value: []byte("out")},
	}
	if !equalHeaders(hs, want) {
		t.Fatalf("too-large headers %v", hs)
	}
	r := &kgo.Record{Headers: []kgo.RecordHeader{{Key: "a"}, {Key: "b", Value: []byte("1")}, {Key: "b", Value: []byte("2")}}}
	if !HasHeader(r, "a") || Header(r, "a") != nil || string(Header(r, "b")) != "1" || HasHeader(r, "c") {
		t.Fatal("Header / HasHeader")
	}
}

// equalHeaders reports whether a and b hold the same headers in the same order.
func equalHeaders(a, b []kgo.RecordHeader) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Key != b[i].Key || !bytes.Equal(a[i].Value, b[i].Value) {
			return false
		}
	}
	return true
}
