package jsonstr

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// replaced is what s reads back as from AppendString: each byte of invalid UTF-8 is U+FFFD.
func replaced(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// check: the literal is valid JSON and valid UTF-8, has no raw U+2028/U+2029, and reads back
// as s (invalid bytes as U+FFFD); AppendBytes writes the same.
func check(t *testing.T, s string) []byte {
	t.Helper()
	out := AppendString([]byte("x"), s)
	if string(out[:1]) != "x" {
		t.Fatalf("%q: prefix lost: %s", s, out)
	}
	out = out[1:]
	if !json.Valid(out) || !utf8.Valid(out) {
		t.Fatalf("%q: invalid JSON %q", s, out)
	}
	if strings.ContainsAny(string(out), "\u2028\u2029") {
		t.Fatalf("%q: raw line separator in %q", s, out)
	}
	var back string
	if err := json.Unmarshal(out, &back); err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	if want := replaced(s); back != want {
		t.Fatalf("%q: wrote %s, reads back %q, want %q", s, out, back, want)
	}
	if b := AppendBytes(nil, []byte(s)); string(b) != string(out) {
		t.Fatalf("%q: AppendBytes %s, AppendString %s", s, b, out)
	}
	return out
}

func TestAppendString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", `""`},
		{"plain ascii 0123 <>&", `"plain ascii 0123 <>&"`},
		{`a"b\c/d`, `"a\"b\\c/d"`},
		{"\n\r\t\x00\x01\x08\x0c\x1f\x7f", `"\n\r\t\u0000\u0001\u0008\u000c\u001f` + "\x7f\""},
		{"é ü 日本 🙂", `"é ü 日本 🙂"`},
		{"a\u2028b\u2029c", `"a\u2028b\u2029c"`},
		{"a\xffb", `"a\ufffdb"`},
		{"\xc3", `"\ufffd"`},                     // truncated two-byte sequence
		{"\xe2\x80", `"\ufffd\ufffd"`},           // truncated three-byte sequence
		{"\xed\xa0\x80", `"\ufffd\ufffd\ufffd"`}, // surrogate half
		{"\xc0\xaf", `"\ufffd\ufffd"`},           // overlong '/'
		{"é\xff\"\xfe\n", `"é\ufffd\"\ufffd\n"`},
	} {
		if got := check(t, tc.in); string(got) != tc.want {
			t.Errorf("%q: got %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestAppendStringAllocs(t *testing.T) {
	dst := make([]byte, 0, 128)
	s := "o-000000000042 é \"q\" \xff \u2028"
	if n := testing.AllocsPerRun(100, func() { dst = AppendString(dst[:0], s) }); n != 0 {
		t.Errorf("%v allocs/op, want 0", n)
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "abc", "a\"\\\n\x00", "é\u2028\xff", "\xed\xa0\x80", "🙂\xf0\x9f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { check(t, s) })
}

func BenchmarkAppendString(b *testing.B) {
	for _, s := range []string{"o-000000000042", "a somewhat longer plain ASCII string of about sixty-four bytes..", "naïve café, 日本語"} {
		b.Run("", func(b *testing.B) {
			dst := make([]byte, 0, 128)
			b.SetBytes(int64(len(s)))
			for b.Loop() {
				dst = AppendString(dst[:0], s)
			}
		})
	}
}
