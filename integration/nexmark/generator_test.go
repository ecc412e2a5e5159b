package nexmark

import (
	"encoding/json"
	"math"
	"math/bits"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestSplittableRandom checks the port of java.util.SplittableRandom against values OpenJDK 17
// printed for new SplittableRandom(42): nextLong(), nextInt(), nextInt(100), nextInt(64),
// nextDouble(), the xor of 1000 nextInt((1<<30)+1), Math.abs(nextLong() % 3000000000L).
func TestSplittableRandom(t *testing.T) {
	r := newSplittableRandom(42)
	if got, want := r.nextLong(), int64(-4767286540954276203); got != want {
		t.Errorf("nextLong() = %d, want %d", got, want)
	}
	if got, want := r.nextInt(), int32(909395113); got != want {
		t.Errorf("nextInt() = %d, want %d", got, want)
	}
	if got, want := r.nextIntn(100), int32(81); got != want {
		t.Errorf("nextInt(100) = %d, want %d", got, want)
	}
	if got, want := r.nextIntn(64), int32(8); got != want {
		t.Errorf("nextInt(64) = %d, want %d", got, want)
	}
	if got, want := r.nextDouble(), 0.03803016854024621; got != want {
		t.Errorf("nextDouble() = %v, want %v", got, want)
	}
	// A bound just above 2^30 rejects about half the draws (Java's loop with its int overflow).
	var x int32
	for range 1000 {
		x ^= r.nextIntn(1<<30 + 1)
	}
	if want := int32(819442692); x != want {
		t.Errorf("xor of 1000 nextInt(2^30+1) = %d, want %d", x, want)
	}
	if got, want := r.nextLongn(3_000_000_000), int64(2439548743); got != want {
		t.Errorf("Math.abs(nextLong() %% 3e9) = %d, want %d", got, want)
	}
}

// TestJavaRound checks Math.round's ties toward positive infinity.
func TestJavaRound(t *testing.T) {
	for _, c := range []struct {
		x    float64
		want int64
	}{{0.5, 1}, {1.5, 2}, {2.5, 3}, {-0.5, 0}, {-2.5, -2}, {-2.6, -3}, {0.49999999999999994, 0}, {13.6, 14}, {1e300, math.MaxInt64}, {math.NaN(), 0}} {
		if got := javaRound(c.x); got != c.want {
			t.Errorf("javaRound(%v) = %d, want %d", c.x, got, c.want)
		}
	}
}

// stat accumulates a share: hits out of n.
type stat struct{ hits, n int64 }

func (s *stat) add(hit bool) {
	s.n++
	if hit {
		s.hits++
	}
}

// near checks that the share is within 5 standard deviations of p (a binomial share).
func (s stat) near(t *testing.T, what string, p float64) {
	t.Helper()
	got := float64(s.hits) / float64(s.n)
	sd := math.Sqrt(p * (1 - p) / float64(s.n))
	if math.Abs(got-p) > 5*sd+1e-12 {
		t.Errorf("%s: share %.5f of %d, want %.5f ± %.5f (5σ)", what, got, s.n, p, 5*sd)
	} else {
		t.Logf("%s: share %.5f of %d (Java's formulas imply %.5f ± %.5f)", what, got, s.n, p, 5*sd)
	}
}

// TestDistributions generates 500,000 events with the default configuration and checks them
// against what Flink's generator sources imply, computed here from the Java formulas, not from
// the port's helpers:
//
//   - kinds: event i has id i+2 (first event id 1 + first event number 1) and is a person if
//     id % 50 == 0, an auction if it is 1 to 3, else a bid: exact counts 1/3/46 per 50;
//   - ids: persons and auctions numbered consecutively (from 1001: id 1 is never generated);
//   - event time: event i has dateTime base + (i+1)·100µs rounded down to ms, so exactly 10
//     events per millisecond, 10,000 per second, never decreasing;
//   - bids: the auction is the hot one (the first of the latest batch of 100 auctions) or one of
//     the 100 latest auctions or 10 next; hot share 1/2 + 1/2·1/111. The bidder is the hot
//     one (second person of the latest batch of 100) or one of the 1000 latest people or 10
//     next, numbered from 2000 (Flink adds FIRST_PERSON_ID twice); hot share 3/4 + 1/4·1/1010;
//   - auctions: the seller hot (first person of the batch) 3/4 + 1/4·1/1010, else as a bidder
//     but from 1000; category 10 to 14 uniform; expiry 1 to 2 × the time of 1666 events later
//     (≈ 166 ms), mean ≈ 167 ms; reserve = initial bid + another price;
//   - prices: 10^(6u)·100 cents rounded, u uniform: log10(price/100) uniform on [0, 6), so a
//     share k/6 below 10^k dollars; every price from 100 to 10^8 cents;
//   - channels: half the bids from the 4 hot channels (1/8 each) with their 4 fixed URLs, half
//     from "channel-N", N uniform below 10,000, whose URL ends in &channel_id=|reverse(N)| for
//     9 in 10 channels;
//   - sizes: fixed fields + extra average avgSize - 0.5 (extra uniform in [d - δ, d + δ), δ =
//     round(0.2·d)) for persons (200), auctions (500) and bids (100);
//   - strings: names "First Last" of the Java lists, emails x@y.com, credit cards of 4 × 4
//     digits, the 10 cities and 6 states, item names of at most 19 characters;
//   - every value is JSON that reads back as the event.
func TestDistributions(t *testing.T) {
	const n = 500_000
	cfg := DefaultConfig(1, n)
	g, err := NewGenerator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var (
		counts                      [3]int64
		lastPersonID, lastAuctionID int64 = 1000, 1000
		hotAuction, hotBidder       stat
		hotSeller                   stat
		hotChannel, channelID       stat
		perHot                      = map[string]int64{}
		hotURL                      = map[string]string{}
		priceBelow                  [6]stat
		category                    [5]int64
		expirySum                   float64
		sizeSum                     [3]float64
		perSecond                   = map[int64]int64{}
		prevTime                    int64
		cities, states                    = map[string]bool{}, map[string]bool{}
		email                             = regexp.MustCompile(`^([a-z]([a-z ]*[a-z])?)?@([a-z]([a-z ]*[a-z])?)?\.com$`) // trimmed: may be empty
		card                              = regexp.MustCompile(`^\d{4} \d{4} \d{4} \d{4}$`)
		lower                             = regexp.MustCompile(`^([a-z]([a-z ]*[a-z])?)?$`) // trimmed: may be empty
		channelN                          = regexp.MustCompile(`^channel-(\d+)$`)
		firsts, lasts                     = strings.Split("Peter,Paul,Luke,John,Saul,Vicky,Kate,Julie,Sarah,Deiter,Walter", ","), strings.Split("Shultz,Abrams,Spencer,White,Bartels,Walton,Smith,Jones,Noris", ",")
		minPrice, maxPrice          int64 = math.MaxInt64, 0
	)
	for _, c := range strings.Split("Phoenix,Los Angeles,San Francisco,Boise,Portland,Bend,Redmond,Seattle,Kent,Cheyenne", ",") {
		cities[c] = true
	}
	for _, s := range strings.Split("AZ,CA,ID,OR,WA,WY", ",") {
		states[s] = true
	}
	price := func(p int64) {
		minPrice, maxPrice = min(minPrice, p), max(maxPrice, p)
		for k := 1; k <= 5; k++ {
			priceBelow[k].add(p < 100*int64(math.Pow10(k)))
		}
	}
	var buf []byte
	for i := int64(0); i < n; i++ {
		ev, ok := g.Next()
		if !ok {
			t.Fatalf("generator ended after %d events", i)
		}
		id := i + 2
		want := KindBid
		switch r := id % 50; {
		case r == 0:
			want = KindPerson
		case r <= 3:
			want = KindAuction
		}
		if ev.Kind != want {
			t.Fatalf("event %d (id %d) is a %v, want a %v", i, id, ev.Kind, want)
		}
		counts[ev.Kind]++

		ts := cfg.BaseTime + (i+1)*100/1000
		if ev.Time() != ts {
			t.Fatalf("event %d: dateTime %d, want %d", i, ev.Time(), ts)
		}
		if ev.Time() < prevTime {
			t.Fatalf("event %d: time went back", i)
		}
		prevTime = ev.Time()
		perSecond[(ev.Time()-cfg.BaseTime)/1000]++

		// The latest person and auction, from the id formula: person p (from 0) has id 50p, the
		// auctions of epoch e have ids 50e+1..3 and numbers 3e..3e+2.
		lastPerson := id / 50                 // lastBase0PersonId
		lastAuction := (id/50)*3 + 2          // lastBase0AuctionId for a bid
		active := min(lastPerson+1, 1000)     // numActivePeople
		inFlightLo := max(lastAuction-100, 0) // numInFlightAuctions
		switch ev.Kind {
		case KindPerson:
			p := ev.Person
			if p.ID != lastPersonID+1 {
				t.Fatalf("event %d: person %d after %d", i, p.ID, lastPersonID)
			}
			lastPersonID = p.ID
			first, last, _ := strings.Cut(p.Name, " ")
			if !slices.Contains(firsts, first) || !slices.Contains(lasts, last) {
				t.Fatalf("person name %q", p.Name)
			}
			if !email.MatchString(p.EmailAddress) || !card.MatchString(p.CreditCard) || !cities[p.City] || !states[p.State] {
				t.Fatalf("person %+v", p)
			}
			size := 8 + len(p.Name) + len(p.EmailAddress) + len(p.CreditCard) + len(p.City) + len(p.State)
			checkExtra(t, "person", size, 200, p.Extra)
			sizeSum[KindPerson] += float64(size + len(p.Extra))
		case KindAuction:
			a := ev.Auction
			if a.ID != lastAuctionID+1 {
				t.Fatalf("event %d: auction %d after %d", i, a.ID, lastAuctionID)
			}
			lastAuctionID = a.ID
			hot := (lastPerson/100)*100 + 1000
			isHot := a.Seller == hot
			hotSeller.add(isHot)
			if !isHot && (a.Seller < lastPerson+1-active+1000 || a.Seller > lastPerson+1+9+1000) {
				t.Fatalf("event %d: seller %d outside the active people", i, a.Seller)
			}
			if a.Category < 10 || a.Category > 14 {
				t.Fatalf("category %d", a.Category)
			}
			category[a.Category-10]++
			horizon := cfg.BaseTime + (i+1+1666)*100/1000 - a.DateTime
			if d := a.Expires - a.DateTime; d < 1 || d > 2*horizon {
				t.Fatalf("event %d: auction lasts %d ms, want 1 to %d", i, d, 2*horizon)
			}
			expirySum += float64(a.Expires - a.DateTime)
			price(a.InitialBid)
			if a.Reserve < a.InitialBid+100 {
				t.Fatalf("reserve %d below initial bid %d + $1", a.Reserve, a.InitialBid)
			}
			if len(a.ItemName) > 19 || len(a.Description) > 99 || !lower.MatchString(a.ItemName) {
				t.Fatalf("auction strings %q %q", a.ItemName, a.Description)
			}
			size := 8 + len(a.ItemName) + len(a.Description) + 40
			checkExtra(t, "auction", size, 500, a.Extra)
			sizeSum[KindAuction] += float64(size + len(a.Extra))
		case KindBid:
			b := ev.Bid
			hot := (lastAuction/100)*100 + 1000
			isHot := b.Auction == hot
			hotAuction.add(isHot)
			if !isHot && (b.Auction < inFlightLo+1000 || b.Auction > lastAuction+10+1000) {
				t.Fatalf("event %d: auction %d outside the in-flight auctions [%d, %d]", i, b.Auction, inFlightLo+1000, lastAuction+1010)
			}
			hotB := (lastPerson/100)*100 + 1 + 2000
			isHotB := b.Bidder == hotB
			hotBidder.add(isHotB)
			if !isHotB && (b.Bidder < lastPerson+1-active+2000 || b.Bidder > lastPerson+1+9+2000) {
				t.Fatalf("event %d: bidder %d outside the active people", i, b.Bidder)
			}
			price(b.Price)
			if slices.Contains(hotChannels[:], b.Channel) {
				hotChannel.add(true)
				perHot[b.Channel]++
				if u, seen := hotURL[b.Channel]; seen && u != b.URL {
					t.Fatalf("hot channel %s with two URLs", b.Channel)
				}
				hotURL[b.Channel] = b.URL
			} else {
				hotChannel.add(false)
				m := channelN.FindStringSubmatch(b.Channel)
				if m == nil {
					t.Fatalf("channel %q", b.Channel)
				}
				num, _ := strconv.Atoi(m[1])
				if num >= 10_000 {
					t.Fatalf("channel %q beyond 10,000", b.Channel)
				}
				rev := int32(bits.Reverse32(uint32(num)))
				if rev < 0 {
					rev = -rev
				}
				has := strings.HasSuffix(b.URL, "&channel_id="+strconv.Itoa(int(rev)))
				channelID.add(has)
				if !has && strings.Contains(b.URL, "channel_id") {
					t.Fatalf("channel %s: url %s", b.Channel, b.URL)
				}
			}
			if !strings.HasPrefix(b.URL, "https://www.nexmark.com/") || !strings.Contains(b.URL, "/item.htm?query=1") {
				t.Fatalf("url %q", b.URL)
			}
			checkExtra(t, "bid", 32, 100, b.Extra)
			sizeSum[KindBid] += float64(32 + len(b.Extra))
		}
		if i%97 == 0 { // JSON round trip, on a sample
			buf = ev.AppendJSON(buf[:0])
			checkJSON(t, &ev, buf)
		}
	}

	if counts[KindPerson] != n/50 || counts[KindAuction] != 3*n/50 || counts[KindBid] != 46*n/50 {
		t.Errorf("kinds %v, want exactly 1/3/46 per 50 of %d", counts, n)
	}
	t.Logf("kinds: %d persons, %d auctions, %d bids (1/3/46 per 50); ids consecutive to person %d, auction %d", counts[0], counts[1], counts[2], lastPersonID, lastAuctionID)
	for s, c := range perSecond {
		if s < int64(n/10_000)-1 && s > 0 && c != 10_000 {
			t.Errorf("second %d has %d events, want 10,000", s, c)
		}
	}
	t.Logf("event time: 10 events per ms, %d seconds of 10,000 events", len(perSecond))

	hotAuction.near(t, "bids for the hot auction", 0.5+0.5/111)
	hotBidder.near(t, "bids by the hot bidder", 0.75+0.25/1010)
	hotSeller.near(t, "auctions by the hot seller", 0.75+0.25/1010)
	hotChannel.near(t, "bids from a hot channel", 0.5)
	for _, c := range hotChannels {
		(stat{perHot[c], hotChannel.n}).near(t, "bids from "+c, 1.0/8)
	}
	channelID.near(t, "other channels' URLs with a channel_id", 0.9)
	for k := 1; k <= 5; k++ {
		priceBelow[k].near(t, "prices below $"+strconv.FormatFloat(math.Pow10(k), 'f', 0, 64), float64(k)/6)
	}
	if minPrice < 100 || maxPrice > 100_000_000 {
		t.Errorf("prices from %d to %d cents, want 100 to 10^8", minPrice, maxPrice)
	}
	for c, k := range category {
		(stat{k, counts[KindAuction]}).near(t, "category "+strconv.Itoa(c+10), 0.2)
	}
	// Expiry: 1 + uniform [0, 2h) with h = 166 or 167 ms (1666 events of 0.1 ms, rounded).
	if mean := expirySum / float64(counts[KindAuction]); math.Abs(mean-167) > 2 {
		t.Errorf("mean auction length %.1f ms, want ≈ 167", mean)
	} else {
		t.Logf("mean auction length %.1f ms (≈ 1 + 166.6)", mean)
	}
	for k, avg := range map[Kind]float64{KindPerson: 200, KindAuction: 500, KindBid: 100} {
		mean := sizeSum[k] / float64(counts[k])
		if math.Abs(mean-(avg-0.5)) > 1 {
			t.Errorf("%v: mean size %.2f, want ≈ %.1f", k, mean, avg-0.5)
		} else {
			t.Logf("%v: mean size (fixed fields + extra) %.2f, want ≈ %.1f", k, mean, avg-0.5)
		}
	}
}

// checkExtra checks nextExtra's length bounds: avg - size ± round(0.2 × (avg - size)).
func checkExtra(t *testing.T, what string, size, avg int, extra string) {
	t.Helper()
	d := avg - size
	if d < 0 {
		if extra != "" {
			t.Fatalf("%s: extra %q for a size above the average", what, extra)
		}
		return
	}
	delta := int(math.Floor(float64(d)*0.2 + 0.5))
	if len(extra) < d-delta || (delta > 0 && len(extra) >= d+delta) || (delta == 0 && len(extra) != d) {
		t.Fatalf("%s: extra of %d bytes, want %d ± %d", what, len(extra), d, delta)
	}
}

// checkJSON decodes value and compares it with the event.
func checkJSON(t *testing.T, ev *Event, value []byte) {
	t.Helper()
	var got Event
	got.Kind = ev.Kind
	var err error
	switch ev.Kind {
	case KindPerson:
		var p struct {
			ID                                          int64
			Name, EmailAddress, CreditCard, City, State string
			DateTime                                    int64
			Extra                                       string
		}
		err = json.Unmarshal(value, &p)
		got.Person = Person(p)
	case KindAuction:
		var a struct {
			ID                                                       int64
			ItemName, Description                                    string
			InitialBid, Reserve, DateTime, Expires, Seller, Category int64
			Extra                                                    string
		}
		err = json.Unmarshal(value, &a)
		got.Auction = Auction(a)
	default:
		var b struct {
			Auction, Bidder, Price int64
			Channel, URL           string
			DateTime               int64
			Extra                  string
		}
		err = json.Unmarshal(value, &b)
		got.Bid = Bid(b)
	}
	if err != nil {
		t.Fatalf("%s: %v", value, err)
	}
	if got != *ev {
		t.Fatalf("JSON %s reads back as %+v, want %+v", value, got, *ev)
	}
	if !json.Valid(value) {
		t.Fatalf("invalid JSON %s", value)
	}
}

// TestDeterministic checks that a seed gives one stream and another seed another.
func TestDeterministic(t *testing.T) {
	gen := func(seed int64) []byte {
		g, err := NewGenerator(DefaultConfig(seed, 20_000))
		if err != nil {
			t.Fatal(err)
		}
		var out []byte
		for ev, ok := g.Next(); ok; ev, ok = g.Next() {
			out = append(ev.AppendJSON(out), '\n')
		}
		if g.Count() != 20_000 {
			t.Fatalf("%d events, want 20000", g.Count())
		}
		return out
	}
	a, b, c := gen(5), gen(5), gen(6)
	if string(a) != string(b) {
		t.Error("seed 5 gave two different streams")
	}
	if string(a) == string(c) {
		t.Error("seeds 5 and 6 gave the same stream")
	}
}

func TestAppendString(t *testing.T) {
	for in, want := range map[string]string{
		`a"b\c`:      `"a\"b\\c"`,
		"x\ny\t\x01": `"x\ny\t\u0001"`,
		"é\xff":      "\"é\\ufffd\"",
		"":           `""`,
	} {
		if got := string(appendString(nil, in)); got != want {
			t.Errorf("appendString(%q) = %s, want %s", in, got, want)
		}
	}
}
