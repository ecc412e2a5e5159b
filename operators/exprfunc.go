package operators

import (
	"fmt"
	"reflect"
	"regexp"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/builtin"
	"github.com/expr-lang/expr/conf"
	"github.com/expr-lang/expr/file"
)

// sluice's own expression functions, after SQL's (Flink's, for the Nexmark queries). Like SQL's
// they take nil (a JSON null, a missing field) to nil, except count_char, which counts none:
//
//   - hour(ms): the hour, 0 to 23, in UTC of the epoch-millisecond time ms (an int), e.g.
//     hour(ts) or hour(dateTime). The result is an int.
//   - date_format(ms, pattern): ms (an int, epoch milliseconds) formatted in UTC by a Java
//     (DateTimeFormatter) pattern: yyyy (year, 4 digits), yy, MM, M, dd, d, HH, H, mm, m, ss, s,
//     SSS (milliseconds), text in single quotes ('T', '' for a quote); other characters are
//     literal, other letters an error. date_format(dateTime, "yyyy-MM-dd HH:mm:ss").
//   - regexp_extract(s, pattern[, group]): the text of group (default 0, the whole match) of
//     the first match of the regular expression pattern (Go's RE2 syntax) in s; nil when
//     nothing matches or the group takes no part in the match (Flink's REGEXP_EXTRACT), e.g.
//     regexp_extract(url, "(&|^)channel_id=([^&]*)", 2). A constant pattern is compiled once,
//     with the expression; a bad one, or a group it does not have, is a compile error.
//   - split_index(s, sep, i): the i-th (from 0) of the parts of s between occurrences of sep
//     (empty parts kept); nil when i is negative or past the last part, or s is empty (Flink's
//     SPLIT_INDEX), e.g. split_index(url, "/", 3). sep must not be empty.
//   - count_char(s, c): how many times the character c (a string of one character) occurs in
//     s; 0 for nil (Nexmark's count_char UDF).
//
// Wrong argument types are errors naming the function ("hour: want an int (epoch ms), got
// string"). expr-lang's own builtins cover the rest of SQL's usual functions: lower, upper,
// trim, split, indexOf, hasPrefix, `in`, `??` (COALESCE) and `c ? a : b` (CASE WHEN).

// exprFunc is one of sluice's functions: its arity, its evaluation, and optionally a
// specialization for constant arguments (checked and prepared at compile time).
type exprFunc struct {
	min, max int
	out      reflect.Type
	fn       func(args ...any) (any, error)
	// constant, when set, is called at compile time with the call's arguments, consts[i] the
	// value of a string or integer literal and noConst otherwise. It returns an error to refuse
	// the call, a function to call instead of fn, or nil to keep fn.
	constant func(consts []any) (func(args ...any) (any, error), error)
	// onMs, when set, is called at compile time like constant and may return what fn returns
	// for a first argument that is an int (epoch milliseconds) and those literals: the tree of
	// an expression (exprfast.go) calls it without boxing the int.
	onMs func(consts []any) func(ms int64) any
}

// noConst marks an argument that is not a literal.
type noConstT struct{}

var noConst = noConstT{}

var exprFuncs = map[string]exprFunc{
	"hour":           {min: 1, max: 1, out: anyType, fn: fnHour, onMs: func([]any) func(int64) any { return hourOf }},
	"date_format":    {min: 2, max: 2, out: anyType, fn: fnDateFormat, constant: constDateFormat, onMs: msDateFormat},
	"regexp_extract": {min: 2, max: 3, out: anyType, fn: fnRegexpExtract, constant: constRegexpExtract},
	"split_index":    {min: 3, max: 3, out: anyType, fn: fnSplitIndex, constant: constSplitIndex},
	"count_char":     {min: 2, max: 2, out: intType, fn: fnCountChar, constant: constCountChar},
}

// funcOptions registers exprFuncs with expr-lang.
func funcOptions() expr.Option {
	return func(c *conf.Config) {
		for name, f := range exprFuncs {
			c.Functions[name] = &builtin.Function{
				Name: name,
				Func: f.fn,
				Validate: func(args []reflect.Type) (reflect.Type, error) {
					if len(args) < f.min || len(args) > f.max {
						return anyType, fmt.Errorf("invalid number of arguments for %s (expected %s, got %d)", name, arity(f.min, f.max), len(args))
					}
					return f.out, nil
				},
			}
		}
	}
}

// funcPatcher is an expr-lang patcher: it checks the literal arguments of sluice's functions
// and calls their specializations (a compiled regular expression, a parsed date pattern). err
// keeps the first failure.
type funcPatcher struct {
	src []rune
	err error
}

func (p *funcPatcher) Visit(node *ast.Node) {
	call, ok := (*node).(*ast.CallNode)
	if !ok {
		return
	}
	id, ok := call.Callee.(*ast.IdentifierNode)
	if !ok {
		return
	}
	f, ok := exprFuncs[id.Value]
	if !ok || f.constant == nil || len(call.Arguments) < f.min || len(call.Arguments) > f.max {
		return
	}
	fn, err := f.constant(literalArgs(call.Arguments))
	if err != nil {
		if p.err == nil {
			p.err = (&file.Error{Location: call.Location(), Message: id.Value + ": " + err.Error()}).Bind(file.NewSource(string(p.src)))
		}
		return
	}
	if fn != nil {
		patchCall(node, func(args ...any) any {
			v, err := fn(args...)
			if err != nil {
				panic(err)
			}
			return v
		}, call.Arguments...)
	}
}

// literalArgs returns a call's arguments as exprFunc.constant takes them: the values of string
// and integer literals, noConst for the others.
func literalArgs(args []ast.Node) []any {
	consts := make([]any, len(args))
	for i, a := range args {
		switch n := a.(type) {
		case *ast.StringNode:
			consts[i] = n.Value
		case *ast.IntegerNode:
			consts[i] = n.Value
		default:
			consts[i] = noConst
		}
	}
	return consts
}

// epochMs reads a time argument: an int of epoch milliseconds.
func epochMs(name string, v any) (int64, error) {
	if n := numberOf(v); n.kind == intNum {
		return n.i, nil
	}
	return 0, fmt.Errorf("%s: want an int (epoch ms), got %s", name, typeName(v))
}

func str(name, what string, v any) (string, error) {
	if s, ok := v.(string); ok {
		return s, nil
	}
	return "", fmt.Errorf("%s: want a string %s, got %s", name, what, typeName(v))
}

func fnHour(args ...any) (any, error) {
	if args[0] == nil {
		return nil, nil
	}
	ms, err := epochMs("hour", args[0])
	if err != nil {
		return nil, err
	}
	return hourOf(ms), nil
}

func hourOf(ms int64) any { return time.UnixMilli(ms).UTC().Hour() }

// datePart is one element of a parsed date pattern: a literal or a field of a width.
type datePart struct {
	lit   string
	field byte // 0 for a literal
	width int
}

// parseDatePattern parses a Java DateTimeFormatter pattern (the subset date_format takes).
func parseDatePattern(pat string) ([]datePart, error) {
	var parts []datePart
	lit := func(s string) {
		if n := len(parts); n > 0 && parts[n-1].field == 0 {
			parts[n-1].lit += s
			return
		}
		parts = append(parts, datePart{lit: s})
	}
	for i := 0; i < len(pat); {
		c := pat[i]
		switch {
		case c == '\'':
			if i+1 < len(pat) && pat[i+1] == '\'' {
				lit("'")
				i += 2
				continue
			}
			end := strings.IndexByte(pat[i+1:], '\'')
			if end < 0 {
				return nil, fmt.Errorf("pattern %q: unterminated quote at %d", pat, i)
			}
			lit(pat[i+1 : i+1+end])
			i += end + 2
		case 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
			j := i
			for j < len(pat) && pat[j] == c {
				j++
			}
			w := j - i
			ok := false
			switch c {
			case 'y':
				ok = w == 2 || w == 4
			case 'M', 'd', 'H', 'm', 's':
				ok = w <= 2
			case 'S':
				ok = w == 3
			}
			if !ok {
				return nil, fmt.Errorf("pattern %q: %q is not supported (yyyy, yy, MM, M, dd, d, HH, H, mm, m, ss, s, SSS; quote text: 'T')", pat, pat[i:j])
			}
			parts = append(parts, datePart{field: c, width: w})
			i = j
		default:
			_, size := utf8.DecodeRuneInString(pat[i:])
			lit(pat[i : i+size])
			i += size
		}
	}
	return parts, nil
}

func formatDate(parts []datePart, ms int64) string {
	t := time.UnixMilli(ms).UTC()
	b := make([]byte, 0, 32)
	for _, p := range parts {
		var v int
		switch p.field {
		case 0:
			b = append(b, p.lit...)
			continue
		case 'y':
			v = t.Year()
			if p.width == 2 {
				v %= 100
			}
		case 'M':
			v = int(t.Month())
		case 'd':
			v = t.Day()
		case 'H':
			v = t.Hour()
		case 'm':
			v = t.Minute()
		case 's':
			v = t.Second()
		case 'S':
			v = t.Nanosecond() / 1e6
		}
		s := strconv.Itoa(v)
		for range p.width - len(s) {
			b = append(b, '0')
		}
		b = append(b, s...)
	}
	return string(b)
}

func dateFormat(parts []datePart, v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	ms, err := epochMs("date_format", v)
	if err != nil {
		return nil, err
	}
	return formatDate(parts, ms), nil
}

func fnDateFormat(args ...any) (any, error) {
	if args[0] == nil || args[1] == nil {
		return nil, nil
	}
	pat, err := str("date_format", "pattern", args[1])
	if err != nil {
		return nil, err
	}
	parts, err := parseDatePattern(pat)
	if err != nil {
		return nil, fmt.Errorf("date_format: %w", err)
	}
	return dateFormat(parts, args[0])
}

func constDateFormat(consts []any) (func(args ...any) (any, error), error) {
	pat, ok := consts[1].(string)
	if !ok {
		return nil, nil
	}
	parts, err := parseDatePattern(pat)
	if err != nil {
		return nil, err
	}
	format := cachedDateFormat(parts)
	return func(args ...any) (any, error) {
		if args[0] == nil {
			return nil, nil
		}
		ms, err := epochMs("date_format", args[0])
		if err != nil {
			return nil, err
		}
		return format(ms), nil
	}, nil
}

func msDateFormat(consts []any) func(int64) any {
	pat, ok := consts[1].(string)
	if !ok {
		return nil
	}
	parts, err := parseDatePattern(pat)
	if err != nil {
		return nil
	}
	return cachedDateFormat(parts)
}

// cachedDateFormat formats by parts and keeps its last result: a time in the same unit of its
// finest field (the same day for yyyy-MM-dd, the same minute for HH:mm) formats the same, so a
// stream in time order formats each day or minute once. Not safe for concurrent use (one per
// compiled expression, as the VM's program).
func cachedDateFormat(parts []datePart) func(ms int64) any {
	unit := int64(86_400_000)
	for _, p := range parts {
		switch p.field {
		case 'H':
			unit = min(unit, 3_600_000)
		case 'm':
			unit = min(unit, 60_000)
		case 's':
			unit = min(unit, 1000)
		case 'S':
			unit = 1
		}
	}
	var last any
	var lastUnit int64
	return func(ms int64) any {
		u := ms / unit
		if ms%unit < 0 {
			u-- // floor: the unit holding a time before 1970
		}
		if last == nil || u != lastUnit {
			last, lastUnit = formatDate(parts, ms), u
		}
		return last
	}
}

// regexpExtract is regexp_extract with its pattern compiled (x); a nil v gives nil.
func regexpExtract(x *extractor, group int, v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	s, err := str("regexp_extract", "to search", v)
	if err != nil {
		return nil, err
	}
	if group < 0 || group > x.re.NumSubexp() {
		return nil, nil // as Flink's: a group the pattern does not have gives null
	}
	m := x.find(s)
	if m == nil || m[2*group] < 0 {
		return nil, nil
	}
	return s[m[2*group]:m[2*group+1]], nil
}

// extractor is a compiled regexp_extract pattern. lit, when not empty, is a text every match of
// re contains (requiredLiteral): a string without it has no match, found without running re.
// When every match holds a literal of the pattern (at) at most w bytes after its start, and the
// pattern's only assertions are ^ and $ (start, when not nil), a search starts w bytes before
// the literal's first occurrence: Go's regular expressions try each start in turn (for a short
// text, a backtracker whose cost grows with the text), and most of a URL lies before the
// "channel_id=" Nexmark q21 looks for.
type extractor struct {
	re    *regexp.Regexp
	lit   string
	start *litStart
}

// litStart is the search that starts near the literal at: re again with ^ matching nowhere
// (mid), for a search that starts past the text's start, where ^ cannot match.
type litStart struct {
	at  string
	w   int
	mid *regexp.Regexp
}

// newExtractor compiles pat.
func newExtractor(pat string) (*extractor, error) {
	re, err := regexp.Compile(pat)
	if err != nil {
		return nil, err
	}
	x := &extractor{re: re, lit: requiredLiteral(pat), start: newLitStart(pat)}
	if x.start != nil && strings.Contains(x.start.at, x.lit) {
		x.lit = "" // find looks for the literal it starts at, which holds lit: one scan, not two
	}
	return x, nil
}

// find returns re.FindStringSubmatchIndex(s).
func (x *extractor) find(s string) []int {
	if x.lit != "" && !strings.Contains(s, x.lit) {
		return nil
	}
	if x.start == nil {
		return x.re.FindStringSubmatchIndex(s)
	}
	p := strings.Index(s, x.start.at)
	if p < 0 {
		return nil
	}
	from := p - x.start.w
	for from > 0 && !utf8.RuneStart(s[from]) {
		from-- // a rune's first byte: where the whole text's search could start too
	}
	if from <= 0 {
		return x.re.FindStringSubmatchIndex(s)
	}
	// A match starts at or after from: the literal's occurrence in it begins at most w bytes after
	// its start, and no occurrence begins before p. From there on, mid matches what re matches
	// (the characters are the same, ^ matches neither, and no other assertion looks back).
	m := x.start.mid.FindStringSubmatchIndex(s[from:])
	for i := range m {
		if m[i] >= 0 {
			m[i] += from
		}
	}
	return m
}

// newLitStart returns the literal search of pat, or nil when pat is not a concatenation with a
// literal (case-sensitive, without U+FFFD, which matches any invalid byte) after a part of
// bounded width, or has an assertion other than ^ and $ (\b, \B and a multi-line ^ or $ look at
// the character before a position, which a search from the middle does not have).
func newLitStart(pat string) *litStart {
	re, err := syntax.Parse(pat, syntax.Perl)
	if err != nil || re.Op != syntax.OpConcat || !onlyTextAnchors(re) {
		return nil
	}
	w := 0
	for i, sub := range re.Sub {
		if sub.Op == syntax.OpLiteral && sub.Flags&syntax.FoldCase == 0 && !slices.Contains(sub.Rune, utf8.RuneError) {
			if i == 0 {
				return nil // the search starts at the literal anyway
			}
			mid, err := regexp.Compile(noBeginText(re).String())
			if err != nil {
				return nil
			}
			return &litStart{at: string(sub.Rune), w: w, mid: mid}
		}
		sw, ok := maxWidth(sub)
		if !ok {
			return nil
		}
		w += sw
	}
	return nil
}

// onlyTextAnchors reports whether re's only empty-width assertions are ^ and $ of the whole text.
func onlyTextAnchors(re *syntax.Regexp) bool {
	switch re.Op {
	case syntax.OpBeginLine, syntax.OpEndLine, syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return false
	}
	for _, sub := range re.Sub {
		if !onlyTextAnchors(sub) {
			return false
		}
	}
	return true
}

// maxWidth returns the most bytes re matches (ok false: no bound).
func maxWidth(re *syntax.Regexp) (int, bool) {
	switch re.Op {
	case syntax.OpEmptyMatch, syntax.OpBeginText, syntax.OpEndText, syntax.OpNoMatch:
		return 0, true
	case syntax.OpLiteral:
		return len(re.Rune) * utf8.UTFMax, true // a folded literal may match longer encodings than its own
	case syntax.OpCharClass, syntax.OpAnyCharNotNL, syntax.OpAnyChar:
		return utf8.UTFMax, true
	case syntax.OpCapture, syntax.OpQuest:
		return maxWidth(re.Sub[0])
	case syntax.OpRepeat:
		if re.Max < 0 {
			return 0, false
		}
		n, ok := maxWidth(re.Sub[0])
		return n * re.Max, ok
	case syntax.OpConcat, syntax.OpAlternate:
		total := 0
		for _, sub := range re.Sub {
			n, ok := maxWidth(sub)
			if !ok {
				return 0, false
			}
			if re.Op == syntax.OpConcat {
				total += n
			} else {
				total = max(total, n)
			}
		}
		return total, true
	}
	return 0, false // star, plus, and anything else
}

// noBeginText returns a copy of re in which ^ (the start of the text) matches nowhere.
func noBeginText(re *syntax.Regexp) *syntax.Regexp {
	c := *re
	if c.Op == syntax.OpBeginText {
		return &syntax.Regexp{Op: syntax.OpNoMatch}
	}
	c.Sub = make([]*syntax.Regexp, len(re.Sub))
	for i, sub := range re.Sub {
		c.Sub[i] = noBeginText(sub)
	}
	return &c
}

func extractGroup(v any) (int, error) {
	if n := numberOf(v); n.kind == intNum {
		return int(max(min(n.i, 1<<31), -1)), nil
	}
	return 0, fmt.Errorf("regexp_extract: want an int group, got %s", typeName(v))
}

func fnRegexpExtract(args ...any) (any, error) {
	for _, a := range args {
		if a == nil {
			return nil, nil
		}
	}
	pat, err := str("regexp_extract", "pattern", args[1])
	if err != nil {
		return nil, err
	}
	re, err := regexp.Compile(pat)
	if err != nil {
		return nil, fmt.Errorf("regexp_extract: %w", err)
	}
	group := 0
	if len(args) == 3 {
		if group, err = extractGroup(args[2]); err != nil {
			return nil, err
		}
	}
	return regexpExtract(&extractor{re: re}, group, args[0])
}

func constRegexpExtract(consts []any) (func(args ...any) (any, error), error) {
	pat, ok := consts[1].(string)
	if !ok {
		return nil, nil
	}
	x, err := newExtractor(pat)
	if err != nil {
		return nil, err
	}
	if len(consts) == 2 {
		return func(args ...any) (any, error) { return regexpExtract(x, 0, args[0]) }, nil
	}
	if g, ok := consts[2].(int); ok {
		if g < 0 || g > x.re.NumSubexp() {
			return nil, fmt.Errorf("group %d: the pattern %q has groups 0 to %d", g, pat, x.re.NumSubexp())
		}
		return func(args ...any) (any, error) { return regexpExtract(x, g, args[0]) }, nil
	}
	return func(args ...any) (any, error) {
		if args[2] == nil {
			return nil, nil
		}
		g, err := extractGroup(args[2])
		if err != nil {
			return nil, err
		}
		return regexpExtract(x, g, args[0])
	}, nil
}

// requiredLiteral returns a text every match of the regular expression pat contains (the
// longest literal a concatenation must match, through captures and repetitions of at least
// one), or "" when it finds none. A literal that ignores case, or holds U+FFFD (which matches
// any invalid byte), is none.
func requiredLiteral(pat string) string {
	re, err := syntax.Parse(pat, syntax.Perl)
	if err != nil {
		return ""
	}
	var lit func(re *syntax.Regexp) string
	lit = func(re *syntax.Regexp) string {
		switch re.Op {
		case syntax.OpLiteral:
			if re.Flags&syntax.FoldCase != 0 || slices.Contains(re.Rune, utf8.RuneError) {
				return ""
			}
			return string(re.Rune)
		case syntax.OpCapture, syntax.OpPlus:
			return lit(re.Sub[0])
		case syntax.OpRepeat:
			if re.Min >= 1 {
				return lit(re.Sub[0])
			}
		case syntax.OpConcat:
			best := ""
			for _, sub := range re.Sub {
				if l := lit(sub); len(l) > len(best) {
					best = l
				}
			}
			return best
		}
		return ""
	}
	return lit(re)
}

func fnSplitIndex(args ...any) (any, error) {
	for _, a := range args {
		if a == nil {
			return nil, nil
		}
	}
	s, err := str("split_index", "to split", args[0])
	if err != nil {
		return nil, err
	}
	sep, err := str("split_index", "separator", args[1])
	if err != nil {
		return nil, err
	}
	if sep == "" {
		return nil, fmt.Errorf("split_index: empty separator")
	}
	n := numberOf(args[2])
	if n.kind != intNum {
		return nil, fmt.Errorf("split_index: want an int index, got %s", typeName(args[2]))
	}
	if part, ok := splitIndex(s, sep, n.i); ok {
		return part, nil
	}
	return nil, nil
}

// splitIndex is split_index on a string and a non-empty separator: part n (from 0) of s split
// at sep; false (null) when s is empty, n negative or s has fewer parts.
func splitIndex(s, sep string, n int64) (string, bool) {
	if s == "" || n < 0 {
		return "", false
	}
	for i := n; i > 0; i-- {
		k := strings.Index(s, sep)
		if k < 0 {
			return "", false
		}
		s = s[k+len(sep):]
	}
	if k := strings.Index(s, sep); k >= 0 {
		s = s[:k]
	}
	return s, true
}

func constSplitIndex(consts []any) (func(args ...any) (any, error), error) {
	if sep, ok := consts[1].(string); ok && sep == "" {
		return nil, fmt.Errorf("empty separator")
	}
	return nil, nil
}

func fnCountChar(args ...any) (any, error) {
	if args[0] == nil {
		return 0, nil
	}
	s, err := str("count_char", "to search", args[0])
	if err != nil {
		return nil, err
	}
	c, err := str("count_char", "character", args[1])
	if err != nil {
		return nil, err
	}
	if utf8.RuneCountInString(c) != 1 {
		return nil, fmt.Errorf("count_char: want one character, got %q", c)
	}
	return strings.Count(s, c), nil
}

func constCountChar(consts []any) (func(args ...any) (any, error), error) {
	if c, ok := consts[1].(string); ok && utf8.RuneCountInString(c) != 1 {
		return nil, fmt.Errorf("want one character, got %q", c)
	}
	return nil, nil
}
