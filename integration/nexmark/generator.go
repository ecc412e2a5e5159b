package nexmark

import (
	"math"
	"math/bits"
	"strconv"
	"strings"
)

// Kind is the kind of a Nexmark event.
type Kind uint8

// The kinds, numbered as Flink's Event.Type values.
const (
	KindPerson Kind = iota
	KindAuction
	KindBid
)

func (k Kind) String() string {
	switch k {
	case KindPerson:
		return "person"
	case KindAuction:
		return "auction"
	case KindBid:
		return "bid"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Person is a new person (Flink's model.Person). Times are epoch ms.
type Person struct {
	ID           int64
	Name         string
	EmailAddress string
	CreditCard   string
	City         string
	State        string
	DateTime     int64
	Extra        string
}

// Auction is a new auction (Flink's model.Auction); prices are in cents.
type Auction struct {
	ID          int64
	ItemName    string
	Description string
	InitialBid  int64
	Reserve     int64
	DateTime    int64
	Expires     int64
	Seller      int64
	Category    int64
	Extra       string
}

// Bid is a bid (Flink's model.Bid); the price is in cents.
type Bid struct {
	Auction  int64
	Bidder   int64
	Price    int64
	Channel  string
	URL      string
	DateTime int64
	Extra    string
}

// Event is one generated event: Kind says which of Person, Auction and Bid holds it (the others
// are zero). Its strings may share memory with the generator's reusable extra string; they are
// immutable, so events stay valid after the generator moves on.
type Event struct {
	Kind    Kind
	Person  Person
	Auction Auction
	Bid     Bid
}

// Time returns the event's dateTime (epoch ms).
func (e *Event) Time() int64 {
	switch e.Kind {
	case KindPerson:
		return e.Person.DateTime
	case KindAuction:
		return e.Auction.DateTime
	}
	return e.Bid.DateTime
}

// Key returns the id the event's Kafka record is keyed by: the person's or auction's id, or
// the bid's auction.
func (e *Event) Key() int64 {
	switch e.Kind {
	case KindPerson:
		return e.Person.ID
	case KindAuction:
		return e.Auction.ID
	}
	return e.Bid.Auction
}

// Generator is Flink Nexmark's NexmarkGenerator: a deterministic stream of persons, auctions
// and bids whose ids, foreign keys and times follow the Java generator's formulas, drawn from
// java.util.SplittableRandom sequences ported bit for bit. Not safe for concurrent use.
type Generator struct {
	cfg    Config
	random *splittableRandom
	count  int64 // eventsCountSoFar
	max    int64
	s      *statics
}

// statics are the Java classes' static state that is drawn at class initialization: the hot
// URLs and channel cache of BidGenerator and StringsGenerator's reusable extra string.
type statics struct {
	hotURLs  [len(hotChannels)]string
	channels [channelsNumber]channelURL
	extra    string // REUSABLE_EXTRA_STRING
}

type channelURL struct{ channel, url string }

// NewGenerator returns a generator of cfg's events, from the first.
func NewGenerator(cfg Config) (*Generator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g := &Generator{cfg: cfg, random: newSplittableRandom(cfg.Seed), max: cfg.maxEvents()}
	g.s = newStatics(cfg.Seed)
	return g, nil
}

// Config returns the generator's configuration.
func (g *Generator) Config() Config { return g.cfg }

// Count returns how many events the generator has yielded.
func (g *Generator) Count() int64 { return g.count }

// HasNext reports whether the generator has events left (fewer than MaxEvents yielded).
func (g *Generator) HasNext() bool { return g.count < g.max }

// Next returns the next event and true, or false after MaxEvents events. As in Java, the
// event's kind and ids come from its event id; its time from its (adjusted) event number.
func (g *Generator) Next() (Event, bool) {
	if !g.HasNext() {
		return Event{}, false
	}
	c := g.cfg
	ts := c.TimestampForEvent(c.nextAdjustedEventNumber(g.count))
	id := c.FirstEventID + c.nextAdjustedEventNumber(g.count)
	var ev Event
	ev.Kind = c.KindOf(id)
	switch ev.Kind {
	case KindPerson:
		ev.Person = g.nextPerson(id, ts)
	case KindAuction:
		ev.Auction = g.nextAuction(g.count, id, ts)
	default:
		ev.Bid = g.nextBid(id, ts)
	}
	g.count++
	return ev, true
}

// Person data of PersonGenerator.
var (
	usStates   = strings.Split("AZ,CA,ID,OR,WA,WY", ",")
	usCities   = strings.Split("Phoenix,Los Angeles,San Francisco,Boise,Portland,Bend,Redmond,Seattle,Kent,Cheyenne", ",")
	firstNames = strings.Split("Peter,Paul,Luke,John,Saul,Vicky,Kate,Julie,Sarah,Deiter,Walter", ",")
	lastNames  = strings.Split("Shultz,Abrams,Spencer,White,Bartels,Walton,Smith,Jones,Noris", ",")
)

// personIDLead and auctionIDLead are how many not-yet-created ids a random pick may return.
const (
	personIDLead  = 10
	auctionIDLead = 10
)

// nextPerson is PersonGenerator.nextPerson.
func (g *Generator) nextPerson(eventID, ts int64) Person {
	r := g.random
	p := Person{ID: g.cfg.lastBase0PersonID(eventID) + FirstPersonID, DateTime: ts}
	p.Name = firstNames[r.nextIntn(int32(len(firstNames)))] + " " + lastNames[r.nextIntn(int32(len(lastNames)))]
	p.EmailAddress = nextString(r, 7, ' ') + "@" + nextString(r, 5, ' ') + ".com"
	cc := make([]byte, 0, 19)
	for i := range 4 {
		if i > 0 {
			cc = append(cc, ' ')
		}
		n := r.nextIntn(10000) // CREDIT_CARD_STRINGS[n] is String.format("%04d", n)
		cc = append(cc, byte('0'+n/1000), byte('0'+n/100%10), byte('0'+n/10%10), byte('0'+n%10))
	}
	p.CreditCard = string(cc)
	p.City = usCities[r.nextIntn(int32(len(usCities)))]
	p.State = usStates[r.nextIntn(int32(len(usStates)))]
	size := 8 + len(p.Name) + len(p.EmailAddress) + len(p.CreditCard) + len(p.City) + len(p.State)
	p.Extra = g.nextExtra(size, g.cfg.AvgPersonByteSize)
	return p
}

// nextBase0PersonID is PersonGenerator.nextBase0PersonId: a random person among the
// numActivePeople latest, or one of the personIDLead next.
func (g *Generator) nextBase0PersonID(eventID int64) int64 {
	numPeople := g.cfg.lastBase0PersonID(eventID) + 1
	active := min(numPeople, int64(g.cfg.NumActivePeople))
	n := g.random.nextLongn(active + personIDLead)
	return numPeople - active + n
}

// Auction constants of AuctionGenerator.
const (
	numCategories  = 5
	hotSellerRatio = 100 // a hot seller is the first person of the latest batch of 100
)

// nextAuction is AuctionGenerator.nextAuction.
func (g *Generator) nextAuction(eventsCountSoFar, eventID, ts int64) Auction {
	r, c := g.random, g.cfg
	a := Auction{ID: c.lastBase0AuctionID(eventID) + FirstAuctionID, DateTime: ts}
	if r.nextIntn(int32(c.HotSellersRatio)) > 0 {
		a.Seller = (c.lastBase0PersonID(eventID) / hotSellerRatio) * hotSellerRatio
	} else {
		a.Seller = g.nextBase0PersonID(eventID)
	}
	a.Seller += FirstPersonID
	a.Category = FirstCategoryID + int64(r.nextIntn(numCategories))
	a.InitialBid = nextPrice(r)
	a.Expires = ts + g.nextAuctionLengthMs(eventsCountSoFar, ts)
	a.ItemName = nextString(r, 20, ' ')
	a.Description = nextString(r, 100, ' ')
	a.Reserve = a.InitialBid + nextPrice(r)
	size := 8 + len(a.ItemName) + len(a.Description) + 8 + 8 + 8 + 8 + 8
	a.Extra = g.nextExtra(size, c.AvgAuctionByteSize)
	return a
}

// nextBase0AuctionID is AuctionGenerator.nextBase0AuctionId: a random auction among the
// numInFlightAuctions latest, or one of the auctionIDLead next.
func (g *Generator) nextBase0AuctionID(eventID int64) int64 {
	maxAuction := g.cfg.lastBase0AuctionID(eventID)
	minAuction := max(maxAuction-int64(g.cfg.NumInFlightAuctions), 0)
	return minAuction + g.random.nextLongn(maxAuction-minAuction+1+auctionIDLead)
}

// nextAuctionLengthMs is AuctionGenerator.nextAuctionLengthMs: uniform in [1, 2 × the time
// until numInFlightAuctions more auctions have been generated].
func (g *Generator) nextAuctionLengthMs(eventsCountSoFar, ts int64) int64 {
	c := g.cfg
	current := c.nextAdjustedEventNumber(eventsCountSoFar)
	numEventsForAuctions := (int64(c.NumInFlightAuctions) * c.totalProportion()) / int64(c.AuctionProportion)
	futureAuction := c.TimestampForEvent(current + numEventsForAuctions)
	horizonMs := futureAuction - ts
	return 1 + g.random.nextLongn(max(horizonMs*2, 1))
}

// Bid constants of BidGenerator.
const (
	hotAuctionRatio  = 100 // a hot auction is the first of the latest batch of 100
	hotBidderRatio   = 100 // a hot bidder is the second person of the latest batch of 100
	hotChannelsRatio = 2
	channelsNumber   = 10_000
)

var hotChannels = [...]string{"Google", "Facebook", "Baidu", "Apple"}

// nextBid is BidGenerator.nextBid. Like Flink's, it adds FIRST_PERSON_ID to the bidder twice,
// so bidders are numbered from 2000 (Beam's generator adds it once).
func (g *Generator) nextBid(eventID, ts int64) Bid {
	r, c := g.random, g.cfg
	b := Bid{DateTime: ts}
	if r.nextIntn(int32(c.HotAuctionRatio)) > 0 {
		b.Auction = (c.lastBase0AuctionID(eventID) / hotAuctionRatio) * hotAuctionRatio
	} else {
		b.Auction = g.nextBase0AuctionID(eventID)
	}
	b.Auction += FirstAuctionID
	if r.nextIntn(int32(c.HotBiddersRatio)) > 0 {
		b.Bidder = (c.lastBase0PersonID(eventID)/hotBidderRatio)*hotBidderRatio + 1
	} else {
		b.Bidder = g.nextBase0PersonID(eventID)
	}
	b.Bidder += FirstPersonID
	b.Price = nextPrice(r)
	if r.nextIntn(hotChannelsRatio) > 0 {
		i := r.nextIntn(int32(len(hotChannels)))
		b.Channel, b.URL = hotChannels[i], g.s.hotURLs[i]
	} else {
		cu := g.s.channels[r.nextIntn(channelsNumber)]
		b.Channel, b.URL = cu.channel, cu.url
	}
	b.Bidder += FirstPersonID
	b.Extra = g.nextExtra(8+8+8+8, c.AvgBidByteSize)
	return b
}

// newStatics draws the Java classes' static state: BidGenerator's (hot URLs, then the channel
// cache) from SplittableRandom(seed+1), StringsGenerator's reusable extra string from
// SplittableRandom(seed+2).
func newStatics(seed int64) *statics {
	s := &statics{}
	r := newSplittableRandom(seed + 1)
	for i := range s.hotURLs {
		s.hotURLs[i] = baseURL(r)
	}
	for i := range s.channels {
		url := baseURL(r)
		if r.nextIntn(10) > 0 {
			id := int32(bits.Reverse32(uint32(i)))
			if id < 0 {
				id = -id // Math.abs: Integer.MIN_VALUE (channel 1) stays negative, as in Java
			}
			url += "&channel_id=" + strconv.Itoa(int(id))
		}
		s.channels[i] = channelURL{channel: "channel-" + strconv.Itoa(i), url: url}
	}
	s.extra = exactString(newSplittableRandom(seed+2), 1024*1024)
	return s
}

// baseURL is BidGenerator.getBaseUrl.
func baseURL(r *splittableRandom) string {
	return "https://www.nexmark.com/" + nextString(r, 5, '_') + "/" + nextString(r, 5, '_') + "/" +
		nextString(r, 5, '_') + "/" + "item.htm?query=1"
}

// nextPrice is PriceGenerator.nextPrice: Math.round(10^(6 × nextDouble()) × 100) cents, so the
// price's decimal logarithm is uniform: from $1 to $1,000,000.
func nextPrice(r *splittableRandom) int64 {
	return javaRound(math.Pow(10.0, r.nextDouble()*6.0) * 100.0)
}

// javaRound is Math.round(double): the closest long, ties toward positive infinity, NaN 0,
// saturating at the long range.
func javaRound(x float64) int64 {
	switch {
	case math.IsNaN(x):
		return 0
	case x >= math.MaxInt64:
		return math.MaxInt64
	case x <= math.MinInt64:
		return math.MinInt64
	}
	f := math.Floor(x)
	if x-f >= 0.5 {
		f++
	}
	return int64(f)
}

// minStringLength is StringsGenerator.MIN_STRING_LENGTH.
const minStringLength = 3

// nextString is StringsGenerator.nextString(random, maxLength, special): 3 to maxLength-1
// characters, each special with probability 1/13, else a lower-case letter; then trimmed of
// leading and trailing characters up to ' ' (String.trim).
func nextString(r *splittableRandom, maxLength int32, special byte) string {
	n := minStringLength + r.nextIntn(maxLength-minStringLength)
	b := make([]byte, n)
	for i := range b {
		if r.nextIntn(13) == 0 {
			b[i] = special
		} else {
			b[i] = byte('a' + r.nextIntn(26))
		}
	}
	return javaTrim(string(b))
}

// javaTrim is String.trim for ASCII: it strips leading and trailing bytes <= ' '.
func javaTrim(s string) string {
	return strings.TrimFunc(s, func(c rune) bool { return c <= ' ' })
}

// exactString is StringsGenerator.nextExactString's path without the reusable string: 6
// characters per nextInt(), 'a' + rnd % 26 with Java's signed remainder, so negative draws give
// the characters 'H' to '`' (backslash included).
func exactString(r *splittableRandom, length int) string {
	b := make([]byte, length)
	var rnd, n int32
	for i := range b {
		if n == 0 {
			rnd = r.nextInt()
			n = 6
		}
		b[i] = byte('a' + rnd%26)
		rnd /= 26
		n--
	}
	return string(b)
}

// nextExactString is StringsGenerator.nextExactString once the reusable string exists: a
// substring of it at a random offset (every length the generator asks for is below half its
// size).
func (g *Generator) nextExactString(length int) string {
	if length < len(g.s.extra)/2 {
		off := g.random.nextIntn(int32(len(g.s.extra) - length))
		return g.s.extra[off : int(off)+length]
	}
	return exactString(g.random, length)
}

// nextExtra is StringsGenerator.nextExtra: a string whose length brings currentSize to
// desiredAverageSize on average (uniform within ±20%), or "" if it is already larger.
func (g *Generator) nextExtra(currentSize, desiredAverageSize int) string {
	if currentSize > desiredAverageSize {
		return ""
	}
	desiredAverageSize -= currentSize
	delta := int(javaRound(float64(desiredAverageSize) * 0.2))
	minSize := desiredAverageSize - delta
	size := minSize
	if delta != 0 {
		size += int(g.random.nextIntn(int32(2 * delta)))
	}
	return g.nextExactString(size)
}
