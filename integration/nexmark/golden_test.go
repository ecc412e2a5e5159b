package nexmark

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strconv"
	"strings"
	"testing"
)

// goldenSeed is one seed's part of testdata/flink_golden.txt.
type goldenSeed struct {
	seed, base int64
	events     []string         // JSON of the first events
	sha        map[int64]string // n -> SHA-256 of the first n events' JSON lines
}

func readGolden(t *testing.T) []*goldenSeed {
	t.Helper()
	f, err := os.Open("testdata/flink_golden.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []*goldenSeed
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		word, rest, _ := strings.Cut(line, " ")
		switch word {
		case "seed":
			f := strings.Fields(line)
			seed, _ := strconv.ParseInt(f[1], 10, 64)
			base, _ := strconv.ParseInt(f[3], 10, 64)
			out = append(out, &goldenSeed{seed: seed, base: base, sha: map[int64]string{}})
		case "event":
			_, js, _ := strings.Cut(rest, " ")
			g := out[len(out)-1]
			g.events = append(g.events, js)
		case "sha256":
			n, h, _ := strings.Cut(rest, " ")
			v, _ := strconv.ParseInt(n, 10, 64)
			out[len(out)-1].sha[v] = h
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("testdata/flink_golden.txt holds no seed")
	}
	return out
}

// TestGoldenFlink compares the port with Flink Nexmark's own Java generator, run with seeded
// SplittableRandoms by testdata/java/golden.sh: the first events' JSON line by line, and a
// SHA-256 of every event's JSON after 1,000, 100,000 and (without -short) 1,000,000 events.
// Equal hashes mean equal events: every id, foreign key, time, price, string and the random
// sequences' every draw, in the same order, with the Flink defaults of DefaultConfig.
func TestGoldenFlink(t *testing.T) {
	for _, gs := range readGolden(t) {
		t.Run("seed="+strconv.FormatInt(gs.seed, 10), func(t *testing.T) {
			cfg := DefaultConfig(gs.seed, 0)
			cfg.BaseTime = gs.base
			g, err := NewGenerator(cfg)
			if err != nil {
				t.Fatal(err)
			}
			var last int64
			for n := range gs.sha {
				if testing.Short() && n > 100_000 {
					continue
				}
				last = max(last, n)
			}
			h := sha256.New()
			var buf []byte
			checked := 0
			for i := int64(0); i < last; i++ {
				ev, _ := g.Next()
				buf = append(ev.AppendJSON(buf[:0]), '\n')
				h.Write(buf)
				if i < int64(len(gs.events)) {
					if got := string(buf[:len(buf)-1]); got != gs.events[i] {
						t.Fatalf("event %d differs from Flink's:\n got  %s\n want %s", i, got, gs.events[i])
					}
				}
				if want, ok := gs.sha[i+1]; ok {
					if got := hex.EncodeToString(h.Sum(nil)); got != want {
						t.Fatalf("the first %d events differ from Flink's (SHA-256 %s, want %s)", i+1, got, want)
					}
					checked++
				}
			}
			t.Logf("seed %d: first %d events equal to Flink's, byte for byte; %d hashes up to %d events equal", gs.seed, len(gs.events), checked, last)
		})
	}
}
