package sorter

import (
	"fmt"
	"testing"
	"time"
)

func BenchmarkTmpLookAhead(b *testing.B) {
	s, _ := fillOneSegment(b, benchKeys(100_000), 1_000_000)
	sortSegment(s.chunks, s.seg, true)
	for _, la := range []int{0, 4, 8, 16, 0, 4, 8, 16} {
		b.Run(fmt.Sprint(la), func(b *testing.B) {
			var cpu time.Duration
			for i := 0; i < b.N; i++ {
				c0 := cpuTime()
				src := &source{seg: s.seg, chunks: s.chunks, la: la}
				n := 0
				for {
					ok, _ := src.next()
					if !ok {
						break
					}
					n += len(src.key)
				}
				cpu += cpuTime() - c0
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/1e6, "cpu-ns/entry")
		})
	}
}
