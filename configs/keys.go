package configs

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// The keys of a configuration, found by walking the Config struct: over its types for the
// reference (docs/config.md), over a loaded value for `sluice validate --explain`. Both name a
// key by its pattern: dotted koanf keys, "<name>" for the names of a mapping of sections
// (sources.<name>.topic) and "[]" after a list of sections (operators[].name).

// keyKind says how a key holds its value.
type keyKind int

const (
	leafKey    keyKind = iota // a value: string, number, duration, size, list of strings, free mapping
	sectionKey                // a mapping of fixed keys: a struct
	namedKey                  // a mapping of user-chosen names to sections: map[string]struct
	listKey                   // a list of sections: []struct
)

// classify returns how a field of type t holds its value, and for sections the struct type.
func classify(t reflect.Type) (keyKind, reflect.Type) {
	t = deref(t)
	switch {
	case t.Kind() == reflect.Struct:
		return sectionKey, t
	case t.Kind() == reflect.Map && deref(t.Elem()).Kind() == reflect.Struct:
		return namedKey, deref(t.Elem())
	case t.Kind() == reflect.Slice && deref(t.Elem()).Kind() == reflect.Struct:
		return listKey, deref(t.Elem())
	}
	return leafKey, t
}

func deref(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// typeKey is one key of the Config type, in declaration order, parents before children.
type typeKey struct {
	pattern string              // "sources.<name>.watermark.max_delay"
	field   reflect.StructField // the struct field that declares it (tags: koanf, doc, default, enum, secret)
	kind    keyKind
	inList  bool // under a list of sections: the environment cannot set it
}

// typeKeys lists every key of struct type t, sections and leaves.
func typeKeys(t reflect.Type) []typeKey {
	var out []typeKey
	var walk func(t reflect.Type, prefix string, inList bool)
	walk = func(t reflect.Type, prefix string, inList bool) {
		for i := range t.NumField() {
			f := t.Field(i)
			name := f.Tag.Get("koanf")
			if name == "" {
				continue
			}
			kind, st := classify(f.Type)
			k := typeKey{pattern: joinKey(prefix, name), field: f, kind: kind, inList: inList}
			out = append(out, k)
			switch kind {
			case sectionKey:
				walk(st, k.pattern, inList)
			case namedKey:
				walk(st, k.pattern+".<name>", inList)
			case listKey:
				walk(st, k.pattern+"[]", true)
			}
		}
	}
	walk(t, "", false)
	return out
}

// valueKey is one leaf key of a configuration value.
type valueKey struct {
	key     string // "sources.orders.topic", "operators[2].aggregate.window.tumbling"
	segs    []any  // the path: string keys and int list indexes
	pattern string // "sources.<name>.topic", "operators[].aggregate.window.tumbling"
	value   reflect.Value
	field   reflect.StructField
}

// valueKeys lists the leaf keys of struct value v: sections in field order, names sorted, list
// items in order. Unset optional sections (nil pointers) have no keys.
func valueKeys(v reflect.Value) []valueKey {
	var out []valueKey
	var walk func(v reflect.Value, key, pattern string, segs []any)
	walk = func(v reflect.Value, key, pattern string, segs []any) {
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			name := f.Tag.Get("koanf")
			if name == "" {
				continue
			}
			fv := v.Field(i)
			for fv.Kind() == reflect.Pointer {
				if fv.IsNil() {
					break
				}
				fv = fv.Elem()
			}
			if fv.Kind() == reflect.Pointer {
				continue // an optional section left out
			}
			fkey, fpat, fsegs := joinKey(key, name), joinKey(pattern, name), appendSeg(segs, name)
			switch kind, _ := classify(f.Type); kind {
			case leafKey:
				out = append(out, valueKey{key: fkey, segs: fsegs, pattern: fpat, value: fv, field: f})
			case sectionKey:
				walk(fv, fkey, fpat, fsegs)
			case namedKey:
				for _, n := range sortedMapKeys(fv) {
					walk(reflect.Indirect(fv.MapIndex(reflect.ValueOf(n))), fkey+"."+n, fpat+".<name>", appendSeg(fsegs, n))
				}
			case listKey:
				for j := range fv.Len() {
					walk(reflect.Indirect(fv.Index(j)), fkey+"["+strconv.Itoa(j)+"]", fpat+"[]", appendSeg(fsegs, j))
				}
			}
		}
	}
	walk(v, "", "", nil)
	return out
}

func appendSeg(segs []any, s any) []any {
	return append(segs[:len(segs):len(segs)], s)
}

// sortedMapKeys returns the string keys of map value m in order.
func sortedMapKeys(m reflect.Value) []string {
	keys := make([]string, 0, m.Len())
	for _, k := range m.MapKeys() {
		keys = append(keys, k.String())
	}
	slices.Sort(keys)
	return keys
}

// secretWords mark a key as a secret when an element of its name contains one of them.
var secretWords = []string{"password", "passwd", "passphrase", "secret", "token", "sasl", "key_file", "private_key", "credential", "api_key"}

// secretPattern reports whether the key with this pattern holds a secret by its name: an
// element of the pattern (the key's own name or a section it is in) contains one of
// secretWords. User-chosen names (<name>) never make a key secret.
func secretPattern(pattern string) bool {
	for _, el := range strings.Split(pattern, ".") {
		el = strings.ToLower(strings.TrimSuffix(el, "[]"))
		if el == "<name>" {
			continue
		}
		for _, w := range secretWords {
			if strings.Contains(el, w) {
				return true
			}
		}
	}
	return false
}

// secretKeys returns the patterns of the keys of struct type t that hold secrets: leaves
// matched by secretPattern, and every leaf under a section tagged secret:"true" or matched.
func secretKeys(t reflect.Type) map[string]bool {
	out := map[string]bool{}
	tagged := map[string]bool{}
	for _, k := range typeKeys(t) {
		parent := parentPattern(k.pattern)
		secret := secretPattern(k.pattern) || k.field.Tag.Get("secret") == "true" || tagged[parent]
		if secret {
			tagged[k.pattern] = true
			if k.kind == namedKey {
				tagged[k.pattern+".<name>"] = true
			}
			if k.kind == listKey {
				tagged[k.pattern+"[]"] = true
			}
			if k.kind == leafKey {
				out[k.pattern] = true
			}
		}
	}
	return out
}

// parentPattern returns the pattern of the section holding key pattern p ("" at the top).
func parentPattern(p string) string {
	i := strings.LastIndex(p, ".")
	if i < 0 {
		return ""
	}
	return p[:i]
}
