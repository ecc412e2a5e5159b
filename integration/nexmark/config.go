package nexmark

import (
	"errors"
	"fmt"
	"math"
)

// Config holds the generator's parameters: the fields of Flink Nexmark's NexmarkConfiguration
// that the generator reads, and GeneratorConfig's base time and first event id and number.
// DefaultConfig gives Flink's defaults. A Config is a plain value, safe to copy.
type Config struct {
	// Seed seeds the three random number generators (java.util.SplittableRandom) that Flink's
	// generator leaves unseeded: the generator's own (Seed), BidGenerator's static one that
	// draws the hot URLs and the channel cache (Seed+1), and StringsGenerator's static one that
	// draws the reusable 1 MiB extra string (Seed+2). One seed, one event stream.
	Seed int64
	// BaseTime is the event time of event number 0, epoch ms. Flink takes the wall clock when
	// the job is planned; the default here is Beam Nexmark's fixed BASE_TIME,
	// 2015-07-15T00:00:00Z, so that a seed gives the same events on every run.
	BaseTime int64
	// FirstEventID and FirstEventNumber are GeneratorConfig's firstEventId and
	// firstEventNumber: event i (from 0) has id FirstEventID + FirstEventNumber + i and event
	// number FirstEventNumber + i. Flink's table source passes 1 and 1 (Beam 0 and 0).
	FirstEventID     int64
	FirstEventNumber int64
	// MaxEvents is how many events the generator yields; 0: unbounded (Java's "maxEventsOrZero").
	MaxEvents int64

	FirstEventRate     int // events per second of all generators together (10,000)
	NumEventGenerators int // Flink sets the source's parallelism here; 1

	PersonProportion  int // 1
	AuctionProportion int // 3
	BidProportion     int // 46

	AvgPersonByteSize  int // 200
	AvgAuctionByteSize int // 500
	AvgBidByteSize     int // 100

	HotAuctionRatio int // 2: half the bids are for the latest hot auction
	HotSellersRatio int // 4: three quarters of the auctions are by the latest hot seller
	HotBiddersRatio int // 4: three quarters of the bids are by the latest hot bidder

	NumActivePeople     int // 1000
	NumInFlightAuctions int // 100

	// OutOfOrderGroupSize > 1 permutes event numbers within groups of that size (the events'
	// times then jitter); 1 keeps them in order.
	OutOfOrderGroupSize int64
}

// BeamBaseTime is Beam Nexmark's BASE_TIME, 2015-07-15T00:00:00Z in epoch ms.
const BeamBaseTime int64 = 1_436_918_400_000

// First ids of GeneratorConfig: people and auctions are numbered from 1000, categories from 10.
const (
	FirstAuctionID  = 1000
	FirstPersonID   = 1000
	FirstCategoryID = 10
)

// DefaultConfig returns Flink Nexmark's default configuration (NexmarkConfiguration's field
// defaults, and the first event id and number of its table source) with seed, Beam's base
// time and maxEvents events.
func DefaultConfig(seed, maxEvents int64) Config {
	return Config{
		Seed:                seed,
		BaseTime:            BeamBaseTime,
		FirstEventID:        1,
		FirstEventNumber:    1,
		MaxEvents:           maxEvents,
		FirstEventRate:      10_000,
		NumEventGenerators:  1,
		PersonProportion:    1,
		AuctionProportion:   3,
		BidProportion:       46,
		AvgPersonByteSize:   200,
		AvgAuctionByteSize:  500,
		AvgBidByteSize:      100,
		HotAuctionRatio:     2,
		HotSellersRatio:     4,
		HotBiddersRatio:     4,
		NumActivePeople:     1000,
		NumInFlightAuctions: 100,
		OutOfOrderGroupSize: 1,
	}
}

// Validate reports the first parameter the generator cannot work with.
func (c Config) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{
		{"FirstEventRate", c.FirstEventRate}, {"NumEventGenerators", c.NumEventGenerators},
		{"PersonProportion", c.PersonProportion}, {"AuctionProportion", c.AuctionProportion},
		{"BidProportion", c.BidProportion}, {"HotAuctionRatio", c.HotAuctionRatio},
		{"HotSellersRatio", c.HotSellersRatio}, {"HotBiddersRatio", c.HotBiddersRatio},
		{"NumActivePeople", c.NumActivePeople}, {"NumInFlightAuctions", c.NumInFlightAuctions},
	} {
		if f.v <= 0 {
			return fmt.Errorf("nexmark: config: %s must be positive, got %d", f.name, f.v)
		}
	}
	if c.OutOfOrderGroupSize <= 0 {
		return fmt.Errorf("nexmark: config: OutOfOrderGroupSize must be positive, got %d", c.OutOfOrderGroupSize)
	}
	if c.MaxEvents < 0 {
		return fmt.Errorf("nexmark: config: MaxEvents must not be negative, got %d", c.MaxEvents)
	}
	if c.FirstEventID < 0 || c.FirstEventNumber < 0 {
		return errors.New("nexmark: config: FirstEventID and FirstEventNumber must not be negative")
	}
	return nil
}

// totalProportion is GeneratorConfig.totalProportion.
func (c Config) totalProportion() int64 {
	return int64(c.PersonProportion + c.AuctionProportion + c.BidProportion)
}

// interEventDelayUs is GeneratorConfig.interEventDelayUs[0], in microseconds (a double in Java).
func (c Config) interEventDelayUs() float64 {
	return 1000000.0 / float64(c.FirstEventRate) * float64(c.NumEventGenerators)
}

// maxEvents is GeneratorConfig.maxEvents: MaxEvents, or for 0 Java's bound that keeps its size
// estimates from overflowing.
func (c Config) maxEvents() int64 {
	if c.MaxEvents > 0 {
		return c.MaxEvents
	}
	return math.MaxInt64 / (c.totalProportion() * int64(max(c.AvgPersonByteSize, c.AvgAuctionByteSize, c.AvgBidByteSize, 1)))
}

// nextEventNumber is GeneratorConfig.nextEventNumber.
func (c Config) nextEventNumber(numEvents int64) int64 { return c.FirstEventNumber + numEvents }

// nextAdjustedEventNumber is GeneratorConfig.nextAdjustedEventNumber: the event number,
// permuted within its group of OutOfOrderGroupSize.
func (c Config) nextAdjustedEventNumber(numEvents int64) int64 {
	n := c.OutOfOrderGroupSize
	eventNumber := c.nextEventNumber(numEvents)
	base := (eventNumber / n) * n
	offset := (eventNumber * 953) % n
	return base + offset
}

// TimestampForEvent is GeneratorConfig.timestampForEvent: the event time (epoch ms) of event
// number eventNumber, baseTime + (long)(eventNumber * interEventDelayUs) / 1000.
func (c Config) TimestampForEvent(eventNumber int64) int64 {
	return c.BaseTime + int64(float64(eventNumber)*c.interEventDelayUs())/1000
}

// lastBase0PersonID is PersonGenerator.lastBase0PersonId: the last person id (from 0) valid at
// eventID; the current one if eventID is a person.
func (c Config) lastBase0PersonID(eventID int64) int64 {
	epoch := eventID / c.totalProportion()
	offset := eventID % c.totalProportion()
	if offset >= int64(c.PersonProportion) {
		offset = int64(c.PersonProportion) - 1
	}
	return epoch*int64(c.PersonProportion) + offset
}

// lastBase0AuctionID is AuctionGenerator.lastBase0AuctionId.
func (c Config) lastBase0AuctionID(eventID int64) int64 {
	epoch := eventID / c.totalProportion()
	offset := eventID % c.totalProportion()
	switch {
	case offset < int64(c.PersonProportion):
		epoch--
		offset = int64(c.AuctionProportion) - 1
	case offset >= int64(c.PersonProportion+c.AuctionProportion):
		offset = int64(c.AuctionProportion) - 1
	default:
		offset -= int64(c.PersonProportion)
	}
	return epoch*int64(c.AuctionProportion) + offset
}

// KindOf returns the kind of the event with id eventID: by its remainder modulo the total
// proportion, persons first, then auctions, then bids.
func (c Config) KindOf(eventID int64) Kind {
	rem := eventID % c.totalProportion()
	switch {
	case rem < int64(c.PersonProportion):
		return KindPerson
	case rem < int64(c.PersonProportion+c.AuctionProportion):
		return KindAuction
	}
	return KindBid
}
