package main

import (
	"math/big"
	"slices"
	"testing"

	"github.com/valyala/fastjson"
)

func TestRoundHalfEven(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"1/3", "333333333/1000000000"},
		{"2/3", "666666667/1000000000"},
		{"1/2", "1/2"},
		{"5/2000000000", "1/500000000"},   // 0.0000000025 -> 0.000000002 (2 is even)
		{"1/2000000000", "0"},             // 0.0000000005 -> 0 (0 is even)
		{"15/10000000000", "1/500000000"}, // 0.0000000015 -> 0.000000002
		{"-2/3", "-666666667/1000000000"},
		{"7", "7"},
	} {
		x, _ := new(big.Rat).SetString(c.in)
		want, _ := new(big.Rat).SetString(c.want)
		if got := roundHalfEven(x, 9); got.Cmp(want) != 0 {
			t.Errorf("roundHalfEven(%s) = %s, want %s", c.in, got.RatString(), c.want)
		}
	}
}

func TestQuotientMatchesSluiceAverage(t *testing.T) {
	v := fastjson.MustParse(`{"id":10,"final":3333,"final_sum":10000,"final_count":3}`)
	got, err := quotient(v.Get("final_sum"), v.Get("final_count"), 9)
	if err != nil {
		t.Fatal(err)
	}
	want, err := normalize(fastjson.MustParse(`3333.333333333`), num)
	if err != nil || got != want {
		t.Fatalf("quotient = %q, sluice's average %q (%v)", got, want, err)
	}
	tr, _ := normalize(fastjson.MustParse(`3333.333333333`), trunc)
	fl, _ := normalize(v.Get("final"), trunc)
	if tr != fl {
		t.Fatalf("truncated %q, Flink's AVG %q", tr, fl)
	}
}

func TestDiffSortedIsAMultisetDifference(t *testing.T) {
	d := func(rows ...string) []digest {
		out := make([]digest, len(rows))
		for i, r := range rows {
			out[i] = digestOf(r)
		}
		slices.SortFunc(out, digest.cmp)
		return out
	}
	a := d("x", "x", "y", "z")
	b := d("x", "y", "y", "w")
	onlyA, onlyB := diffSorted(a, b)
	if want := d("x", "z"); !slices.Equal(onlyA, want) {
		t.Errorf("a beyond b: %v, want the digests of x and z", onlyA)
	}
	if want := d("y", "w"); !slices.Equal(onlyB, want) {
		t.Errorf("b beyond a: %v, want the digests of y and w", onlyB)
	}
	if onlyA, onlyB := diffSorted(a, d("z", "x", "y", "x")); len(onlyA)+len(onlyB) != 0 {
		t.Errorf("equal multisets differ: %v %v", onlyA, onlyB)
	}
	if digestOf("a"+sep+"b") == digestOf("a"+sep+"c") {
		t.Error("two rows share a digest")
	}
}

func TestDigestedSpecs(t *testing.T) {
	for name, s := range specs {
		want := name != "q9" && name != "q12" && name != "q18" && name != "q19"
		if s.digested() != want {
			t.Errorf("%s digested=%t, want %t (rows in ties or summed compare as strings)", name, s.digested(), want)
		}
	}
}
