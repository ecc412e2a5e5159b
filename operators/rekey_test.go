package operators

import (
	"encoding/json"
	"errors"
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
	for _, bad := range []string{"", "a,,b", "a,", "a..b"} {
		if _, err := NewRekey("q", bad); err == nil {
			t.Errorf("NewRekey(%q) accepted", bad)
		}
	}
}
