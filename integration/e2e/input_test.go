package e2e

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/valyala/fastjson"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
	"github.com/sluice-dev/sluice/integration/kafkatest"
)

// diagnoseTotals is called when a sink's totals differ from the orders produced: it reads the
// input topic and says on which side the difference is. If the input itself holds orders the
// test did not count (a producer's duplicate), the totals are the input's; otherwise sluice
// counted some orders twice or lost some, and for each differing key whose difference is one
// order it finds that order in the input (same key, same amount) and logs its partition and
// offset, grouped by partition, so the logs of the instance that owned that range can be read.
func diagnoseTotals(ctx context.Context, t *testing.T, brokers, topic string, want, got map[string]workload.Total) {
	t.Helper()
	type order struct {
		part   int32
		offset int64
		cents  int64
	}
	orders := map[string][]order{}
	// copies is where each distinct record (key and value) was written: a value written twice
	// is a duplicate of a producer, and the producer id and epoch of each copy say whether an
	// idempotent producer resent it under a new identity.
	type copyAt struct {
		part     int32
		offset   int64
		producer int64
		epoch    int16
	}
	copies := map[string][]copyAt{}
	input := map[string]workload.Total{}
	var p fastjson.Parser
	err := workload.ReadEach(ctx, kafkatest.SplitBrokers(brokers), topic, func(r *kgo.Record) error {
		v, err := p.ParseBytes(r.Value)
		if err != nil {
			return fmt.Errorf("%s[%d] at %d: %w", r.Topic, r.Partition, r.Offset, err)
		}
		cents, err := workload.ParseCents(v.Get("amount").MarshalTo(nil))
		if err != nil {
			return fmt.Errorf("%s[%d] at %d: %w", r.Topic, r.Partition, r.Offset, err)
		}
		k := string(r.Key)
		tot := input[k]
		tot.SumCents += cents
		tot.Count++
		input[k] = tot
		if w, g := want[k], got[k]; w != g {
			orders[k] = append(orders[k], order{r.Partition, r.Offset, cents})
			id := k + "\x00" + string(r.Value)
			copies[id] = append(copies[id], copyAt{r.Partition, r.Offset, r.ProducerID, r.ProducerEpoch})
		}
		return nil
	})
	if err != nil {
		t.Logf("diagnosis: reading the input %s: %v", topic, err)
		return
	}
	if d := workload.Diff(want, input, 10); d != nil {
		t.Logf("diagnosis: the input topic differs from the orders produced (a producer wrote records the test did not count):\n%s", strings.Join(d, "\n"))
		var dups []string
		for id, cs := range copies {
			if len(cs) < 2 {
				continue
			}
			line := strings.SplitN(id, "\x00", 2)[0] + ":"
			for _, c := range cs {
				line += fmt.Sprintf(" [partition %d offset %d producer %d epoch %d]", c.part, c.offset, c.producer, c.epoch)
			}
			dups = append(dups, line)
		}
		slices.Sort(dups)
		t.Logf("diagnosis: %d records of the differing keys were written more than once:\n%s", len(dups), strings.Join(dups, "\n"))
		return
	}
	t.Logf("diagnosis: the input topic holds exactly the orders produced; the difference is sluice's")
	found := map[int32][]int64{}
	var unmatched []string
	for k, g := range got {
		w := want[k]
		if g == w || g.Count-w.Count != 1 && w.Count-g.Count != 1 {
			if g != w {
				unmatched = append(unmatched, k)
			}
			continue
		}
		diff := g.SumCents - w.SumCents
		if g.Count < w.Count {
			diff = -diff
		}
		i := slices.IndexFunc(orders[k], func(o order) bool { return o.cents == diff })
		if i < 0 {
			unmatched = append(unmatched, k)
			continue
		}
		o := orders[k][i]
		found[o.part] = append(found[o.part], o.offset)
	}
	for k := range want {
		if _, ok := got[k]; !ok {
			unmatched = append(unmatched, k)
		}
	}
	parts := make([]int32, 0, len(found))
	for part := range found {
		parts = append(parts, part)
	}
	slices.Sort(parts)
	for _, part := range parts {
		offs := found[part]
		sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
		t.Logf("diagnosis: partition %d: %d orders counted once too many or too few, offsets %d..%d: %v", part, len(offs), offs[0], offs[len(offs)-1], offs)
	}
	if len(unmatched) > 0 {
		slices.Sort(unmatched)
		t.Logf("diagnosis: %d keys differ by more than one order or by an amount no single order has: %v", len(unmatched), unmatched)
	}
}

// inputCopy is a record that the input topic holds more often than the test produced it.
type inputCopy struct {
	key, value []byte
	part       int32
	offset     int64
	producer   int64
	epoch      int16
}

// inputCopies reads the input topic back (read_committed) and compares it with the records
// the test produced (produced calls its argument with each one's key and value). An idempotent
// producer writes a batch twice when a leader change makes it resend under a new epoch (KIP-360:
// idempotence holds within one producer epoch only); the chaos runs kill leaders under live
// traffic, so the input may hold such copies, and sluice must process each of them like any other
// record. The input is the truth the verifiers hold sluice to: inputCopies returns the records
// held beyond their produced count and logs where they are and which producer epochs wrote them.
// A produced record missing from the input, or a record no test producer wrote, fails the test.
func inputCopies(ctx context.Context, t *testing.T, brokers, topic string, produced func(yield func(key, value []byte) error) error) []inputCopy {
	t.Helper()
	left := map[string]int32{}
	var n int
	if err := produced(func(key, value []byte) error {
		left[string(key)+"\x00"+string(value)]++
		n++
		return nil
	}); err != nil {
		t.Fatalf("enumerating the produced input: %v", err)
	}
	var copies []inputCopy
	var unknown []string
	err := workload.ReadEach(ctx, kafkatest.SplitBrokers(brokers), topic, func(r *kgo.Record) error {
		id := string(r.Key) + "\x00" + string(r.Value)
		c, ok := left[id]
		switch {
		case !ok:
			unknown = append(unknown, fmt.Sprintf("%s[%d] at %d: %s", r.Topic, r.Partition, r.Offset, r.Value))
		case c > 0:
			left[id] = c - 1
		default:
			copies = append(copies, inputCopy{bytes.Clone(r.Key), bytes.Clone(r.Value), r.Partition, r.Offset, r.ProducerID, r.ProducerEpoch})
		}
		return nil
	})
	if err != nil {
		t.Fatalf("reading the input %s back: %v", topic, err)
	}
	var missing int
	for _, c := range left {
		missing += int(c)
	}
	if missing > 0 || len(unknown) > 0 {
		t.Fatalf("the input %s does not hold what the test produced (%d records): %d produced records missing, %d records never produced: %v",
			topic, n, missing, len(unknown), unknown[:min(len(unknown), 10)])
	}
	if len(copies) > 0 {
		lines := make([]string, 0, min(len(copies), 10))
		for _, c := range copies[:min(len(copies), 10)] {
			lines = append(lines, fmt.Sprintf("partition %d offset %d producer %d epoch %d: %s", c.part, c.offset, c.producer, c.epoch, c.value))
		}
		t.Logf("the input holds %d records twice (a producer's resend across a leader change; sluice must count each copy): %s", len(copies), strings.Join(lines, "; "))
	}
	return copies
}

// orderCents returns an order's amount in cents.
func orderCents(value []byte) (int64, error) {
	v, err := fastjson.ParseBytes(value)
	if err != nil {
		return 0, err
	}
	return workload.ParseCents(v.Get("amount").MarshalTo(nil))
}
