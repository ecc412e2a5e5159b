package configs

import (
	"bytes"
	"errors"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestReferenceUpToDate fails when docs/config.md is not what the code generates.
func TestReferenceUpToDate(t *testing.T) {
	want, err := Reference()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../" + ReferenceFile)
	if err != nil {
		t.Fatalf("%v: generate it with `go generate ./configs`", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is out of date with configs/config.go: regenerate it with `go generate ./configs` (or `go run ./configs/gen -o %s` from the module root)\n%s",
			ReferenceFile, ReferenceFile, firstDiff(string(got), string(want)))
	}
}

// firstDiff shows the first line where got and want differ.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return "line " + strconv.Itoa(i+1) + ":\n  file:      " + gl + "\n  generated: " + wl
		}
	}
	return ""
}

// TestReferenceCoversNewKeys: the keys of windows and watermarks are in the reference.
func TestReferenceCoversNewKeys(t *testing.T) {
	ref, err := Reference()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{
		"sources.<name>.watermark.max_delay", "sources.<name>.watermark.idle_after",
		"operators[].aggregate.window.tumbling", "operators[].aggregate.window.hopping",
		"operators[].aggregate.window.advance", "operators[].aggregate.window.session",
		"operators[].aggregate.window.grace", "operators[].aggregate.emit",
	} {
		if !bytes.Contains(ref, []byte("| `"+k+"` |")) {
			t.Errorf("the reference has no row for %s", k)
		}
	}
}

// probeDoc returns probe as a YAML tree to edit.
func probeDoc(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(probe), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// locate finds the key with this pattern in doc: "<name>" takes the first name, "[]" the first
// list item that has the next key. It returns the mapping holding the key, the key and its
// instance key ("sources.s.topic").
// hasPath reports whether m holds the path segs (list segments "x[]": any item).
func hasPath(m map[string]any, segs []string) bool {
	if len(segs) == 0 {
		return true
	}
	s := strings.TrimSuffix(segs[0], "[]")
	v, ok := m[s]
	if !ok {
		return false
	}
	if len(segs) == 1 {
		return true
	}
	switch x := v.(type) {
	case map[string]any:
		return hasPath(x, segs[1:])
	case []any:
		for _, it := range x {
			if im, ok := it.(map[string]any); ok && hasPath(im, segs[1:]) {
				return true
			}
		}
	}
	return false
}

func locate(t *testing.T, doc map[string]any, pattern string) (map[string]any, string, string) {
	t.Helper()
	segs := strings.Split(pattern, ".")
	cur, key := doc, ""
	for i := 0; i < len(segs); i++ {
		s := segs[i]
		list := strings.HasSuffix(s, "[]")
		s = strings.TrimSuffix(s, "[]")
		key = joinKey(key, s)
		if i == len(segs)-1 {
			return cur, s, key
		}
		next := cur[s]
		switch {
		case list:
			items, _ := next.([]any)
			found := false
			// The first item that sets the whole rest of the path, else the first that has its
			// next segment (the probe may hold two kinds of one operator, e.g. joins).
			for _, whole := range []bool{true, false} {
				for j, item := range items {
					m, ok := item.(map[string]any)
					if ok && m[strings.TrimSuffix(segs[i+1], "[]")] != nil && (!whole || hasPath(m, segs[i+1:])) {
						cur, key, found = m, key+"["+strconv.Itoa(j)+"]", true
						break
					}
				}
				if found {
					break
				}
			}
			if !found {
				t.Fatalf("probe has no item of %s with %s", key, segs[i+1])
			}
		case segs[i+1] == "<name>":
			names := sortedKeys(next.(map[string]any))
			cur = next.(map[string]any)[names[0]].(map[string]any)
			key += "." + names[0]
			i++
		default:
			m, ok := next.(map[string]any)
			if !ok {
				m = map[string]any{}
				cur[s] = m
			}
			cur = m
		}
	}
	t.Fatalf("empty pattern")
	return nil, "", ""
}

func parseDoc(t *testing.T, doc map[string]any) error {
	t.Helper()
	b, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	_, err = parse(b, "", nil, func() (string, error) { return "host", nil })
	return err
}

// TestRequiredTags: every key the reference calls required is one that Load rejects when it
// is left out, with an error naming it.
func TestRequiredTags(t *testing.T) {
	n := 0
	for _, k := range typeKeys(reflect.TypeFor[Config]()) {
		if k.field.Tag.Get("default") != "required" {
			continue
		}
		n++
		doc := probeDoc(t)
		m, name, key := locate(t, doc, k.pattern)
		delete(m, name)
		err := parseDoc(t, doc)
		var ce *Error
		if !errors.As(err, &ce) || ce.Key != key {
			t.Errorf("%s is tagged required, but leaving %s out gives %v", k.pattern, key, err)
		}
	}
	if n < 10 {
		t.Fatalf("only %d required keys found", n)
	}
}

// TestEnumTags: every key's enum tag lists exactly the values Validate accepts.
func TestEnumTags(t *testing.T) {
	n := 0
	for _, k := range typeKeys(reflect.TypeFor[Config]()) {
		enum := k.field.Tag.Get("enum")
		if enum == "" {
			continue
		}
		n++
		for _, v := range strings.Split(enum, ",") {
			doc := probeDoc(t)
			m, name, _ := locate(t, doc, k.pattern)
			m[name] = v
			if err := parseDoc(t, doc); err != nil {
				t.Errorf("%s: enum value %q is rejected: %v", k.pattern, v, err)
			}
		}
		doc := probeDoc(t)
		m, name, key := locate(t, doc, k.pattern)
		m[name] = "no_such_value"
		err := parseDoc(t, doc)
		var ce *Error
		if !errors.As(err, &ce) || ce.Key != key {
			t.Errorf("%s: tagged enum:%q, but a value outside it gives %v (want an error at %s)", k.pattern, enum, err, key)
			continue
		}
		_, allowed, _ := strings.Cut(ce.Msg, "(allowed: ")
		got := strings.Split(strings.TrimSuffix(allowed, ")"), ", ")
		want := strings.Split(enum, ",")
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: tagged enum:%q, but Validate allows %v", k.pattern, enum, got)
		}
	}
	if n < 5 {
		t.Fatalf("only %d enum keys found", n)
	}
}
