package operators

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/configs"
)

// TestTopBoundDropsOnlyWhatTheTopDrops feeds random records (few keys, values that often tie,
// out-of-order times) to a top's bound and checks each record it drops against a top that sees
// every record: the record would not have entered (without ties: n records before it better or
// equal; with ties: n strictly better), in any of its windows, at its arrival. A window the
// watermark may have closed keeps its records. And the bound must drop something.
func TestTopBoundDropsOnlyWhatTheTopDrops(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 3))
		cfg := configs.Top{N: 1 + rng.IntN(3), By: "v", Order: []string{configs.OrderDesc, configs.OrderAsc}[rng.IntN(2)]}
		if rng.IntN(3) > 0 {
			cfg.Ties = rng.IntN(2) == 0
			size := time.Duration([]int{100, 200}[rng.IntN(2)]) * time.Millisecond
			cfg.Window = &configs.Window{Tumbling: size}
			if rng.IntN(2) == 0 {
				cfg.Window = &configs.Window{Hopping: size, Advance: size / 2}
			}
		}
		var b *TopBound
		var win *Windows
		if cfg.Window == nil {
			top, err := NewTop("t", cfg)
			if err != nil {
				t.Fatal(err)
			}
			b = top.Bound()
		} else {
			wt, err := NewWindowTop("t", cfg)
			if err != nil {
				t.Fatal(err)
			}
			b, win = wt.Bound(), wt.win
		}
		slots := map[string][]byte{}
		slot := func(k []byte) []byte { return slots[string(k)] }
		add := func(k []byte) []byte {
			s := make([]byte, b.SlotSize())
			slots[string(k)] = s
			return s
		}
		// The reference: every value each (key, window start) has seen, by arrival.
		seen := map[string][]int{}
		better := func(a, c int) bool {
			return cfg.Order == configs.OrderAsc && a < c || cfg.Order != configs.OrderAsc && a > c
		}
		enters := func(k string, v int) bool {
			n := 0
			for _, w := range seen[k] {
				if better(w, v) || w == v && !cfg.Ties {
					n++
				}
			}
			return n < cfg.N
		}
		dropped, wm := 0, int64(math.MinInt64)
		for i := range 300 {
			key := fmt.Sprintf("k%d", rng.IntN(3))
			v := rng.IntN(8)
			ts := int64(i*7) - rng.Int64N(150)
			if wm < ts-100 {
				wm = ts - 100
			}
			r := &Record{Key: []byte(key), Time: ts, Value: fmt.Appendf(nil, `{"v":%d}`, v)}
			if rng.IntN(30) == 0 {
				r.Value = []byte(`{"v":"x"}`) // refused by the top: goes on
			}
			starts := []int64{0}
			if win != nil {
				starts = nil
				last := floorDiv(ts, win.Advance) * win.Advance
				for s := last - win.Size + win.Advance; s <= last; s += win.Advance {
					starts = append(starts, s)
				}
			}
			drop := b.Admit([]byte(key), r, wm, slot, add)
			if drop {
				dropped++
				if r.Value[5] == '"' {
					t.Fatalf("seed %d: record %d: dropped a value the top refuses", seed, i)
				}
			}
			for _, s := range starts {
				k := key + "/" + fmt.Sprint(s)
				if win != nil && win.Close(s) <= wm {
					if drop {
						t.Fatalf("seed %d (%+v): record %d dropped though its window at %d may be closed (wm %d)", seed, cfg, i, s, wm)
					}
					continue // the reader may take it as late: the bound keeps nothing of it
				}
				if r.Value[5] == '"' {
					continue
				}
				if drop && enters(k, v) {
					t.Fatalf("seed %d (%+v): record %d (key %s, value %d) dropped, but it enters window %d: %v", seed, cfg, i, key, v, s, seen[k])
				}
				if !drop {
					seen[k] = append(seen[k], v)
				}
			}
		}
		if dropped == 0 {
			t.Errorf("seed %d (%+v): the bound dropped nothing", seed, cfg)
		}
	}
}

// TestTopBoundSlot checks a slot's layout: a count, then the n best values in rank order.
func TestTopBoundSlot(t *testing.T) {
	top, err := NewTop("t", configs.Top{N: 3, By: "v", Order: configs.OrderDesc})
	if err != nil {
		t.Fatal(err)
	}
	b := top.Bound()
	s := make([]byte, b.SlotSize())
	for _, v := range []string{"5", "7", "1", "7", "9", "6"} {
		v, _ := parseDecimal([]byte(v))
		b.enter(s, v)
	}
	if n := binary.LittleEndian.Uint16(s); n != 3 {
		t.Fatalf("count %d, want 3", n)
	}
	for i, want := range []string{"9", "7", "7"} {
		if w, _ := parseDecimal([]byte(want)); loadDec(s[2+16*i:]) != w {
			t.Errorf("slot value %d is not %s", i, want)
		}
	}
}
