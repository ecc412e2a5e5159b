// Command nexmarkcmp is the Kafka side of integration/peers/nexmark.sh, the Nexmark comparison
// of sluice with Flink SQL: it creates output topics, sums end offsets, and reads two result
// topics back (read_committed) to compare them as relations. It is an independent check: of
// sluice it imports only the test workloads' topic reader (cmd/sluice/workload.ReadEach), no
// operator or runtime code.
//
//	nexmarkcmp ends    --brokers B --topics t1,t2,...         sum of the topics' end offsets (-1: a topic is missing)
//	nexmarkcmp create  --brokers B --topic T [--partitions 8] create T (exit 0 if it exists)
//	nexmarkcmp delete  --brokers B --prefix P [--except T,...] delete every topic whose name starts with P, but T...
//	nexmarkcmp rows    --brokers B --query qN --side flink|sluice --topic T
//	nexmarkcmp compare --brokers B --query qN --flink T1 --sluice T2
//
// A result topic is read as a relation (spec.go): an append topic is the multiset of its
// records' values; an upsert topic is, per Kafka key, the latest value unless it is a
// tombstone. Each row is projected on the query's columns (named as each side names them) and
// normalized: numbers as exact decimals (a JSON number or a numeric string), times as epoch ms
// (an epoch-ms number or an ISO-8601 / SQL timestamp string, taken as UTC), strings as they are,
// a missing field as null. A query whose rows compare whole (all but q9, q12, q18, q19) is held
// as sorted 128-bit digests of its rows, 16 bytes a row however wide (q23 at 10M events: 12M rows
// of 21 columns), and on a difference each topic is read again for the rows to show. compare prints "agree <rows>" (followed by "; N rows differ only
// within ties of (cols)" when the rows differ only in columns the query's ORDER BY leaves open:
// q9, q18, q19) or "DISAGREES ..." with the row counts
// and the number of rows only one side has (examples on stderr) and exits 0 or 1; rows prints the
// relation's row count. Exit 2 on usage or read errors.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: nexmarkcmp ends|create|rows|compare [flags]")
		os.Exit(2)
	}
	cmd := os.Args[1]
	fs := flag.NewFlagSet("nexmarkcmp "+cmd, flag.ExitOnError)
	brokers := fs.String("brokers", "127.0.0.1:9092", "comma-separated seed brokers")
	topics := fs.String("topics", "", "ends: comma-separated topics")
	topic := fs.String("topic", "", "create, rows: the topic")
	partitions := fs.Int("partitions", 8, "create: partitions")
	prefix := fs.String("prefix", "", "delete: the topics' name prefix (at least 8 characters)")
	except := fs.String("except", "", "delete: comma-separated topics to keep")
	query := fs.String("query", "", "rows, compare: the Nexmark query (q0, q5, ...)")
	side := fs.String("side", "", "rows: flink or sluice (which columns and semantics)")
	flinkTopic := fs.String("flink", "", "compare: Flink's result topic")
	sluiceTopic := fs.String("sluice", "", "compare: sluice's result topic")
	timeout := fs.Duration("timeout", 10*time.Minute, "bound on the whole command")
	examples := fs.Int("examples", 3, "compare: rows of each side's difference shown on stderr")
	_ = fs.Parse(os.Args[2:])
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	seeds := strings.Split(*brokers, ",")

	var err error
	switch cmd {
	case "ends":
		err = ends(ctx, seeds, strings.Split(*topics, ","))
	case "create":
		err = create(ctx, seeds, *topic, int32(*partitions))
	case "delete":
		err = deletePrefix(ctx, seeds, *prefix, strings.Split(*except, ","))
	case "rows":
		var s spec
		if s, err = lookup(*query); err == nil {
			if s.digested() {
				var ds []digest
				if ds, err = digests(ctx, seeds, *topic, s, *side == "flink"); err == nil {
					fmt.Println(len(ds))
				}
			} else {
				var rel map[string]int
				if rel, err = relation(ctx, seeds, *topic, s, *side == "flink"); err == nil {
					fmt.Println(size(rel))
				}
			}
		}
	case "compare":
		var s spec
		if s, err = lookup(*query); err == nil {
			var agree bool
			if agree, err = compare(ctx, seeds, s, *flinkTopic, *sluiceTopic, *examples); err == nil && !agree {
				os.Exit(1)
			}
		}
	default:
		err = fmt.Errorf("unknown command %q", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nexmarkcmp:", err)
		os.Exit(2)
	}
}

func ends(ctx context.Context, brokers []string, topics []string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	offs, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return err
	}
	var sum int64
	for _, t := range topics {
		ps, ok := offs[t]
		if !ok || len(ps) == 0 {
			fmt.Println(-1)
			return nil
		}
		for _, o := range ps {
			if o.Err != nil {
				fmt.Println(-1)
				return nil
			}
			sum += o.Offset
		}
	}
	fmt.Println(sum)
	return nil
}

func create(ctx context.Context, brokers []string, topic string, partitions int32) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, 1, nil, topic)
	if err != nil {
		return err
	}
	if resp.Err != nil && !strings.Contains(resp.Err.Error(), "TOPIC_ALREADY_EXISTS") {
		return fmt.Errorf("creating %s: %w", topic, resp.Err)
	}
	return nil
}

// deletePrefix deletes every topic whose name starts with prefix, but those named in keep.
func deletePrefix(ctx context.Context, brokers []string, prefix string, keep []string) error {
	if len(prefix) < 8 {
		return fmt.Errorf("delete: prefix %q is shorter than 8 characters", prefix)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	all, err := adm.ListTopics(ctx)
	if err != nil {
		return err
	}
	var names []string
	for _, t := range all.Names() {
		if strings.HasPrefix(t, prefix) && !slices.Contains(keep, t) {
			names = append(names, t)
		}
	}
	if len(names) == 0 {
		return nil
	}
	resp, err := adm.DeleteTopics(ctx, names...)
	if err != nil {
		return err
	}
	return resp.Error()
}

func size(rel map[string]int) int {
	n := 0
	for _, c := range rel {
		n += c
	}
	return n
}

// compare reads both topics and reports whether their relations are equal.
func compare(ctx context.Context, brokers []string, s spec, flinkTopic, sluiceTopic string, examples int) (bool, error) {
	if s.digested() {
		return compareDigests(ctx, brokers, s, flinkTopic, sluiceTopic, examples)
	}
	f, err := relation(ctx, brokers, flinkTopic, s, true)
	if err != nil {
		return false, err
	}
	g, err := relation(ctx, brokers, sluiceTopic, s, false)
	if err != nil {
		return false, err
	}
	onlyF, onlyS := diff(f, g), diff(g, f)
	if len(onlyF) == 0 && len(onlyS) == 0 {
		fmt.Printf("agree %d\n", size(f))
		return true, nil
	}
	if len(s.ties) > 0 {
		pf, pg := s.project(f, s.ties), s.project(g, s.ties)
		if len(diff(pf, pg)) == 0 && len(diff(pg, pf)) == 0 {
			fmt.Printf("agree %d; %d rows differ only within ties of (%s)\n", size(f), count(onlyF), strings.Join(s.ties, ", "))
			fmt.Fprintf(os.Stderr, "nexmarkcmp: %s agrees on (%s); %d rows differ only within ties\n", s.name, strings.Join(s.ties, ", "), count(onlyF))
			return true, nil
		}
	}
	fmt.Printf("DISAGREES flink=%d sluice=%d only-flink=%d only-sluice=%d\n", size(f), size(g), count(onlyF), count(onlyS))
	show := func(name string, d map[string]int) {
		keys := make([]string, 0, len(d))
		for k := range d {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i, k := range keys {
			if i == examples {
				break
			}
			fmt.Fprintf(os.Stderr, "nexmarkcmp: %s %s only %s: %s (x%d)\n", s.name, name, strings.Join(s.names(), ","), strings.ReplaceAll(k, sep, " | "), d[k])
		}
	}
	show("flink", onlyF)
	show("sluice", onlyS)
	return false, nil
}

// compareDigests is compare for a query whose rows compare whole (no ties, no sums): both
// relations as sorted digests, then, if they differ, each topic read again for the rows of its
// first differing digests.
func compareDigests(ctx context.Context, brokers []string, s spec, flinkTopic, sluiceTopic string, examples int) (bool, error) {
	f, err := digests(ctx, brokers, flinkTopic, s, true)
	if err != nil {
		return false, err
	}
	g, err := digests(ctx, brokers, sluiceTopic, s, false)
	if err != nil {
		return false, err
	}
	onlyF, onlyS := diffSorted(f, g)
	if len(onlyF) == 0 && len(onlyS) == 0 {
		fmt.Printf("agree %d\n", len(f))
		return true, nil
	}
	fmt.Printf("DISAGREES flink=%d sluice=%d only-flink=%d only-sluice=%d\n", len(f), len(g), len(onlyF), len(onlyS))
	show := func(name, topic string, flink bool, only []digest) error {
		times := make(map[digest]int)
		var order []digest
		for _, d := range only {
			if times[d] == 0 {
				if len(order) == examples {
					continue
				}
				order = append(order, d)
			}
			times[d]++
		}
		rows := make(map[digest]string, len(order))
		err := eachRow(ctx, brokers, topic, s, flink, func(_ []byte, row string, tomb bool) {
			if d := digestOf(row); !tomb && times[d] > 0 {
				rows[d] = row
			}
		})
		for _, d := range order {
			fmt.Fprintf(os.Stderr, "nexmarkcmp: %s %s only %s: %s (x%d)\n", s.name, name, strings.Join(s.names(), ","), strings.ReplaceAll(rows[d], sep, " | "), times[d])
		}
		return err
	}
	if err := show("flink", flinkTopic, true, onlyF); err != nil {
		return false, err
	}
	return false, show("sluice", sluiceTopic, false, onlyS)
}

func count(d map[string]int) int {
	n := 0
	for _, c := range d {
		n += c
	}
	return n
}

// diff returns the rows of a beyond b (multiset difference).
func diff(a, b map[string]int) map[string]int {
	out := make(map[string]int)
	for k, c := range a {
		if d := c - b[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}
