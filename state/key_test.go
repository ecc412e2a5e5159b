package state

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzKeyLayout checks the key layout's promises for any two (namespace, key) pairs: encoding is
// injective, a namespace's state keys sort as the user keys do and stay inside its state range,
// and no key of one namespace (state or offset) falls in another namespace's state range.
func FuzzKeyLayout(f *testing.F) {
	f.Add("a", int32(1), []byte("k"), "a", int32(10), []byte("k"))
	f.Add("a", int32(1), []byte(""), "ab", int32(1), []byte(""))
	f.Add("a", int32(256), []byte("\x00"), "a", int32(1), []byte("\x00\x00\x00\x01s"))
	f.Add("a\x01", int32(0), []byte("\xff"), "a", int32(0x7fffffff), []byte("\xff\xff"))
	f.Fuzz(func(t *testing.T, op1 string, p1 int32, k1 []byte, op2 string, p2 int32, k2 []byte) {
		ns1, ns2 := Namespace{op1, p1}, Namespace{op2, p2}
		if checkNS(ns1) != nil || checkNS(ns2) != nil {
			return
		}
		s1, s2 := appendStateKey(nil, ns1, k1), appendStateKey(nil, ns2, k2)
		lo1, hi1 := stateBounds(ns1)
		lo2, hi2 := stateBounds(ns2)
		in := func(k, lo, hi []byte) bool { return bytes.Compare(k, lo) >= 0 && bytes.Compare(k, hi) < 0 }
		if !in(s1, lo1, hi1) || !in(s2, lo2, hi2) {
			t.Fatalf("state key outside its own range")
		}
		if in(appendOffsetKey(nil, ns1), lo1, hi1) || in(appendOffsetKey(nil, ns1), lo2, hi2) {
			t.Fatalf("offset key of %s inside a state range", ns1)
		}
		if ns1 == ns2 {
			if got, want := bytes.Compare(s1, s2), bytes.Compare(k1, k2); got != want {
				t.Fatalf("order %d, user keys %d", got, want)
			}
			return
		}
		if bytes.Equal(s1, s2) {
			t.Fatalf("%s %q and %s %q encode alike", ns1, k1, ns2, k2)
		}
		if bytes.Equal(appendOffsetKey(nil, ns1), appendOffsetKey(nil, ns2)) {
			t.Fatalf("offset keys of %s and %s collide", ns1, ns2)
		}
		if in(s1, lo2, hi2) || in(s2, lo1, hi1) {
			t.Fatalf("ranges of %s and %s overlap", ns1, ns2)
		}
	})
}

// FuzzDecodeOffset: any stored bytes decode to a non-negative offset or ErrCorrupt, and valid
// offsets round-trip.
func FuzzDecodeOffset(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 42})
	f.Add([]byte{0xff, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		off, err := decodeOffset(nsA1, b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		if off < 0 || !bytes.Equal(encodeOffset(nil, off), b) {
			t.Fatalf("%x decodes to %d", b, off)
		}
	})
}
