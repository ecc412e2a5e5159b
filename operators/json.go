package operators

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// A small JSON scanner for the hot path. It validates a whole value (RFC 8259 structure;
// string contents are not checked for UTF-8 validity) and records where each top-level member
// of an object lies, so decoding a record never builds maps or allocates.

// maxDepth bounds nesting so hostile input cannot exhaust the stack.
const maxDepth = 512

// member is one top-level member of an object: name at b[ks:ke] (without quotes), value at
// b[vs:ve].
type member struct {
	ks, ke, vs, ve int32
	esc            bool // name contains a backslash escape
}

// jsonError describes a syntax error at a byte offset.
type jsonError struct {
	off int
	msg string
}

func (e *jsonError) Error() string { return fmt.Sprintf("invalid JSON at byte %d: %s", e.off, e.msg) }

func unexpected(b []byte, i int, want string) error {
	if i >= len(b) {
		return &jsonError{i, "unexpected end of input, want " + want}
	}
	return &jsonError{i, fmt.Sprintf("unexpected %s, want %s", quoteByte(b[i]), want)}
}

func quoteByte(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return strconv.QuoteRune(rune(c))
	}
	return fmt.Sprintf("byte 0x%02x", c)
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// strSpecial marks bytes that end the fast loop inside a string.
var strSpecial = func() (t [256]bool) {
	for c := 0; c < 0x20; c++ {
		t[c] = true
	}
	t['"'] = true
	t['\\'] = true
	return t
}()

var hexVal = func() (t [256]int8) {
	for i := range t {
		t[i] = -1
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = int8(c - '0')
	}
	for c := 'a'; c <= 'f'; c++ {
		t[c] = int8(c - 'a' + 10)
		t[c-'a'+'A'] = int8(c - 'a' + 10)
	}
	return t
}()

// scanString scans the string whose opening quote is at b[i]. It returns the index just past
// the closing quote and whether the string contains escapes.
func scanString(b []byte, i int) (end int, esc bool, err error) {
	i++ // opening quote
	for {
		i = skipPlain(b, i)
		for i < len(b) && !strSpecial[b[i]] {
			i++
		}
		if i >= len(b) {
			return 0, false, &jsonError{i, "unterminated string"}
		}
		switch c := b[i]; c {
		case '"':
			return i + 1, esc, nil
		case '\\':
			esc = true
			if i+1 >= len(b) {
				return 0, false, &jsonError{i, "unterminated string"}
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return 0, false, &jsonError{i, "short \\u escape"}
				}
				for k := i + 2; k < i+6; k++ {
					if hexVal[b[k]] < 0 {
						return 0, false, &jsonError{k, "invalid \\u escape"}
					}
				}
				i += 6
			default:
				return 0, false, &jsonError{i + 1, fmt.Sprintf("invalid escape %s", quoteByte(b[i+1]))}
			}
		default:
			return 0, false, &jsonError{i, fmt.Sprintf("control character %s in string", quoteByte(c))}
		}
	}
}

// skipPlain advances i over string bytes that need no attention (not '"', '\\' or a control
// character), eight at a time; it may stop early, never late.
func skipPlain(b []byte, i int) int {
	const lo = 0x0101010101010101
	const hi = 0x8080808080808080
	for i+8 <= len(b) {
		w := binary.LittleEndian.Uint64(b[i:])
		q := w ^ (lo * '"')
		s := w ^ (lo * '\\')
		// A byte is flagged when it is < 0x20 or equals '"' or '\\'. The lowest flagged byte is
		// exact (borrows only produce false positives above a true one).
		m := ((w-lo*0x20)&^w | (q-lo)&^q | (s-lo)&^s) & hi
		if m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
		i += 8
	}
	return i
}

// scanNumber scans a JSON number starting at b[i] and returns the index past it.
func scanNumber(b []byte, i int) (int, error) {
	if i < len(b) && b[i] == '-' {
		i++
	}
	if i >= len(b) {
		return 0, unexpected(b, i, "digit")
	}
	switch {
	case b[i] == '0':
		i++
	case b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return 0, unexpected(b, i, "digit")
	}
	if i < len(b) && b[i] == '.' {
		i++
		s := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == s {
			return 0, unexpected(b, i, "digit after '.'")
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		s := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == s {
			return 0, unexpected(b, i, "exponent digit")
		}
	}
	return i, nil
}

func scanLiteral(b []byte, i int, lit string) (int, error) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return 0, &jsonError{i, "invalid literal, want " + lit}
	}
	return i + len(lit), nil
}

// skipValue validates the value starting at b[i] (no leading space) and returns the index
// past it.
func skipValue(b []byte, i, depth int) (int, error) {
	if i >= len(b) {
		return 0, unexpected(b, i, "value")
	}
	switch c := b[i]; {
	case c == '"':
		end, _, err := scanString(b, i)
		return end, err
	case c == '-' || (c >= '0' && c <= '9'):
		return scanNumber(b, i)
	case c == '{':
		return skipObject(b, i, depth+1)
	case c == '[':
		return skipArray(b, i, depth+1)
	case c == 't':
		return scanLiteral(b, i, "true")
	case c == 'f':
		return scanLiteral(b, i, "false")
	case c == 'n':
		return scanLiteral(b, i, "null")
	default:
		return 0, unexpected(b, i, "value")
	}
}

func skipObject(b []byte, i, depth int) (int, error) {
	if depth > maxDepth {
		return 0, &jsonError{i, "nesting too deep"}
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return 0, unexpected(b, i, "member name")
		}
		end, _, err := scanString(b, i)
		if err != nil {
			return 0, err
		}
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return 0, unexpected(b, i, "':'")
		}
		i = skipSpace(b, i+1)
		if i, err = skipValue(b, i, depth); err != nil {
			return 0, err
		}
		i = skipSpace(b, i)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
			continue
		}
		if i < len(b) && b[i] == '}' {
			return i + 1, nil
		}
		return 0, unexpected(b, i, "',' or '}'")
	}
}

func skipArray(b []byte, i, depth int) (int, error) {
	if depth > maxDepth {
		return 0, &jsonError{i, "nesting too deep"}
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, nil
	}
	for {
		var err error
		if i, err = skipValue(b, i, depth); err != nil {
			return 0, err
		}
		i = skipSpace(b, i)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
			continue
		}
		if i < len(b) && b[i] == ']' {
			return i + 1, nil
		}
		return 0, unexpected(b, i, "',' or ']'")
	}
}

// errNotObject is returned by indexObject for valid JSON that is not an object.
type errNotObject struct{ kind string }

func (e *errNotObject) Error() string { return "value is " + e.kind + ", not a JSON object" }

// indexObject validates b as exactly one JSON object (surrounding space allowed) and appends
// its members to idx[:0].
func indexObject(b []byte, idx []member) ([]member, error) {
	idx = idx[:0]
	if len(b) > 1<<31-1 {
		return idx, &jsonError{0, "value too large"}
	}
	i := skipSpace(b, 0)
	if i >= len(b) {
		return idx, &jsonError{i, "empty value"}
	}
	if b[i] != '{' {
		end, err := skipValue(b, i, 0)
		if err != nil {
			return idx, err
		}
		if end = skipSpace(b, end); end != len(b) {
			return idx, unexpected(b, end, "end of input")
		}
		return idx, &errNotObject{kindOf(b[i])}
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		i++
	} else {
		// The common compact case ("k":v,) is checked inline before falling back to
		// skipSpace / skipValue.
		for {
			if i >= len(b) || b[i] != '"' {
				return idx, unexpected(b, i, "member name")
			}
			ks := i + 1
			end, esc, err := scanString(b, i)
			if err != nil {
				return idx, err
			}
			ke := end - 1
			i = end
			if i >= len(b) || b[i] != ':' {
				if i = skipSpace(b, i); i >= len(b) || b[i] != ':' {
					return idx, unexpected(b, i, "':'")
				}
			}
			i++
			if i < len(b) && isSpace(b[i]) {
				i = skipSpace(b, i)
			}
			vs := i
			if i < len(b) && b[i] == '"' {
				i, _, err = scanString(b, i)
			} else {
				i, err = skipValue(b, i, 1)
			}
			if err != nil {
				return idx, err
			}
			idx = append(idx, member{int32(ks), int32(ke), int32(vs), int32(i), esc})
			if i < len(b) && b[i] == ',' {
				i++
				if i < len(b) && isSpace(b[i]) {
					i = skipSpace(b, i)
				}
				continue
			}
			if i < len(b) && b[i] == '}' {
				i++
				break
			}
			if i = skipSpace(b, i); i < len(b) && b[i] == ',' {
				i = skipSpace(b, i+1)
				continue
			}
			if i < len(b) && b[i] == '}' {
				i++
				break
			}
			return idx, unexpected(b, i, "',' or '}'")
		}
	}
	if i = skipSpace(b, i); i != len(b) {
		return idx, unexpected(b, i, "end of input")
	}
	return idx, nil
}

// kindOf names the JSON type of a value by its first byte.
func kindOf(c byte) string {
	switch {
	case c == '"':
		return "a string"
	case c == '{':
		return "an object"
	case c == '[':
		return "an array"
	case c == 't' || c == 'f':
		return "a boolean"
	case c == 'n':
		return "null"
	default:
		return "a number"
	}
}

// nameEquals reports whether the raw (quoted-content) member name equals name.
func nameEquals(raw []byte, esc bool, name string) bool {
	if !esc {
		return string(raw) == name
	}
	// Slow path: compare the unescaped name without allocating.
	j := 0
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			if j >= len(name) || name[j] != c {
				return false
			}
			i++
			j++
			continue
		}
		var buf [utf8.UTFMax * 2]byte
		n, w := unescapeOne(raw, i, buf[:0])
		if j+len(n) > len(name) || string(n) != name[j:j+len(n)] {
			return false
		}
		i += w
		j += len(n)
	}
	return j == len(name)
}

// findMember scans the (already validated) object o for member name and returns its raw
// value. Later duplicates win, as in encoding/json.
func findMember(o []byte, name string) (raw []byte, ok bool) {
	i := skipSpace(o, 0)
	if i >= len(o) || o[i] != '{' {
		return nil, false
	}
	i = skipSpace(o, i+1)
	if i < len(o) && o[i] == '}' {
		return nil, false
	}
	for i < len(o) && o[i] == '"' {
		end, esc, err := scanString(o, i)
		if err != nil {
			return nil, false
		}
		match := nameEquals(o[i+1:end-1], esc, name)
		i = skipSpace(o, end)
		i = skipSpace(o, i+1) // ':'
		vs := i
		if i, err = skipValue(o, i, 1); err != nil {
			return nil, false
		}
		if match {
			raw, ok = o[vs:i], true
		}
		i = skipSpace(o, i)
		if i < len(o) && o[i] == ',' {
			i = skipSpace(o, i+1)
		}
	}
	return raw, ok
}

// unescapeOne decodes the escape sequence at raw[i] (a backslash), appends its UTF-8 to dst
// and returns dst and the number of input bytes consumed. Input must be validated.
func unescapeOne(raw []byte, i int, dst []byte) ([]byte, int) {
	switch raw[i+1] {
	case 'b':
		return append(dst, '\b'), 2
	case 'f':
		return append(dst, '\f'), 2
	case 'n':
		return append(dst, '\n'), 2
	case 'r':
		return append(dst, '\r'), 2
	case 't':
		return append(dst, '\t'), 2
	case 'u':
		r := hex4(raw[i+2 : i+6])
		if utf16.IsSurrogate(r) {
			if i+12 <= len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' {
				r2 := hex4(raw[i+8 : i+12])
				if dr := utf16.DecodeRune(r, r2); dr != utf8.RuneError {
					return utf8.AppendRune(dst, dr), 12
				}
			}
			return utf8.AppendRune(dst, utf8.RuneError), 6
		}
		return utf8.AppendRune(dst, r), 6
	default: // '"', '\\', '/'
		return append(dst, raw[i+1]), 2
	}
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		r = r<<4 | rune(hexVal[c])
	}
	return r
}

// appendUnescaped appends the unescaped contents of a validated raw string body (between the
// quotes) to dst.
func appendUnescaped(dst, raw []byte) []byte {
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			j := i + 1
			for j < len(raw) && raw[j] != '\\' {
				j++
			}
			dst = append(dst, raw[i:j]...)
			i = j
			continue
		}
		var w int
		dst, w = unescapeOne(raw, i, dst)
		i += w
	}
	return dst
}

// stringBody returns the contents of the validated string value raw (with quotes) and whether
// it has escapes.
func stringBody(raw []byte) ([]byte, bool) {
	body := raw[1 : len(raw)-1]
	for _, c := range body {
		if c == '\\' {
			return body, true
		}
	}
	return body, false
}
