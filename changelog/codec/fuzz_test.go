package codec

import (
	"bytes"
	"math"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// FuzzDecoders: no decoder panics on any bytes, and whatever a decoder accepts encodes back to
// the same bytes; IsWatermarkKey agrees with the reference below (the definition it replaced).
func FuzzDecoders(f *testing.F) {
	f.Add([]byte("wm/1/2"))
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 5, 's'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1})
	f.Add([]byte("idle"))
	f.Add([]byte("-9223372036854775808"))
	f.Fuzz(func(t *testing.T, v []byte) {
		if has, timer, st, err := ParseKeyed(v); err == nil {
			if got := AppendKeyed(nil, has, timer, st); !bytes.Equal(got, v) {
				t.Fatalf("AppendKeyed(ParseKeyed(%x)) = %x", v, got)
			}
			if st2, ok := KeyedState(v); !ok || !bytes.Equal(st2, st) {
				t.Fatalf("KeyedState(%x) = %x, %v", v, st2, ok)
			}
		} else if _, ok := KeyedState(v); ok {
			t.Fatalf("KeyedState(%x) ok, ParseKeyed: %v", v, err)
		}
		if wm, ok := ParseWatermark(v); ok && !bytes.Equal(AppendWatermark(nil, wm), v) {
			t.Fatalf("ParseWatermark(%x) does not round-trip", v)
		}
		if wm, idle, ok := ParseWriterMark(v); ok && !bytes.Equal(AppendWriterMark(nil, wm, idle), v) {
			t.Fatalf("ParseWriterMark(%x) does not round-trip", v)
		}
		if at, k, ok := SplitTimerKey(v); ok != (len(v) >= TimerKeySize) || ok && !bytes.Equal(AppendTimerKey(nil, at, k), v) {
			t.Fatalf("SplitTimerKey(%x) = %d, %x, %v", v, at, k, ok)
		}
		if k, start, ok := SplitWindowKey(v); ok != (len(v) >= WindowKeySize) || ok && !bytes.Equal(AppendWindowKey(nil, k, start), v) {
			t.Fatalf("SplitWindowKey(%x) = %x, %d, %v", v, k, start, ok)
		}
		if got, want := IsWatermarkKey(v), referenceIsWatermarkKey(v); got != want {
			t.Fatalf("IsWatermarkKey(%q) = %v, reference %v", v, got, want)
		}
		r := &kgo.Record{Headers: MarkHeaders(v, 0)}
		a, ok := ParseAttribute(r)
		if !ok || a.Writer != "0" || a.HasMode {
			t.Fatalf("ParseAttribute(mark %q) = %+v, %v", v, a, ok)
		}
		if a.Idle != (string(v) == IdleMark) || a.Idle && a.HasWatermark || len(v) == 0 && a.HasWatermark {
			t.Fatalf("ParseAttribute(mark %q) = %+v", v, a)
		}
		r.Headers = []kgo.RecordHeader{{Key: HeaderBacklog, Value: v}, {Key: HeaderWriter, Value: v}}
		if a, ok := ParseAttribute(r); !ok || a.Writer != string(v) || !a.HasMode || a.Backlog != (string(v) == "true") || a.HasWatermark || a.Idle {
			t.Fatalf("ParseAttribute(mode %q) = %+v, %v", v, a, ok)
		}
	})
}

// FuzzWindowKey: a window key splits back into its group key and start; order of keys is
// (group key, start) order for keys of equal group-key length.
func FuzzWindowKey(f *testing.F) {
	f.Add([]byte("c-1"), int64(0))
	f.Add([]byte{}, int64(math.MinInt64))
	f.Add([]byte("\xff"), int64(math.MaxInt64))
	f.Fuzz(func(t *testing.T, key []byte, start int64) {
		wk := AppendWindowKey(nil, key, start)
		k, s, ok := SplitWindowKey(wk)
		if !ok || !bytes.Equal(k, key) || s != start {
			t.Fatalf("SplitWindowKey(AppendWindowKey(%q, %d)) = %q, %d, %v", key, start, k, s, ok)
		}
		other := AppendWindowKey(nil, key, start/2)
		if got, want := bytes.Compare(wk, other), cmpInt(start, start/2); got != want {
			t.Fatalf("key order %d, start order %d", got, want)
		}
		tk := AppendTimerKey(nil, start, key)
		if at, k, ok := SplitTimerKey(tk); !ok || at != start || !bytes.Equal(k, key) {
			t.Fatalf("SplitTimerKey(AppendTimerKey(%d, %q)) = %d, %q, %v", start, key, at, k, ok)
		}
		if got, want := bytes.Compare(tk, AppendTimerKey(nil, start/2, key)), cmpInt(start, start/2); got != want {
			t.Fatalf("timer key order %d, time order %d", got, want)
		}
	})
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// referenceIsWatermarkKey is IsWatermarkKey as changelog defined it before this package.
func referenceIsWatermarkKey(k []byte) bool {
	wmKey := []byte("wm")
	if bytes.Equal(k, wmKey) {
		return true
	}
	rest, ok := bytes.CutPrefix(k, append(slices.Clip(wmKey), '/'))
	if !ok {
		return false
	}
	parts := bytes.Split(rest, []byte{'/'})
	if len(parts) > 2 {
		return false
	}
	for _, p := range parts {
		if len(p) == 0 || len(p) > 4 {
			return false
		}
		for _, c := range p {
			if c < '0' || c > '9' {
				return false
			}
		}
	}
	return true
}
