package operators

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/expr-lang/expr"

	"github.com/sluice-dev/sluice/configs"
)

// fastRecords are the values TestFastAgreesWithVM evaluates on: members of every JSON type,
// ints at the edges of int64, exact decimals, escapes, a number out of range, a value that is
// not an object.
var fastRecords = []string{
	`{"a":5,"b":12.5,"c":"x/y","d":true,"e":null,"f":{"g":1},"h":[1,2],"big":9223372036854775807,"n":-3,"t":1436918400123}`,
	`{"a":0,"b":-0.5,"c":"","d":false,"t":0,"n":0}`,
	`{"a":10000,"b":1000000,"c":"a\u002fb/\"q\"","t":-1,"big":-9223372036854775808,"n":999999}`,
	`{"a":"5","b":0.1,"c":"ß/ß","d":1,"e":"x","n":1e3,"t":86399999}`,
	`{"a":9999,"b":10000.000,"c":"x/y","a":1000000,"t":1436918400123,"n":-1000000}`,
	`{"a":3,"b":1e400000}`,
	`{"a":3,"f":{"g":1e400000},"h":[2e-400000]}`,
	`{"a":1,"o":{"p":{"q":3,"r":"s"},"s":"x\u002fy","d":1.5,"i":-7},"f":{"g":2,"g":"two"}}`,
	`{"o":{"p":1,"z":[1e400000]},"f":{"g":12.50}}`,
	`{"o":{"p":1,"z":[1e400000]},"f":{"g":"12.50"},"a":2}`, // the same o: its index taken again, not its decoding
	`{"a":2,"o":{"p":{"q":3,"r":"s"},"s":"x\u002fy","d":1.5,"i":-7}}`,
	`{"o":{"p":null,"s":7,"p\u0071":1},"f":{"x":{}},"e":{"g":1}}`,
	`{"o":{"p":{"q":99999999999999999999}},"f":{"g":"1"}}`,
	`[1,2]`,
	`{}`,
}

// fastLeaves and the operators below make TestFastAgreesWithVM's expressions.
var fastLeaves = []string{
	"a", "b", "c", "d", "e", "f", "h", "big", "n", "t", "missing", "key", "ts",
	"f.g", "f.x", "o.p", "o.p.q", "o.p.r", "o.s", "o.d", "o.i", `o["pq"]`, "e.g", "a.b", "h.x", "missing.x", "f.g.h",
	"0", "1", "7", "-2", "0.5", "10000", "1000000", "3.25", `"x"`, `"x/y"`, "true", "false", "nil",
	`["x", "x/y", "ß/ß", "X/Y"]`, "[1, 10000, -2, 5]", "[]", `["a", 1]`,
}

var (
	fastBinary = []string{"<", "<=", ">", ">=", "==", "!=", "&&", "||", "and", "or", "+", "-", "*", "/", "%", "**", "^", "in", "??"}
	fastCalls  = []string{"hour(%s)", "date_format(%s, 'yyyy-MM-dd')", "date_format(%s, 'HH:mm:ss.SSS')", "count_char(%s, '/')",
		"split_index(%s, '/', 1)", `regexp_extract(%s, "(\\w)/(\\w)", 2)`, "abs(%s)", "round(%s, 1)", "int(%s)", "min(%s, 3)",
		"max(%s, 2.5)", "float(%s)", "lower(%s)", "upper(%s)", "len(%s)", "date_format(%s, %s)", "trim(%s)"}
)

func randomExpr(rng *rand.Rand, depth int) string {
	if depth == 0 || rng.IntN(4) == 0 {
		return fastLeaves[rng.IntN(len(fastLeaves))]
	}
	sub := func() string { return randomExpr(rng, depth-1) }
	switch rng.IntN(6) {
	case 0, 1:
		return "(" + sub() + " " + fastBinary[rng.IntN(len(fastBinary))] + " " + sub() + ")"
	case 2:
		return []string{"!", "-", "not "}[rng.IntN(3)] + "(" + sub() + ")"
	case 3:
		return "(" + sub() + " ? " + sub() + " : " + sub() + ")"
	}
	f := fastCalls[rng.IntN(len(fastCalls))]
	if strings.Count(f, "%s") == 2 {
		return fmt.Sprintf(f, sub(), sub())
	}
	return fmt.Sprintf(f, sub())
}

// TestFastAgreesWithVM: on random expressions and records, a stage's run (its tree, where the
// tree gives a result) and the VM alone give the same result or the same error; and the trees
// give most of the results, so the check is not idle.
func TestFastAgreesWithVM(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	n := 20000
	if testing.Short() {
		n = 3000
	}
	// The edges random expressions reach seldom: equal operands, int64 overflow.
	edges := []string{"a <= 10000", "a >= 10000", "a < 10000", "a > 10000", "10000 <= a", "b <= 12.5", "b >= 10000",
		"b < 0.1", "n > 1000", "a == 10000.0", "b != 1000000", "big + 1", "big - -1", "big * 2", "-big", "n - big",
		"1 - big", "big + n", "big * -1", "a * big", "c == 'x/y'", "d == true", "a != a", "t % 1000", "t - t % 10000", "a % 0", "-big % -1", "-big - 1", "(-big - 1) % -1", "-a % 7", "big % -a", "e == nil", "missing != nil",
		"c == nil", "nil == nil", "f == nil", "b != nil", "nil == d",
		"lower(c) in ['x/y']", "a > 1 || f == nil", "a > 1 || h == nil", "f", "h", "min(h)", "upper(c) in ['X/Y', 'SS/SS']", "a in [5, 10000]", "c in []", "b in [12]", "n in [1000]",
		"o.p.q + 1", "o.d > f.g", "o.s == 'x/y'", "f.g * 2", "o.i < 0 && o.p.q > 2", "o.p == nil", "o.missing == nil", "o.p.x",
		"int(key)", "int(key) + 1", "int(a)", "int(c)", "int(n)", "int(b)", "int(missing)", "int(string(key))"}
	// The records' keys: int(key) reads them without the VM where atoi can (intCall: a sign,
	// digits, at most 19 of them), and leaves the others to it.
	keys := []string{"k/1", "42", "-7", "+3", "", "007", "123456789012345678", "1234567890123456789", "-", "9223372036854775807", "-9223372036854775808", "1_000", " 5"}
	var compiled, treed, evaluated, byTree int
	for k := range n + len(edges) {
		opt := expr.AsAny()
		if rng.IntN(3) == 0 {
			opt = expr.AsBool()
		}
		var src string
		if k < len(edges) {
			src, opt = edges[k], expr.AsAny()
		} else {
			src = randomExpr(rng, 3)
		}
		p, err := compile("t", src, opt)
		if err != nil {
			continue // a static type error
		}
		ref, err := compile("t", src, opt)
		if err != nil {
			t.Fatal(err)
		}
		compiled++
		var env, vmEnv exprEnv
		env.addProgram(p)
		vmEnv.addProgram(ref)
		if p.fast != nil {
			treed++
		}
		for j, value := range fastRecords {
			key := keys[(j+k)%len(keys)]
			r := &Record{Key: []byte(key), Value: []byte(value), Time: 1436918400123}
			vr := &Record{Key: []byte(key), Value: []byte(value), Time: 1436918400123}
			beginErr := env.begin(r)
			fillErr := vmEnv.fill(vr)
			if fmt.Sprint(beginErr) != fmt.Sprint(fillErr) {
				t.Fatalf("%s on %s: begin error %v, fill error %v", src, value, beginErr, fillErr)
			}
			if beginErr != nil {
				continue
			}
			evaluated++
			if env.fast {
				if v, ok := p.fast(&env); ok && (v.k == fBool || !p.wantBool) {
					byTree++
				}
			}
			got, gotErr := env.run(p)
			want, wantErr := vmEnv.vm.Run(ref.vm, vmEnv.vars)
			if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
				t.Fatalf("%s on %s: error %v, the VM's %v", src, value, gotErr, wantErr)
			}
			if g, w := fastText(got), fastText(want); g != w {
				t.Fatalf("%s on %s: %s, the VM's %s", src, value, g, w)
			}
		}
	}
	t.Logf("%d expressions compiled, %d with a tree; %d evaluations, %d by a tree", compiled, treed, evaluated, byTree)
	if treed < compiled/3 || byTree < evaluated/10 {
		t.Errorf("trees for %d of %d expressions, results by a tree %d of %d: the check is idle", treed, compiled, byTree, evaluated)
	}
}

// fastText is v's JSON as a map writes it, with its type (an int64 as the int it writes as).
func fastText(v any) string {
	if i, ok := v.(int64); ok {
		v = int(i)
	}
	b, err := appendAnyJSON(nil, v)
	return fmt.Sprintf("%s %T %v", b, v, err)
}

// TestFastTreeShapes: the expressions of the shipped Nexmark pipelines' maps and filters that
// the tree covers compile to one (the VM runs them only on what the tree leaves to it).
func TestFastTreeShapes(t *testing.T) {
	for _, src := range []string{
		"date_format(dateTime, 'yyyy-MM-dd')",
		"price < 10000 ? 1 : 0",
		"price >= 10000 && price < 1000000 ? 1 : 0",
		"0.908 * price",
		"auction == 1007 || auction == 1020 || auction == 2001 || auction == 2019 || auction == 2087",
		"hour(dateTime)",
		"count_char(url, '/')",
		"split_index(url, '/', 3)",
		"regexp_extract(url, '(&|^)channel_id=([^&]*)', 2) != nil || lower(channel) in ['apple', 'google', 'facebook', 'baidu']",
		"upper(c) in ['X/Y'] && a in [1, 2, 3]",
		"-price + ts % 1000",
		"!(category == 10) and key != 'x'",
	} {
		p, err := compile("t", src, expr.AsAny())
		if err != nil {
			t.Fatal(err)
		}
		var env exprEnv
		if env.addProgram(p); p.fast == nil {
			t.Errorf("%s: no tree", src)
		}
	}
	m, err := NewMap("q17-day", configs.Map{Set: map[string]string{"day": "date_format(dateTime, 'yyyy-MM-dd')", "rank1": "price < 10000 ? 1 : 0"}})
	if err != nil {
		t.Fatal(err)
	}
	r := decoded(t, "1", `{"price":9999,"dateTime":1436918400123}`, 0)
	if _, err := m.Apply(r); err != nil {
		t.Fatal(err)
	}
	if ms := m.(*mapStage); !ms.env.fast {
		t.Errorf("the map's record ran on the VM")
	}
	if got, want := string(r.Value), `{"price":9999,"dateTime":1436918400123,"day":"2015-07-15","rank1":1}`; got != want {
		t.Errorf("map wrote %s, want %s", got, want)
	}
}
