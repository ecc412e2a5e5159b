package main

import (
	"bytes"
	"image/png"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestBucketPerSecond(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	obs := []observation{
		{at(-100), 400 * time.Millisecond}, // visible before the phase began: left out
		{at(100), 10 * time.Millisecond},
		{at(500), 30 * time.Millisecond},
		{at(999), 20 * time.Millisecond},
		// nothing in second 1
		{at(2000), 5 * time.Millisecond},
	}
	// Second 3: 200 records of 1..200 ms, visible in shuffled order. Sorted, p50 is the 101st
	// (index 100) and p99 the 199th (index 198).
	rng := rand.New(rand.NewPCG(1, 2))
	for _, i := range rng.Perm(200) {
		obs = append(obs, observation{at(3000 + i), time.Duration(i+1) * time.Millisecond})
	}
	want := []point{
		{second: 0, records: 3, p50: 20 * time.Millisecond, p99: 30 * time.Millisecond, max: 30 * time.Millisecond},
		{second: 1},
		{second: 2, records: 1, p50: 5 * time.Millisecond, p99: 5 * time.Millisecond, max: 5 * time.Millisecond},
		{second: 3, records: 200, p50: 101 * time.Millisecond, p99: 199 * time.Millisecond, max: 200 * time.Millisecond},
	}
	got := bucket(obs, t0)
	if len(got) != len(want) {
		t.Fatalf("got %d points, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("second %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	if got := bucket(nil, t0); len(got) != 0 {
		t.Fatalf("no observations: got %+v", got)
	}
}

func TestTrackerObservations(t *testing.T) {
	tr := newTracker()
	t0 := time.Unix(1000, 0)
	tr.produced("a", 1, t0)
	tr.produced("a", 2, t0.Add(500*time.Millisecond))
	tr.visible("a", 2, t0.Add(1200*time.Millisecond)) // both: 1200 and 700 ms, in second 1
	pts := bucket(tr.observations(), t0)
	want := []point{{second: 0}, {second: 1, records: 2, p50: 1200 * time.Millisecond, p99: 1200 * time.Millisecond, max: 1200 * time.Millisecond}}
	if len(pts) != 2 || pts[0] != want[0] || pts[1] != want[1] {
		t.Fatalf("got %+v, want %+v", pts, want)
	}
}

func TestChartPNG(t *testing.T) {
	for _, logY := range []bool{true, false} {
		c := chart{
			title: "p99 per second", xLabel: "seconds into the phase", yLabel: "p99 (ms)", logY: logY,
			lines: []series{
				{label: "floor", x: []float64{0, 1, 2, 3}, y: []float64{0, 3, 2, 4}},
				{label: "sluice-auto", x: []float64{0, 1, 2, 3}, y: []float64{120, math.NaN(), 80, 2500}},
			},
		}
		img := c.draw(900, 500)
		var buf bytes.Buffer
		if err := png.Encode(&buf, img); err != nil {
			t.Fatal(err)
		}
		dec, err := png.Decode(&buf)
		if err != nil {
			t.Fatalf("log %v: decoding: %v", logY, err)
		}
		if b := dec.Bounds(); b.Dx() != 900 || b.Dy() != 500 {
			t.Fatalf("log %v: size %v, want 900x500", logY, b)
		}
		// Both lines' colours are on the image (their lines and legend keys).
		for i := range c.lines {
			found := false
			for y := 0; y < 500 && !found; y++ {
				for x := 0; x < 900 && !found; x++ {
					r, g, b, _ := dec.At(x, y).RGBA()
					p := palette[i]
					found = r>>8 == uint32(p.R) && g>>8 == uint32(p.G) && b>>8 == uint32(p.B)
				}
			}
			if !found {
				t.Errorf("log %v: no pixel of line %d's colour", logY, i)
			}
		}
	}
}

func TestNiceStep(t *testing.T) {
	for _, c := range []struct{ raw, want float64 }{{0.3, 0.5}, {1, 1}, {3, 5}, {7, 10}, {12, 20}, {450, 500}, {0, 1}} {
		if got := niceStep(c.raw); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("niceStep(%v) = %v, want %v", c.raw, got, c.want)
		}
	}
}
