package configs

import (
	"reflect"
	"slices"
	"strings"
)

// envPrefix starts every configuration variable.
const envPrefix = "SLUICE_"

// reservedEnvPrefixes are SLUICE_ variables that are not configuration (test harnesses set
// SLUICE_TEST_KAFKA and SLUICE_REQUIRE_KAFKA in the environment a sluice process inherits).
var reservedEnvPrefixes = []string{"SLUICE_TEST_", "SLUICE_REQUIRE_"}

// envNames maps a dotted config key to the environment variable that set it.
type envNames map[string]string

// culprit names the variable(s) behind an error at key.
func (n envNames) culprit(key string) string {
	var vars []string
	for path, name := range n {
		if path == key || strings.HasPrefix(path, key+".") {
			vars = append(vars, name)
		}
	}
	if len(vars) == 0 {
		return "the environment"
	}
	slices.Sort(vars)
	return "environment variable " + strings.Join(vars, ", ")
}

// environMap turns the SLUICE_ variables of environ into a nested map like the YAML parser
// produces: SLUICE_BACKLOG__ENTER_LAG=10 -> {backlog: {enter_lag: "10"}}. Values of list keys
// are comma-split. Variables are processed in name order, so errors are deterministic.
func environMap(environ []string) (map[string]any, envNames, *Error) {
	out := map[string]any{}
	names := envNames{}
	vars := make([]string, 0, 8)
	for _, kv := range environ {
		if strings.HasPrefix(kv, envPrefix) {
			vars = append(vars, kv)
		}
	}
	slices.Sort(vars)
	for _, kv := range vars {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || slices.ContainsFunc(reservedEnvPrefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
			continue
		}
		parts := strings.Split(strings.ToLower(name[len(envPrefix):]), "__")
		for _, p := range parts {
			if p == "" || p[0] == '_' || p[len(p)-1] == '_' {
				return nil, nil, errorf("", "environment variable %s: malformed name (want SLUICE_ then keys joined by \"__\", e.g. SLUICE_BACKLOG__ENTER_LAG)", name)
			}
		}
		dotted := strings.Join(parts, ".")
		if prev, dup := names[dotted]; dup {
			return nil, nil, errorf(dotted, "set twice, by environment variables %s and %s", prev, name)
		}
		m := out
		for i, p := range parts[:len(parts)-1] {
			sub, exists := m[p]
			if !exists {
				nm := map[string]any{}
				m[p] = nm
				m = nm
				continue
			}
			nm, isMap := sub.(map[string]any)
			if !isMap {
				key := strings.Join(parts[:i+1], ".")
				return nil, nil, errorf(key, "set as a value by environment variable %s and as a section by %s", names[key], name)
			}
			m = nm
		}
		last := parts[len(parts)-1]
		if _, exists := m[last]; exists { // a section, filled by variables sorted before this one
			return nil, nil, errorf(dotted, "set as a value by environment variable %s and as a section by %s", name, names.culpritNames(dotted))
		}
		if t := typeAt(reflect.TypeFor[Config](), parts); t != nil && t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String {
			m[last] = splitList(val)
		} else {
			m[last] = val
		}
		names[dotted] = name
	}
	return out, names, nil
}

// culpritNames lists the variables under key, for conflict messages.
func (n envNames) culpritNames(key string) string {
	return strings.TrimPrefix(n.culprit(key), "environment variable ")
}

// splitList splits a comma-separated list, trimming blanks and dropping empty items.
func splitList(s string) []any {
	out := []any{}
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// typeAt returns the Go type at a key path below t, or nil when the path does not exist.
func typeAt(t reflect.Type, parts []string) reflect.Type {
	for _, p := range parts {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch t.Kind() {
		case reflect.Struct:
			f, ok := fieldByKey(t, p)
			if !ok {
				return nil
			}
			t = f.Type
		case reflect.Map:
			t = t.Elem()
		default:
			return nil
		}
	}
	return t
}

// fieldByKey finds the struct field whose koanf tag is key.
func fieldByKey(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		if f := t.Field(i); f.Tag.Get("koanf") == key {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// structKeys lists the koanf keys of struct t in declaration order.
func structKeys(t reflect.Type) []string {
	keys := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		if k := t.Field(i).Tag.Get("koanf"); k != "" {
			keys = append(keys, k)
		}
	}
	return keys
}
