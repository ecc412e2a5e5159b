package operators

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/configs"
)

func TestRekey(t *testing.T) {
	src, err := NewSource("bids", configs.Source{Topic: "bids"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		spec, value, want, err string
	}{
		{spec: "bidder", value: `{"bidder":7}`, want: `7`},
		{spec: "region", value: `{"region":"EU"}`, want: `EU`},
		{spec: "region", value: `{"region":"E\"U"}`, want: `E"U`},
		{spec: "c.region", value: `{"c":{"region":"EU"}}`, want: `EU`},
		{spec: "bidder, auction", value: `{"auction":1001,"bidder":7}`, want: `{"bidder":7,"auction":1001}`},
		{spec: "bidder,c.region", value: `{"bidder":-7,"c":{"region":"E\"U"}}`, want: `{"bidder":-7,"c.region":"E\"U"}`},
		{spec: "bidder, auction", value: `{"bidder":7}`, err: `group_by field "auction" missing`},
		{spec: "bidder, auction", value: `{"bidder":7,"auction":[1]}`, err: `group_by field "auction" is an array, want a string or a number`},
		{spec: "bidder", value: `{"bidder":null}`, err: `group_by field "bidder" is null, want a string or a number`},
		// Expressions as key columns: a composite key's member is the value as a field holding
		// it gives; alone, the value is the key as rekey.expr's.
		{spec: "auction, day: date_format(dateTime, 'yyyy-MM-dd')", value: `{"auction":1001,"dateTime":1436918400001}`,
			want: `{"auction":1001,"day":"2015-07-15"}`},
		{spec: "w: dateTime - dateTime % 10000, auction", value: `{"auction":"a\"1","dateTime":1436918412345}`,
			want: `{"w":1436918410000,"auction":"a\"1"}`},
		{spec: "p: price * 0.908, s: lower(name) + \"\\\"\"", value: `{"price":10,"name":"AB"}`, want: `{"p":9.08,"s":"ab\""}`},
		{spec: "day: date_format(dateTime, 'yyyy-MM-dd')", value: `{"dateTime":1436918400001}`, want: `2015-07-15`},
		{spec: "auction, day: date_format(dateTime, 'yyyy-MM-dd')", value: `{"auction":1}`,
			err: `group_by day: the key is null (a member it reads is missing or null)`},
		{spec: "auction, ok: price > 1", value: `{"auction":1,"price":2}`, err: `group_by ok: the key is bool, want a string or a number`},
		{spec: "day: date_format(dateTime, 'yyyy-MM-dd')", value: `{"x":1}`,
			err: `group_by day: the key is null (a member it reads is missing or null)`},
	} {
		k, err := NewRekey("q", tc.spec)
		if err != nil {
			t.Fatalf("NewRekey(%q): %v", tc.spec, err)
		}
		var r Record
		if err := src.Decode([]byte("k"), []byte(tc.value), 0, &r); err != nil {
			t.Fatalf("Decode(%s): %v", tc.value, err)
		}
		got, err := k.Key(&r)
		var oe *Error
		switch {
		case tc.err != "":
			if !errors.As(err, &oe) || oe.Reason != tc.err {
				t.Errorf("Key(%s) by %q: error %v, want a dead letter %q", tc.value, tc.spec, err, tc.err)
			}
			continue
		case err != nil:
			t.Errorf("Key(%s) by %q: %v", tc.value, tc.spec, err)
			continue
		}
		if string(got) != tc.want {
			t.Errorf("Key(%s) by %q = %s, want %s", tc.value, tc.spec, got, tc.want)
		}
		if len(k.paths) > 1 && !json.Valid(got) {
			t.Errorf("composite key %s is not JSON", got)
		}
	}
	for _, bad := range []string{"", "a,,b", "a,", "a..b", "a, day: date_format(", "a, b: c +"} {
		if _, err := NewRekey("q", bad); err == nil {
			t.Errorf("NewRekey(%q) accepted", bad)
		}
	}
	// Members: the paths' top members, then what the expressions read; nil when one reads the
	// event time.
	for spec, want := range map[string][]string{
		"bid.auction, day: date_format(dateTime, 'yyyy-MM-dd')":   {"bid", "dateTime"},
		"w: dateTime - dateTime % 10000, auction, n: auction + 1": {"auction", "dateTime"},
		"auction, t: ts - ts % 1000":                              nil,
	} {
		k, err := NewRekey("q", spec)
		if err != nil {
			t.Fatalf("NewRekey(%q): %v", spec, err)
		}
		got := k.Members()
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%q: Members() = %q, want %q", spec, got, want)
		}
	}
}

// TestRekeyExpr: a rekey by an expression keys a record by the expression's value (an int's
// digits, an exact decimal's shortest form, a string as it is); null, a bool or a failing
// expression is a dead letter; Members names what the key reads, nil when it reads the time.
func TestRekeyExpr(t *testing.T) {
	src, err := NewSource("bids", configs.Source{Topic: "bids"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		expr, value, want, err string
		members                []string
	}{
		{expr: "dateTime - dateTime % 10000", value: `{"dateTime":1436918401234}`, want: `1436918400000`, members: []string{"dateTime"}},
		{expr: "auction % 10000", value: `{"auction":1023456}`, want: `3456`, members: []string{"auction"}},
		{expr: "lower(region)", value: `{"region":"E\"U"}`, want: `e"u`, members: []string{"region"}},
		{expr: "price * 0.5", value: `{"price":3}`, want: `1.5`, members: []string{"price"}},
		{expr: "c.region + '/' + key", value: `{"c":{"region":"EU"}}`, want: `EU/k`, members: []string{"c"}},
		{expr: "ts - ts % 1000", value: `{}`, want: `1436918401000`},
		{expr: "missing", value: `{"a":1}`, err: "expr: the key is null (a member it reads is missing or null)", members: []string{"missing"}},
		{expr: "price > 3", value: `{"price":5}`, err: "expr: the key is bool, want a string or a number", members: []string{"price"}},
		{expr: "price / 0", value: `{"price":5}`, err: "expr: division by zero", members: []string{"price"}},
	} {
		k, err := NewRekeyExpr("q", tc.expr)
		if err != nil {
			t.Fatalf("NewRekeyExpr(%q): %v", tc.expr, err)
		}
		if got := k.Members(); !slices.Equal(got, tc.members) {
			t.Errorf("%q: Members() = %q, want %q", tc.expr, got, tc.members)
		}
		var r Record
		if err := src.Decode([]byte("k"), []byte(tc.value), 1436918401234, &r); err != nil {
			t.Fatalf("Decode(%s): %v", tc.value, err)
		}
		got, err := k.Key(&r)
		var oe *Error
		switch {
		case tc.err != "":
			if !errors.As(err, &oe) || !strings.Contains(oe.Reason, tc.err) {
				t.Errorf("Key(%s) by %q: error %v, want a dead letter %q", tc.value, tc.expr, err, tc.err)
			}
			continue
		case err != nil:
			t.Errorf("Key(%s) by %q: %v", tc.value, tc.expr, err)
			continue
		}
		if string(got) != tc.want {
			t.Errorf("Key(%s) by %q = %s, want %s", tc.value, tc.expr, got, tc.want)
		}
	}
	for _, bad := range []string{"", " ", "a ><", "nosuchfn(a)"} {
		if _, err := NewRekeyExpr("q", bad); err == nil {
			t.Errorf("NewRekeyExpr(%q) accepted", bad)
		}
	}
}
