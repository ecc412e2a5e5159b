package configs

import (
	"slices"
	"strings"
	"testing"
	"time"
)

const expandDoc = `kafka: {brokers: [127.0.0.1:9092]}
group: shop
instance_id: pod-0
sources:
  bids: {topic: bids, key: auction}
operators:
  - name: cheap
    filter: {input: bids, expr: "price > 0"}
  - name: q15
    aggregate:
      input: cheap
      group_by: "day, channel"
      fields:
        bids: {count: {}}
        top: {max: price, where: "price < 10"}
        bidders: {count_distinct: bidder}
        rank1_bidders: {count_distinct: bidder, where: "price < 10"}
        auctions: {count_distinct: auction}
        last_bidder: {max: bidder, type: string}
    output: out
  - name: after
    filter: {input: q15, expr: "bids > 1"}
    output: out
sinks:
  out: {topic: stats}
`

// An aggregate with count_distinct fields becomes, in its place, a rekey of its other fields'
// records, a distinct and a rekey per value, and a cogroup of the aggregate's name; the result
// is a config that validates as it is (every operator after its inputs).
func TestExpandCountDistinct(t *testing.T) {
	c, err := Parse([]byte(expandDoc), nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, op := range c.Operators {
		got = append(got, op.Name+":"+op.Kind()+":"+strings.Join(op.Inputs(), ",")+":"+op.ExpandedFrom())
	}
	want := []string{
		"cheap:filter:bids:",
		"q15-by:rekey:cheap:q15",
		"q15-distinct-auction:distinct:cheap:q15",
		"q15-distinct-auction-by:rekey:q15-distinct-auction:q15",
		"q15-distinct-bidder:distinct:cheap:q15",
		"q15-distinct-bidder-by:rekey:q15-distinct-bidder:q15",
		"q15:cogroup:q15-by,q15-distinct-auction-by,q15-distinct-bidder-by:",
		"after:filter:q15:",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("operators:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	d := c.Operators[4].Distinct
	if d.GroupBy != "day, channel, bidder" || d.Flags["bidders"] != "true" || d.Flags["rank1_bidders"] != "price < 10" || len(d.Flags) != 2 {
		t.Errorf("distinct = %+v", d)
	}
	if r := c.Operators[5].Rekey; r.By != "day, channel" {
		t.Errorf("rekey by %q", r.By)
	}
	cg := c.Operators[6].Cogroup
	if !cg.KeyColumns || c.Operators[6].Output != "out" {
		t.Errorf("cogroup key_columns %v, output %q", cg.KeyColumns, c.Operators[6].Output)
	}
	for name, want := range map[string]string{
		"bids":          "count() from q15-by",
		"top":           "max(price) where price < 10 from q15-by",
		"bidders":       "sum(bidders) from q15-distinct-bidder-by",
		"rank1_bidders": "sum(rank1_bidders) from q15-distinct-bidder-by",
		"auctions":      "sum(auctions) from q15-distinct-auction-by",
		"last_bidder":   "max(bidder) from q15-by",
	} {
		f := cg.Fields[name]
		var fn, arg string
		for k, v := range f {
			switch k {
			case "from", "where", "type":
			default:
				fn = k
				arg, _ = v.(string)
			}
		}
		got := fn + "(" + arg + ")"
		if w, ok := f["where"].(string); ok {
			got += " where " + w
		}
		got += " from " + f["from"].(string)
		if got != want {
			t.Errorf("field %s = %s, want %s", name, got, want)
		}
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("the expanded config does not validate: %v", err)
	}
	topics := strings.Join(c.InternalTopics(), " ")
	for _, want := range []string{"shop-q15-distinct-bidder-changelog", "shop-q15-distinct-bidder-output", "shop-q15-by-repartition", "shop-q15-distinct-auction-by-repartition", "shop-q15-changelog", "shop-q15-output"} {
		if !strings.Contains(topics, want) {
			t.Errorf("internal topics %s lack %s", topics, want)
		}
	}
	// Parsing the expanded config again changes nothing.
	before := len(c.Operators)
	if err := c.expandCountDistinct(); err != nil || len(c.Operators) != before {
		t.Fatalf("a second expansion: %v, %d operators, want %d", err, len(c.Operators), before)
	}
}

// With a window, the distincts and the cogroup take the aggregate's window (the distincts'
// firsts are per window and carry its end - 1) and the cogroup folds the distincts' records
// each into its own window (window_finals); with one value and no other field, the aggregate
// over the distinct takes both.
func TestExpandCountDistinctWindow(t *testing.T) {
	for _, fields := range []string{
		`{bids: {count: {}}, bidders: {count_distinct: bidder}}`,
		`{bidders: {count_distinct: bidder}}`,
	} {
		doc := `kafka: {brokers: [127.0.0.1:9092]}
group: shop
instance_id: pod-0
sources:
  bids: {topic: bids, key: auction, timestamp: dateTime}
operators:
  - name: q15
    aggregate:
      input: bids
      group_by: channel
      window: {tumbling: 1m, grace: 5s}
      emit: final
      fields: ` + fields + `
    output: out
sinks:
  out: {topic: stats}
`
		c, err := Parse([]byte(doc), nil)
		if err != nil {
			t.Fatalf("%s: %v", fields, err)
		}
		windows := 0
		for _, op := range c.Operators {
			var w *Window
			switch {
			case op.Distinct != nil:
				w = op.Distinct.Window
			case op.Cogroup != nil:
				w = op.Cogroup.Window
				if !slices.Equal(op.Cogroup.WindowFinals, []string{"q15-distinct-bidder-by"}) {
					t.Errorf("%s: cogroup window_finals %v, want the distinct's input alone", fields, op.Cogroup.WindowFinals)
				}
			case op.Aggregate != nil:
				w = op.Aggregate.Window
				if !op.Aggregate.WindowFinals {
					t.Errorf("%s: the aggregate over the distinct lacks window_finals", fields)
				}
			default:
				continue
			}
			if w == nil || w.Tumbling != time.Minute || w.Grace != 5*time.Second {
				t.Errorf("%s: %s %s: window %+v, want the aggregate's", fields, op.Kind(), op.Name, w)
			}
			windows++
		}
		if windows != 2 {
			t.Errorf("%s: %d windowed operators, want a distinct and the operator named q15", fields, windows)
		}
	}
}
