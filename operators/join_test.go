package operators

import (
	"errors"
	"testing"

	"github.com/sluice-dev/sluice/configs"
)

type mapRows map[string]string

func (m mapRows) Row(key, dst []byte) ([]byte, bool, error) {
	if string(key) == "boom" {
		return nil, false, errors.New("store failed")
	}
	v, ok := m[string(key)]
	return append(dst, v...), ok, nil
}

func TestJoin(t *testing.T) {
	rows := mapRows{"c1": `{"region":"r-01"}`}
	for _, tc := range []struct {
		typ, key, value string
		keep            bool
		want            string
	}{
		{"inner", "c1", `{"amount":1}`, true, `{"amount":1,"customers":{"region":"r-01"}}`},
		{"inner", "c2", `{"amount":1}`, false, ""},
		{"left", "c2", `{"amount":1}`, true, `{"amount":1,"customers":null}`},
		{"left", "c1", `{}`, true, `{"customers":{"region":"r-01"}}`},
		{"inner", "c1", ` { "customers" : 7 , "a" : "x\"y" } `, true, `{"a":"x\"y","customers":{"region":"r-01"}}`},
	} {
		st, err := NewJoin("enriched", configs.Join{Stream: "orders", Table: "customers", Type: tc.typ}, rows)
		if err != nil {
			t.Fatal(err)
		}
		r := &Record{Key: []byte(tc.key), Value: []byte(tc.value)}
		keep, err := st.Apply(r)
		if err != nil || keep != tc.keep || (keep && string(r.Value) != tc.want) {
			t.Errorf("%s %s %s: keep %v value %s err %v; want keep %v value %s", tc.typ, tc.key, tc.value, keep, r.Value, err, tc.keep, tc.want)
		}
		if keep {
			if raw, ok, _ := r.lookup(newPath("customers.region")); tc.want != `{"amount":1,"customers":null}` && (!ok || string(raw) != `"r-01"`) {
				t.Errorf("customers.region of %s: %s %v", r.Value, raw, ok)
			}
		}
	}
	st, _ := NewJoin("enriched", configs.Join{Table: "customers"}, rows)
	_, err := st.Apply(&Record{Key: []byte("boom"), Value: []byte(`{}`)})
	var rerr *Error
	if err == nil || errors.As(err, &rerr) {
		t.Fatalf("a store failure must be a plain error (a task failure), got %v", err)
	}
	_, err = st.Apply(&Record{Key: []byte("c1"), Value: []byte(`[1]`)})
	if !errors.As(err, &rerr) {
		t.Fatalf("a value that is not an object must be an *Error (a dead letter), got %v", err)
	}
}
