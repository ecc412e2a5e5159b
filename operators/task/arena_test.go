package task

import (
	"bytes"
	"testing"
)

// TestArenaKeepsNilAndEmptyApart: a copy of an empty key or value is empty, not nil (a nil value
// is a tombstone, a nil key none: a partitioner sends it elsewhere, an aggregate dead-letters
// it), from a fresh arena and after, and a copy of nil is nil; copies are independent of their
// source and of each other.
func TestArenaKeepsNilAndEmptyApart(t *testing.T) {
	var a outArena
	r := a.out("t", -1, []byte{}, []byte{})
	if r.Key == nil || r.Value == nil {
		t.Fatalf("from a fresh arena: key %v (nil %v), value %v (nil %v); want empty, not nil", r.Key, r.Key == nil, r.Value, r.Value == nil)
	}
	if r := a.out("t", -1, nil, nil); r.Key != nil || r.Value != nil {
		t.Fatalf("a copy of nil is not nil: %q %q", r.Key, r.Value)
	}
	src := []byte("abc")
	c1 := a.clone(src)
	c2 := a.clone([]byte("de"))
	src[0] = 'x'
	c1 = append(c1, 'z') // capacity exact: appends to a new array, not over c2
	if !bytes.Equal(c1, []byte("abcz")) || !bytes.Equal(c2, []byte("de")) {
		t.Fatalf("copies not independent: %q %q", c1, c2)
	}
	big := bytes.Repeat([]byte{1}, arenaLargest+1)
	if c := a.clone(big); !bytes.Equal(c, big) || &c[0] == &big[0] {
		t.Fatal("a large slice is not copied")
	}
}
