// Package jsonstr writes JSON string literals: the one escaper of package operators and
// operators/avro (which cannot import each other's escaper without a cycle in their tests).
package jsonstr

import (
	"unicode/utf8"
	"unsafe"
)

const hexDigits = "0123456789abcdef"

// plain[c] is whether the byte c is written as is without a closer look: printable ASCII other
// than '"' and '\\'. Every other byte (control, quote, backslash, start of a multi-byte
// sequence) takes the slow path.
var plain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// AppendString appends s to dst as a JSON string literal, quotes included. Control characters,
// '"' and '\\' are escaped (\n, \r, \t by name, the rest as \u00XX), and so are U+2028 and
// U+2029 (line separators to JavaScript). Each byte of invalid UTF-8 becomes \ufffd, as
// encoding/json does, so the output is always valid UTF-8 and valid JSON. '<', '>' and '&' are
// written as is. It allocates only to grow dst.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if plain[c] {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// AppendBytes is AppendString for a byte slice, without copying it.
func AppendBytes(dst, b []byte) []byte {
	return AppendString(dst, unsafe.String(unsafe.SliceData(b), len(b)))
}
