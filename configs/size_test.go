package configs

import (
	"strings"
	"testing"
)

func TestSizeParse(t *testing.T) {
	tests := []struct {
		in   string
		want Size
		err  string
	}{
		{"256MiB", 256 << 20, ""},
		{"1GiB", 1 << 30, ""},
		{"512KiB", 512 << 10, ""},
		{"100MB", 100e6, ""},
		{"1024", 1024, ""},
		{"0", 0, ""},
		{"7B", 7, ""},
		{"2TiB", 2 << 40, ""},
		{"3TB", 3e12, ""},
		{"5KB", 5000, ""},
		{"1GB", 1e9, ""},
		{"256mib", 256 << 20, ""},
		{" 64 MiB ", 64 << 20, ""},
		{"1.5GiB", 3 << 29, ""},
		{"0.5KiB", 512, ""},
		{"8388608TiB", 0, "too large"},
		{"8388607TiB", 8388607 << 40, ""},
		{"9223372036854775807", 9223372036854775807, ""},
		{"9223372036854775808", 0, "too large"},
		{"0.3KiB", 0, "not a whole number of bytes"},
		{"", 0, "empty size"},
		{"MiB", 0, "invalid size"},
		{"-1MiB", 0, "invalid size"},
		{"1.MiB", 0, "invalid size"},
		{".5MiB", 0, "invalid size"},
		{"1e3", 0, `unknown unit "e3"`},
		{"256M", 0, `unknown unit "M"`},
		{"256 MiB B", 0, "unknown unit"},
		{"1_000", 0, "unknown unit"},
		{"0x10", 0, "unknown unit"},
		{strings.Repeat("9", 50), 0, "invalid size"},
	}
	for _, tt := range tests {
		var s Size = 42
		err := s.UnmarshalText([]byte(tt.in))
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: got %v (%d), want error containing %q", tt.in, err, s, tt.err)
			}
			if s != 42 {
				t.Errorf("%q: value changed on error", tt.in)
			}
			continue
		}
		if err != nil || s != tt.want {
			t.Errorf("%q: got %d, %v; want %d", tt.in, s, err, tt.want)
		}
	}
}

func TestSizeString(t *testing.T) {
	tests := []struct {
		in   Size
		want string
	}{
		{0, "0B"},
		{1, "1B"},
		{1023, "1023B"},
		{1024, "1KiB"},
		{1000, "1KB"},
		{256 * MiB, "256MiB"},
		{GiB, "1GiB"},
		{3 * GiB / 2, "1536MiB"},
		{100e6, "100MB"},
		{2048000, "2000KiB"},
		{5 * TiB, "5TiB"},
		{-5, "-5B"},
	}
	for _, tt := range tests {
		if got := tt.in.String(); got != tt.want {
			t.Errorf("%d: got %q, want %q", int64(tt.in), got, tt.want)
		}
		b, _ := tt.in.MarshalText()
		if string(b) != tt.want {
			t.Errorf("%d: MarshalText %q", int64(tt.in), b)
		}
	}
}

// FuzzSizeUnmarshalText checks that parsing never panics, never yields a negative size, and
// that every parsed size prints to a string that parses back to the same value.
func FuzzSizeUnmarshalText(f *testing.F) {
	for _, seed := range []string{"256MiB", "1GiB", "512KiB", "100MB", "1024", "1.5GiB", "0", "", "9223372036854775807", "8388608TiB", "1e3", " 1 kb"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		var s Size
		if err := s.UnmarshalText([]byte(in)); err != nil {
			if s != 0 {
				t.Fatalf("%q: error %v but value set to %d", in, err, s)
			}
			return
		}
		if s < 0 {
			t.Fatalf("%q: negative size %d", in, s)
		}
		var back Size
		if err := back.UnmarshalText([]byte(s.String())); err != nil || back != s {
			t.Fatalf("%q -> %d -> %q -> %d, %v", in, s, s.String(), back, err)
		}
	})
}
