// Package nexmark owns sluice's Nexmark workload (DESIGN.md, "Nexmark topics"): a Go port of
// the event generator of Flink's Nexmark suite (github.com/nexmark/nexmark, nexmark-flink's
// generator package, itself derived from Apache Beam's Nexmark generator), a producer that
// writes its events to Kafka, and, in its tests, Nexmark queries run as sluice pipelines
// (configs/nexmark/qN.yaml) on a real broker and checked against answers computed from the
// generated events. It is for tests, benchmarks and the nexmark-gen command only: the sluice
// binary never imports it.
//
// # The generator
//
// Generator yields persons, auctions and bids as Flink's NexmarkGenerator does, with its
// default configuration (DefaultConfig: 10,000 events per second, proportions 1/3/46, hot
// ratios 2/4/4, 1000 active people, 100 auctions in flight, average sizes 200/500/100 bytes,
// first event id and number 1 as Flink's table source). Every value is drawn from
// java.util.SplittableRandom, ported bit for bit; Flink leaves its three generators unseeded,
// here Config.Seed seeds them, and Config.BaseTime fixes the time Flink takes from the clock. So
// one Config gives one event stream, and it is the stream Flink's own Java classes give with the
// same seeds: testdata/flink_golden.txt holds their output (made by testdata/java/golden.sh)
// and TestGoldenFlink compares the first million events byte for byte. Flink's generator is
// ported with its quirks: bidders are numbered from 2000 (it adds FIRST_PERSON_ID twice), the
// first bids name auction 1000 and bidder 2001, which are never generated, and channel 1's URL
// carries channel_id=-2147483648 (Math.abs of Integer.MIN_VALUE).
//
// # Events in Kafka
//
// Produce writes each event to its topic (Topics; by default nexmark-person, nexmark-auction,
// nexmark-bid), keyed by its id as a decimal string (a bid by its auction), with its dateTime as
// the record timestamp and its JSON object as the value (Event.AppendJSON: Flink's field names,
// times in epoch ms).
//
// Generator and the other types are not safe for concurrent use unless they say so; events
// and their strings are immutable once returned.
package nexmark
