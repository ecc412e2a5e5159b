package producer

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Known values from Kafka's own tests (UtilsTest.testMurmur2) and its default partitioner.
func TestMurmur2(t *testing.T) {
	cases := map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	}
	for in, want := range cases {
		if got := int32(Murmur2([]byte(in))); got != want {
			t.Errorf("murmur2(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestPartitioner(t *testing.T) {
	p := Partitioner().ForTopic("t")
	if got := p.Partition(&kgo.Record{Partition: 5}, 8); got != 5 {
		t.Fatalf("explicit partition moved to %d", got)
	}
	k := []byte("c-0000042")
	want := int(Murmur2(k)&0x7fffffff) % 8
	if got := p.Partition(&kgo.Record{Partition: -1, Key: k}, 8); got != want {
		t.Fatalf("keyed record went to %d, want %d", got, want)
	}
	if got := p.Partition(&kgo.Record{Partition: -1}, 8); got != 0 {
		t.Fatalf("null key went to %d", got)
	}
}
