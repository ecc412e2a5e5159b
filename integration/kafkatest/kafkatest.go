// Package kafkatest owns the Kafka clusters that sluice's tests run against: the real Apache
// Kafka broker started by integration/kafka/kafka.sh (found through $SLUICE_TEST_KAFKA) and
// in-process kfake clusters, plus the small chores every Kafka test repeats (unique topic and
// group names, topic creation, clients closed at cleanup), and a group balancer that leaves
// partitions without an owner (Withholding).
//
// A test that needs a real broker calls Brokers; without one it is skipped locally and fails in
// CI, so the CI suite never silently passes without the real broker:
//
//	bash integration/kafka/kafka.sh start            # prints 127.0.0.1:19092
//	SLUICE_TEST_KAFKA=127.0.0.1:19092 go test ./...
//
// A test of TLS and SASL starts its own broker with those listeners (StartSecureBroker, under
// the same rule) from certificates NewCerts generates.
//
// Every helper here reports failures through the testing.TB it is given and registers its
// cleanup with t.Cleanup; none keeps package-level state.
package kafkatest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Environment variables read by Brokers.
const (
	// EnvBrokers holds the comma-separated bootstrap addresses of the real test broker.
	EnvBrokers = "SLUICE_TEST_KAFKA"
	// EnvRequire, when "1", makes Brokers fail instead of skip without EnvBrokers.
	EnvRequire = "SLUICE_REQUIRE_KAFKA"
)

// readyTimeout bounds how long CreateTopic waits for a new topic's leaders to be known.
const readyTimeout = 30 * time.Second

// Brokers returns the bootstrap addresses (comma-separated) of the real Kafka broker named by
// $SLUICE_TEST_KAFKA. Without it the test is skipped, except when $CI is "true" or
// $SLUICE_REQUIRE_KAFKA is "1": then the test fails, because the CI suite must never silently
// skip the real broker.
func Brokers(t testing.TB) string {
	t.Helper()
	if addr := strings.TrimSpace(os.Getenv(EnvBrokers)); addr != "" {
		return addr
	}
	const how = "start one with `bash integration/kafka/kafka.sh start` and export " +
		EnvBrokers + "=127.0.0.1:19092"
	if os.Getenv("CI") == "true" || os.Getenv(EnvRequire) == "1" {
		t.Fatalf("kafkatest: %s is not set but a real Kafka broker is required (CI=true or %s=1); %s",
			EnvBrokers, EnvRequire, how)
	}
	t.Skipf("kafkatest: no real Kafka broker (%s unset); %s", EnvBrokers, how)
	return ""
}

// Fake starts an in-process single-broker kfake cluster, closed at t.Cleanup, and returns its
// address. Topics created with partitions -1 get the given partition count, and each topic in
// topics is created up front with it. Like the real test broker, it does not auto-create topics.
func Fake(t testing.TB, partitions int, topics ...string) (addr string) {
	t.Helper()
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.DefaultNumPartitions(partitions)}
	if len(topics) > 0 {
		opts = append(opts, kfake.SeedTopics(int32(partitions), topics...))
	}
	return strings.Join(FakeCluster(t, opts...).ListenAddrs(), ",")
}

// FakeCluster starts an in-process kfake cluster with the given options (kfake's defaults
// otherwise, such as three brokers) and closes it at t.Cleanup. Use it when a test needs the
// cluster itself, for example to inject faults with ControlKey.
func FakeCluster(t testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("kafkatest: starting kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// Client returns a franz-go client for brokers (comma-separated) with opts, closed at t.Cleanup.
// The client is safe for concurrent use; it must not be used after the test ends.
//
// It retries a connection closed right after its first request (kgo.AlwaysRetryEOF): a broker
// killed or still starting does that, and kgo otherwise takes it for a missing SASL and fails
// the records it holds. The test brokers' security is known, so the guess is only ever wrong
// here (the chaos tests' traffic failed on it while a broker restarted).
func Client(t testing.TB, brokers string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	all := append([]kgo.Opt{kgo.SeedBrokers(SplitBrokers(brokers)...), kgo.AlwaysRetryEOF()}, opts...)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		t.Fatalf("kafkatest: new client for %s: %v", brokers, err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// CreateTopic creates topic with the given partition count (-1: the broker default), the
// broker's default replication factor and configs (nil for none), then waits until every
// partition has a leader. It fails the test on any error, including an existing topic.
func CreateTopic(t testing.TB, brokers, topic string, partitions int32, configs map[string]*string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	adm := kadm.NewClient(Client(t, brokers))
	resp, err := adm.CreateTopic(ctx, partitions, -1, configs, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("kafkatest: creating topic %q (%d partitions) on %s: %v", topic, partitions, brokers, err)
	}
	if err := waitLeaders(ctx, adm, topic, resp.NumPartitions); err != nil {
		t.Fatalf("kafkatest: topic %q on %s: %v", topic, brokers, err)
	}
}

// waitLeaders polls metadata until topic has want partitions (want ≤ 0: any) that all have a
// leader. A real broker acknowledges CreateTopics before every broker knows the leaders.
func waitLeaders(ctx context.Context, adm *kadm.Client, topic string, want int32) error {
	backoff := time.NewTicker(50 * time.Millisecond)
	defer backoff.Stop()
	var last error
	for {
		last = leadersKnown(ctx, adm, topic, want)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("partition leaders not known after %v: %w", readyTimeout, errors.Join(last, ctx.Err()))
		case <-backoff.C:
		}
	}
}

func leadersKnown(ctx context.Context, adm *kadm.Client, topic string, want int32) error {
	details, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return err
	}
	td, ok := details[topic]
	if !ok {
		return errors.New("not in metadata")
	}
	if td.Err != nil {
		return td.Err
	}
	if want > 0 && int32(len(td.Partitions)) != want {
		return fmt.Errorf("%d of %d partitions in metadata", len(td.Partitions), want)
	}
	for _, p := range td.Partitions {
		if p.Err != nil {
			return fmt.Errorf("partition %d: %w", p.Partition, p.Err)
		}
		if p.Leader < 0 {
			return fmt.Errorf("partition %d has no leader", p.Partition)
		}
	}
	return nil
}

// UniqueName returns prefix + "-" + the test's name made topic-safe + "-" + 8 random hex
// digits: a topic, group or transactional id no other test or earlier run on the same broker
// uses. The result is at most 200 characters (Kafka allows 249 for topics).
func UniqueName(t testing.TB, prefix string) string {
	t.Helper()
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("kafkatest: random name suffix: %v", err)
	}
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '_'
	}, t.Name())
	const maxName = 200 - 2 - 8
	if room := maxName - len(prefix); len(name) > room {
		name = name[len(name)-max(room, 0):]
	}
	return prefix + "-" + name + "-" + hex.EncodeToString(b[:])
}

// SplitBrokers splits a comma-separated address list, dropping blanks.
func SplitBrokers(brokers string) []string {
	var out []string
	for _, b := range strings.Split(brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}
