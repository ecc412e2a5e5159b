package configs

import (
	"slices"
	"testing"
)

// TestSplitGroupBy: a group_by splits at the commas outside an expression's parentheses,
// brackets, braces and string literals; a part starting with a name and a colon is an
// expression's key column, any other a field path.
func TestSplitGroupBy(t *testing.T) {
	for spec, want := range map[string][]GroupByPart{
		"bidder":              {{Text: "bidder", Name: "bidder"}},
		" bidder , c.region ": {{Text: "bidder", Name: "bidder"}, {Text: "c.region", Name: "c.region"}},
		"a,,b":                {{Text: "a", Name: "a"}, {}, {Text: "b", Name: "b"}},
		"auction, day: date_format(dateTime, 'yyyy-MM-dd')": {{Text: "auction", Name: "auction"},
			{Text: "day: date_format(dateTime, 'yyyy-MM-dd')", Name: "day", Expr: "date_format(dateTime, 'yyyy-MM-dd')"}},
		`s: split_index(url, "/,", 2), n: x in [1, 2], m: {"a": 1, "b": 2}.a`: {
			{Text: `s: split_index(url, "/,", 2)`, Name: "s", Expr: `split_index(url, "/,", 2)`},
			{Text: "n: x in [1, 2]", Name: "n", Expr: "x in [1, 2]"},
			{Text: `m: {"a": 1, "b": 2}.a`, Name: "m", Expr: `{"a": 1, "b": 2}.a`}},
		`q: "a\",b", r: 'c'`:     {{Text: `q: "a\",b"`, Name: "q", Expr: `"a\",b"`}, {Text: "r: 'c'", Name: "r", Expr: "'c'"}},
		"t: x > 1 ? 'a:b' : 'c'": {{Text: "t: x > 1 ? 'a:b' : 'c'", Name: "t", Expr: "x > 1 ? 'a:b' : 'c'"}},
		"day:":                   {{Text: "day:", Name: "day"}},
		"a b: c":                 {{Text: "a b: c", Name: "a b: c"}},
	} {
		if got := SplitGroupBy(spec); !slices.Equal(got, want) {
			t.Errorf("SplitGroupBy(%q) = %+v, want %+v", spec, got, want)
		}
	}
}
