package configs

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The raw maps from the YAML parser and from the environment are checked against the Config
// struct before koanf decodes them: unknown keys and values of the wrong shape become *Error
// with the full key, and leaf values are converted to their final Go types (durations, sizes,
// integers), so the decoder's own conversions never decide anything and never fail.

var (
	durationType = reflect.TypeFor[time.Duration]()
	sizeType     = reflect.TypeFor[Size]()
)

const durationHelp = "a duration like 100ms, 5s, 2m or 1h30m"

// normalizeStruct checks map m against struct type t and converts its values in place.
func normalizeStruct(path string, m map[string]any, t reflect.Type) *Error {
	allowed := structKeys(t)
	for _, k := range sortedKeys(m) {
		if !slices.Contains(allowed, k) {
			return unknownKey(joinKey(path, k), k, allowed)
		}
	}
	for _, k := range allowed {
		v, ok := m[k]
		if !ok {
			continue
		}
		f, _ := fieldByKey(t, k)
		if _, isString := v.(string); !isString && f.Tag.Get("secret") == "true" && f.Type.Kind() == reflect.String {
			// A secret is taken as written only: YAML would turn 0x1F into 31. And the message
			// does not describe the value.
			return errorf(joinKey(path, k), "expected a string: quote it (the value is not shown: the key is secret)")
		}
		nv, err := normalize(joinKey(path, k), v, f.Type)
		if err != nil {
			return err
		}
		m[k] = nv
	}
	return nil
}

// normalize checks one raw value against Go type t and returns it converted.
// A nil (YAML null, empty value) is left alone: the key keeps its default.
func normalize(path string, v any, t reflect.Type) (any, *Error) {
	if v == nil {
		return nil, nil
	}
	switch t {
	case durationType:
		return normDuration(path, v)
	case sizeType:
		return normSize(path, v)
	}
	switch t.Kind() {
	case reflect.String:
		switch x := v.(type) {
		case string:
			return x, nil
		case int, int64, uint64:
			return fmt.Sprint(x), nil
		}
		return nil, errorf(path, "expected a string, got %s (quote it)", describe(v))
	case reflect.Int, reflect.Int16, reflect.Int64:
		return normInt(path, v, t.Bits())
	case reflect.Bool:
		return normBool(path, v)
	case reflect.Pointer:
		return normalize(path, v, t.Elem())
	case reflect.Interface:
		return v, nil
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return nil, errorf(path, "expected a mapping of keys (%s), got %s", strings.Join(structKeys(t), ", "), describe(v))
		}
		return m, normalizeStruct(path, m, t)
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			return nil, errorf(path, "expected a mapping, got %s", describe(v))
		}
		for _, k := range sortedKeys(m) {
			nv, err := normalize(joinKey(path, k), m[k], t.Elem())
			if err != nil {
				return nil, err
			}
			m[k] = nv
		}
		return m, nil
	case reflect.Slice:
		var list []any
		switch x := v.(type) {
		case []any:
			list = x
		case string:
			if t.Elem().Kind() != reflect.String {
				return nil, errorf(path, "expected a list, got %s", describe(v))
			}
			list = []any{x} // a single item without brackets
		default:
			return nil, errorf(path, "expected a list, got %s", describe(v))
		}
		for i, item := range list {
			itemPath := fmt.Sprintf("%s[%d]", path, i)
			if item == nil {
				return nil, errorf(itemPath, "empty list item")
			}
			nv, err := normalize(itemPath, item, t.Elem())
			if err != nil {
				return nil, err
			}
			list[i] = nv
		}
		return list, nil
	}
	return nil, errorf(path, "unsupported type %s (a bug in configs)", t)
}

func normDuration(path string, v any) (any, *Error) {
	switch x := v.(type) {
	case string:
		d, err := time.ParseDuration(strings.TrimSpace(x))
		if err != nil {
			return nil, errorf(path, "invalid duration %q (want %s)", x, durationHelp)
		}
		return d, nil
	case int:
		if x == 0 {
			return time.Duration(0), nil
		}
		return nil, errorf(path, "%d has no unit (want %s)", x, durationHelp)
	}
	return nil, errorf(path, "expected %s, got %s", durationHelp, describe(v))
}

func normSize(path string, v any) (any, *Error) {
	switch x := v.(type) {
	case string:
		s, err := parseSize(x)
		if err != nil {
			return nil, errorf(path, "%v", err)
		}
		return s, nil
	case int:
		if x < 0 {
			return nil, errorf(path, "negative size %d", x)
		}
		return Size(x), nil
	case uint64:
		return nil, errorf(path, "size %d is too large", x)
	}
	return nil, errorf(path, "expected %s, got %s", sizeHelp, describe(v))
}

// normBool accepts a YAML boolean, or the text true or false (the environment's values are text).
func normBool(path string, v any) (any, *Error) {
	switch x := v.(type) {
	case bool:
		return x, nil
	case string:
		switch strings.ToLower(strings.TrimSpace(x)) {
		case "true":
			return true, nil
		case "false":
			return false, nil
		}
	}
	return nil, errorf(path, "expected true or false, got %s", describe(v))
}

func normInt(path string, v any, bits int) (any, *Error) {
	lo, hi := int64(math.MinInt64)>>(64-bits), int64(math.MaxInt64)>>(64-bits)
	var n int64
	switch x := v.(type) {
	case int:
		n = int64(x)
	case int64:
		n = x
	case uint64:
		return nil, errorf(path, "%d is too large (at most %d)", x, hi)
	case float64:
		if x != math.Trunc(x) || x < float64(lo) || x > float64(hi) {
			return nil, errorf(path, "expected a whole number, got %v", x)
		}
		n = int64(x)
	case string:
		var err error
		n, err = strconv.ParseInt(strings.TrimSpace(x), 10, 64)
		if err != nil {
			return nil, errorf(path, "expected a whole number, got %q", x)
		}
	default:
		return nil, errorf(path, "expected a whole number, got %s", describe(v))
	}
	if n < lo || n > hi {
		return nil, errorf(path, "%d is out of range (%d to %d)", n, lo, hi)
	}
	return n, nil
}

// describe names the YAML kind of a raw value for error messages.
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "nothing"
	case string:
		return fmt.Sprintf("the string %q", x)
	case bool:
		return fmt.Sprintf("the boolean %v", x)
	case int, int64, uint64, float64:
		return fmt.Sprintf("the number %v", x)
	case map[string]any:
		return "a mapping"
	case []any, []string:
		return "a list"
	}
	return fmt.Sprintf("a %T", v)
}

func joinKey(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

// unknownKey reports key (whose last element is name) as unknown, suggesting the closest
// allowed key.
func unknownKey(key, name string, allowed []string) *Error {
	best, bestDist := "", 3 // suggest only close matches
	for _, a := range allowed {
		if d := editDistance(name, a); d < bestDist && d*3 <= len(a) {
			best, bestDist = a, d
		}
	}
	if best != "" {
		return errorf(key, "unknown key; did you mean %q? (allowed here: %s)", best, strings.Join(allowed, ", "))
	}
	return errorf(key, "unknown key (allowed here: %s)", strings.Join(allowed, ", "))
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
