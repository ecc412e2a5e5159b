package procstat

import (
	"os"
	"path/filepath"
	"testing"
)

func TestVmHWM(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, text string
		want       int64
		ok         bool
	}{
		{"present", "Name:\tjava\nVmPeak:\t  9000 kB\nVmHWM:\t  123456 kB\nVmRSS:\t 100 kB\n", 123456, true},
		{"missing", "Name:\tjava\nVmRSS:\t 100 kB\n", 0, false},
		{"garbage", "VmHWM:\t  lots kB\n", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name)
			if err := os.WriteFile(p, []byte(tc.text), 0o644); err != nil {
				t.Fatal(err)
			}
			got, ok := VmHWM(p)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("VmHWM = %d, %v; want %d, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestPeakRSSOfSelf(t *testing.T) {
	kib, ok := PeakRSS(os.Getpid())
	if !ok || kib <= 0 {
		t.Fatalf("PeakRSS(self) = %d, %v", kib, ok)
	}
}
