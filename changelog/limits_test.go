package changelog_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/sluice-dev/sluice/changelog"
	"github.com/sluice-dev/sluice/integration/kafkatest"
)

// TestMaxMessageBytes: MaxMessageBytes reports each topic's effective max.message.bytes: its
// own override, or else the broker's default (on the real broker, its message.max.bytes read
// with DescribeBrokerConfigs, apart from the topic's configs; on kfake, its documented default,
// 1048588). A topic that does not exist is an error naming it.
func TestMaxMessageBytes(t *testing.T) {
	t.Run("Fake", func(t *testing.T) {
		c := kafkatest.FakeCluster(t, kfake.NumBrokers(1))
		checkMaxMessageBytes(t, strings.Join(c.ListenAddrs(), ","), 1_048_588)
	})
	t.Run("Kafka", func(t *testing.T) {
		brokers := kafkatest.Brokers(t)
		adm := kadm.NewClient(kafkatest.Client(t, brokers))
		meta, err := adm.BrokerMetadata(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		rcs, err := adm.DescribeBrokerConfigs(t.Context(), meta.Brokers.NodeIDs()...)
		if err != nil {
			t.Fatal(err)
		}
		def := int32(-1)
		for _, rc := range rcs {
			for _, c := range rc.Configs {
				if c.Key == "message.max.bytes" && c.Value != nil {
					n, err := strconv.Atoi(*c.Value)
					if err != nil {
						t.Fatal(err)
					}
					def = int32(n)
				}
			}
		}
		if def < 0 {
			t.Fatal("the broker did not report message.max.bytes")
		}
		checkMaxMessageBytes(t, brokers, def)
	})
}

func checkMaxMessageBytes(t *testing.T, brokers string, brokerDefault int32) {
	small, plain := kafkatest.UniqueName(t, "small"), kafkatest.UniqueName(t, "plain")
	kafkatest.CreateTopic(t, brokers, small, 1, map[string]*string{"max.message.bytes": kadm.StringPtr("16384")})
	kafkatest.CreateTopic(t, brokers, plain, 1, nil)
	adm := kadm.NewClient(kafkatest.Client(t, brokers))
	got, err := changelog.MaxMessageBytes(t.Context(), adm, small, plain)
	if err != nil {
		t.Fatal(err)
	}
	if got[small] != 16384 || got[plain] != brokerDefault || len(got) != 2 {
		t.Errorf("MaxMessageBytes = %v, want %s:16384 %s:%d", got, small, plain, brokerDefault)
	}
	// A missing topic is retried as one just created that a broker does not know yet; the
	// deadline ends the wait.
	missing := kafkatest.UniqueName(t, "missing")
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if _, err := changelog.MaxMessageBytes(ctx, adm, plain, missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("MaxMessageBytes with a missing topic = %v, want an error naming it", err)
	}
}
