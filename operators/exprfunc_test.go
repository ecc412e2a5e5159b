package operators

import (
	"errors"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/configs"
)

// selectOne runs select [{v: expression}] over value and returns the output value or the
// error's reason.
func selectOne(t *testing.T, expression, value string, ts int64) (string, string) {
	t.Helper()
	m, err := NewMap("f", configs.Map{Select: []any{map[string]any{"v": expression}}})
	if err != nil {
		t.Fatalf("%s: %v", expression, err)
	}
	r := decoded(t, "k", value, ts)
	if _, err := m.Apply(r); err != nil {
		var oe *Error
		if !errors.As(err, &oe) {
			t.Fatalf("%s: error %v is not *Error", expression, err)
		}
		return "", oe.Reason
	}
	return string(r.Value), ""
}

func TestExprFuncs(t *testing.T) {
	// 2026-01-01T13:04:05.007Z and 1969-12-31T23:59:59.999Z.
	const rec = `{"t":1767272645007,"neg":-1,"url":"https://www.nexmark.com/ab/cd/ef/item.htm?query=1&channel_id=123","s":"abcabc","n":null,"d":1.5,"e":""}`
	for _, tc := range []struct{ expr, want, err string }{
		{"hour(t)", `{"v":13}`, ""},
		{"hour(ts)", `{"v":0}`, ""},
		{"hour(neg)", `{"v":23}`, ""},
		{"hour(t) >= 8 && hour(t) <= 18 ? 'dayTime' : hour(t) <= 6 || hour(t) >= 20 ? 'nightTime' : 'otherTime'", `{"v":"dayTime"}`, ""},
		{"hour(t) == 13.0", `{"v":true}`, ""},
		{"hour(n)", `{"v":null}`, ""},
		{"hour(missing)", `{"v":null}`, ""},
		{"hour(d)", "", "hour: want an int (epoch ms), got decimal"},
		{"hour(s)", "", "hour: want an int (epoch ms), got string"},
		{`date_format(t, "yyyy-MM-dd")`, `{"v":"2026-01-01"}`, ""},
		{`date_format(t, "HH:mm")`, `{"v":"13:04"}`, ""},
		{`date_format(t, "yyyy-MM-dd HH:mm:ss")`, `{"v":"2026-01-01 13:04:05"}`, ""},
		{`date_format(t, "yyyy-MM-dd'T'HH:mm:ss.SSS'Z' yy M d H m s ''")`, `{"v":"2026-01-01T13:04:05.007Z 26 1 1 13 4 5 '"}`, ""},
		{`date_format(neg, "yyyy-MM-dd HH:mm:ss.SSS")`, `{"v":"1969-12-31 23:59:59.999"}`, ""},
		{`date_format(t, "yyyy" + "-MM")`, `{"v":"2026-01"}`, ""}, // a pattern computed per record
		{`date_format(t, s)`, "", `date_format: pattern "abcabc": "a" is not supported`},
		{`date_format(n, "yyyy")`, `{"v":null}`, ""},
		{`regexp_extract(url, "(&|^)channel_id=([^&]*)", 2)`, `{"v":"123"}`, ""},
		{`regexp_extract(url, "(&|^)channel_id=([^&]*)")`, `{"v":"&channel_id=123"}`, ""},
		{`regexp_extract(url, "(&|^)channel_id=([^&]*)", 1)`, `{"v":"&"}`, ""},
		{`regexp_extract(s, "(&|^)channel_id=([^&]*)", 2)`, `{"v":null}`, ""}, // no match
		{`regexp_extract(s, "(x)|(b)", 1)`, `{"v":null}`, ""},                 // group not in the match
		{`regexp_extract(s, "(x)|(b)", 2)`, `{"v":"b"}`, ""},                  //
		{`regexp_extract(s, "b" + "c", 0)`, `{"v":"bc"}`, ""},                 // a pattern computed per record
		{`regexp_extract(s, "b" + "c", 1)`, `{"v":null}`, ""},                 // a group it lacks: null, as Flink
		{`regexp_extract(s, "(b)", 1 + 0)`, `{"v":"b"}`, ""},                  // a group computed per record
		{`regexp_extract(n, "b")`, `{"v":null}`, ""},                          //
		{`regexp_extract(d, "b")`, "", "regexp_extract: want a string to search, got decimal"},
		{`split_index(url, "/", 0)`, `{"v":"https:"}`, ""},
		{`split_index(url, "/", 1)`, `{"v":""}`, ""},
		{`split_index(url, "/", 3)`, `{"v":"ab"}`, ""},
		{`split_index(url, "/", 5)`, `{"v":"ef"}`, ""},
		{`split_index(url, "/", 6)`, `{"v":"item.htm?query=1&channel_id=123"}`, ""},
		{`split_index(url, "/", 7)`, `{"v":null}`, ""},
		{`split_index(url, "/", -1)`, `{"v":null}`, ""},
		{`split_index(s, "bc", 1)`, `{"v":"a"}`, ""},
		{`split_index(s, "bc", 2)`, `{"v":""}`, ""},
		{`split_index(e, "/", 0)`, `{"v":null}`, ""},
		{`split_index(n, "/", 0)`, `{"v":null}`, ""},
		{`split_index(s, e, 0)`, "", "split_index: empty separator"},
		{`split_index(s, "/", d)`, "", "split_index: want an int index, got decimal"},
		{`count_char(s, "c")`, `{"v":2}`, ""},
		{`count_char(s, "z")`, `{"v":0}`, ""},
		{`count_char(n, "c")`, `{"v":0}`, ""},
		{`count_char(s, "c") + 1 == 3`, `{"v":true}`, ""},
		{`lower("GooGle") in ["apple", "google"]`, `{"v":true}`, ""},
	} {
		got, reason := selectOne(t, tc.expr, rec, 0)
		if got != tc.want || !strings.Contains(reason, tc.err) || (tc.err == "") != (reason == "") {
			t.Errorf("%s: got %s (error %q), want %s (error containing %q)", tc.expr, got, reason, tc.want, tc.err)
		}
	}
}

func TestExprFuncCompileErrors(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{"hour()", "invalid number of arguments for hour (expected 1, got 0)"},
		{"hour(1, 2)", "invalid number of arguments for hour (expected 1, got 2)"},
		{`regexp_extract("a")`, "invalid number of arguments for regexp_extract (expected 2 or 3, got 1)"},
		{`regexp_extract(s, "(")`, "regexp_extract: error parsing regexp: missing closing )"},
		{`regexp_extract(s, "(a)", 2)`, `regexp_extract: group 2: the pattern "(a)" has groups 0 to 1`},
		{`date_format(t, "yyyy-MM-dd hh")`, `date_format: pattern "yyyy-MM-dd hh": "hh" is not supported`},
		{`date_format(t, "'x")`, `date_format: pattern "'x": unterminated quote at 0`},
		{`split_index(s, "", 1)`, "split_index: empty separator"},
		{`count_char(s, "cc")`, `count_char: want one character, got "cc"`},
		{`count_char(s)`, "invalid number of arguments for count_char (expected 2, got 1)"},
	} {
		_, err := NewMap("f", configs.Map{Select: []any{map[string]any{"v": tc.expr}}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.expr, err, tc.want)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "operators: f: expr: ") {
			t.Errorf("%s: error %v does not name the operator", tc.expr, err)
		}
	}
}

func TestSelect(t *testing.T) {
	const value = `{"b":1.50,"a":{"x":[1, 2]},"c":"s","b":2.50,"weird-name":true}`
	for _, tc := range []struct {
		cols []any
		want string
	}{
		{[]any{"a", "b"}, `{"a":{"x":[1, 2]},"b":2.50}`},              // as written; the last of duplicates
		{[]any{"b", "a", "c"}, `{"b":2.50,"a":{"x":[1, 2]},"c":"s"}`}, // in the select's order
		{[]any{"missing", "weird-name"}, `{"missing":null,"weird-name":true}`},
		{[]any{map[string]any{"p": "b * 2"}, map[string]any{"q": "b"}}, `{"p":5,"q":2.50}`},
		{[]any{map[string]any{"k": "key"}, map[string]any{"t": "ts"}, "key"}, `{"k":"k-1","t":42,"key":null}`},
		{[]any{map[string]any{"n": "nil"}, map[string]any{"m": "missing ?? 'd'"}}, `{"n":null,"m":"d"}`},
		{[]any{map[string]any{"w": `$env["weird-name"]`}}, `{"w":true}`},
		{[]any{map[string]any{"quo\"te": "1"}}, `{"quo\"te":1}`},
	} {
		m, err := NewMap("sel", configs.Map{Select: tc.cols})
		if err != nil {
			t.Fatal(err)
		}
		r := decoded(t, "k-1", value, 42)
		if keep, err := m.Apply(r); err != nil || !keep {
			t.Fatalf("%v: keep %v, err %v", tc.cols, keep, err)
		}
		if string(r.Value) != tc.want {
			t.Errorf("%v: got %s, want %s", tc.cols, r.Value, tc.want)
		}
		if string(r.Key) != "k-1" || r.Time != 42 {
			t.Errorf("%v: key %q time %d changed", tc.cols, r.Key, r.Time)
		}
	}
	m, err := NewMap("sel", configs.Map{Select: []any{"a", map[string]any{"x": "c * 2"}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Apply(decoded(t, "k", value, 0))
	var oe *Error
	if !errors.As(err, &oe) || oe.Operator != "sel" || !strings.HasPrefix(oe.Reason, "select x: expr: invalid operation") {
		t.Fatalf("got %v, want an *Error naming select x", err)
	}
	if _, err := NewMap("sel", configs.Map{Select: []any{"a", map[string]any{"a": "1"}}}); err == nil {
		t.Fatal("duplicate column accepted")
	}
	if _, err := NewMap("sel", configs.Map{Select: []any{map[string]any{"a": "1 +"}}}); err == nil || !strings.Contains(err.Error(), "(select a)") {
		t.Fatalf("got %v, want a compile error naming the column", err)
	}
}

// FuzzExprTimeFuncs checks hour and date_format against the time package, and split_index
// against strings.Split, on any input.
func FuzzExprTimeFuncs(f *testing.F) {
	f.Add(int64(1767272645007), "https://www.nexmark.com/ab/cd/ef/item.htm", "/", 3)
	f.Add(int64(-1), "a//b", "/", 1)
	f.Add(int64(253402300799999), "", "x", 0)
	f.Fuzz(func(t *testing.T, ms int64, s, sep string, i int) {
		if ms < -62135596800000 || ms > 253402300799999 { // the years 0001 to 9999
			return
		}
		tm := time.UnixMilli(ms).UTC()
		if got, _ := fnHour(ms); got != tm.Hour() {
			t.Fatalf("hour(%d) = %v, want %d", ms, got, tm.Hour())
		}
		got, err := fnDateFormat(ms, "yyyy-MM-dd'T'HH:mm:ss.SSS")
		if want := tm.Format("2006-01-02T15:04:05.000"); err != nil || got != want {
			t.Fatalf("date_format(%d) = %v, %v, want %s", ms, got, err, want)
		}
		if sep == "" {
			return
		}
		var want any
		if parts := strings.Split(s, sep); s != "" && i >= 0 && i < len(parts) {
			want = parts[i]
		}
		if got, err := fnSplitIndex(s, sep, i); err != nil || got != want {
			t.Fatalf("split_index(%q, %q, %d) = %v, %v, want %v", s, sep, i, got, err, want)
		}
	})
}

// TestCachedDateFormat: the formatter that keeps its last result formats every time as the
// pattern does, in time order and out of it, across day, hour, minute and second boundaries and
// before 1970.
func TestCachedDateFormat(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	var times []int64
	for _, base := range []int64{0, 86_400_000, -86_400_000, 1436918400123, 1436918399999, 3_600_000, 59_999, -1, 951_782_400_000} {
		for _, d := range []int64{-86_400_001, -3_600_000, -60_001, -1001, -1, 0, 1, 999, 1000, 59_999, 60_000, 3_599_999, 86_399_999} {
			times = append(times, base+d)
		}
	}
	for _, pat := range []string{"yyyy-MM-dd", "HH:mm", "yy/M/d H:m:s", "ss.SSS", "yyyy", "MM", "'T'HH"} {
		parts, err := parseDatePattern(pat)
		if err != nil {
			t.Fatal(err)
		}
		format := cachedDateFormat(parts)
		check := func(ms int64) {
			if got, want := format(ms), formatDate(parts, ms); got != want {
				t.Fatalf("%s at %d: %v, want %s", pat, ms, got, want)
			}
		}
		slices.Sort(times)
		for _, ms := range times {
			check(ms)
		}
		for range 2000 {
			check(times[rng.IntN(len(times))] + rng.Int64N(5) - 2)
		}
	}
}

// TestRequiredLiteral: regexp_extract with its pattern's required literal (a string without it
// is not searched) gives what the regular expression alone gives, on random strings.
func TestRequiredLiteral(t *testing.T) {
	for pat, want := range map[string]string{
		"(&|^)channel_id=([^&]*)": "channel_id=", "abc": "abc", "a+bc": "bc", "(?i)abc": "", "x*abc": "abc",
		"(ab)+c": "ab", "a|b": "", "(abc){2}": "abc", "(abc){0,2}d": "d", "\uFFFDx": "", "^/item": "/item",
		".*": "", "ß+": "ß", "(?:foo)?bar": "bar", "(a(bcd))e": "bcd",
	} {
		if got := requiredLiteral(pat); got != want {
			t.Errorf("requiredLiteral(%q) = %q, want %q", pat, got, want)
		}
		re := regexp.MustCompile(pat)
		x := &extractor{re: re, lit: requiredLiteral(pat)}
		rng := rand.New(rand.NewPCG(1, uint64(len(pat))))
		parts := []string{"a", "b", "c", "d", "x", "&", "=", "channel_id=", "ß", "\xff", "/item", "A", "B", "C", "bar", "e", "\uFFFD"}
		for range 3000 {
			var b strings.Builder
			for range rng.IntN(8) {
				b.WriteString(parts[rng.IntN(len(parts))])
			}
			s := b.String()
			for g := range re.NumSubexp() + 1 {
				got, err1 := regexpExtract(x, g, s)
				want, err2 := regexpExtract(&extractor{re: re}, g, s)
				if got != want || err1 != nil || err2 != nil {
					t.Fatalf("%q on %q group %d: %v, without the literal %v", pat, s, g, got, want)
				}
			}
		}
	}
}

// TestLiteralStart: a pattern whose literal follows a part of bounded width is searched from
// just before the literal's first occurrence, and finds, on random texts (multi-byte and invalid
// UTF-8, the literal several times, at the start or not), every group at the offsets the whole
// text's search gives; patterns it must not start late (\b, multi-line anchors, an unbounded
// part before every literal) search the whole text.
func TestLiteralStart(t *testing.T) {
	for pat, fast := range map[string]bool{
		"(&|^)channel_id=([^&]*)": true, "(a|^)b?cd(x*)": true, "..lit(e)": true, "(?i:k)lit": true,
		"(é|ab){2}lit$": true, "^lit": true, "x?(?P<n>y)lit(z|$)": true, "[^&]{0,3}lit": true,
		`\blit`: false, "(?m)(^|a)lit": false, "a*lit": false, "lit": false, "(?i)lit": false, "a|lit": false,
		`(a|^)lit\B`: false, "(?m)a?lit$": false,
	} {
		x, err := newExtractor(pat)
		if err != nil {
			t.Fatal(err)
		}
		if (x.start != nil) != fast {
			t.Errorf("%q: starts at its literal %v, want %v", pat, x.start != nil, fast)
		}
		rng := rand.New(rand.NewPCG(2, uint64(len(pat))))
		parts := []string{"a", "b", "&", "lit", "channel_id=", "cd", "x", "y", "z", "é", "ab", "K", "\u212a", "\xff", "\xc3", "\n", " ", "e", "ß"}
		for range 4000 {
			var b strings.Builder
			for range rng.IntN(12) {
				b.WriteString(parts[rng.IntN(len(parts))])
			}
			s := b.String()
			if got, want := x.find(s), x.re.FindStringSubmatchIndex(s); !slices.Equal(got, want) {
				t.Fatalf("%q on %q: %v, the whole text's search %v", pat, s, got, want)
			}
		}
	}
}
