package kafkatest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// EnvClusterPort sets the first port of the three-node clusters StartCluster starts (default
// 19292, clear of the single test broker's 19092 and its controller's 19192): node i listens on
// port+i-1, its controller on port+100+i-1.
const EnvClusterPort = "SLUICE_TEST_CLUSTER_PORT"

// Cluster is a real Apache Kafka cluster of three KRaft nodes (each a broker and a controller;
// replication factor 3, min.insync.replicas 2) that integration/kafka/kafka.sh starts for one
// test in a directory of its own, so that the test can kill nodes with SIGKILL and restart them
// with their data. Its methods are called from the test goroutine only.
type Cluster struct {
	t      testing.TB
	script string // integration/kafka/kafka.sh
	dir    string
	port   int
	// Addrs are the nodes' bootstrap addresses, comma-separated.
	Addrs string
}

// Nodes is the number of nodes of a Cluster.
const Nodes = 3

// StartCluster starts a fresh three-node cluster and stops it (and removes its data) at
// cleanup. Like Brokers it needs a real-broker environment: without $SLUICE_TEST_KAFKA (whose
// presence says the broker's jars are fetched) the test is skipped, except when a real broker
// is required ($CI, $SLUICE_REQUIRE_KAFKA), where kafka.sh fetches the jars if needed.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	required := os.Getenv("CI") == "true" || os.Getenv(EnvRequire) == "1"
	if os.Getenv(EnvBrokers) == "" && !required {
		t.Skipf("kafkatest: no real-broker environment (%s unset): a three-node cluster is started only where the single broker is", EnvBrokers)
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("kafkatest: cannot locate integration/kafka/kafka.sh")
	}
	port := 19292
	if s := os.Getenv(EnvClusterPort); s != "" {
		p, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("kafkatest: %s=%q is not a port", EnvClusterPort, s)
		}
		port = p
	}
	c := &Cluster{
		t:      t,
		script: filepath.Join(filepath.Dir(file), "..", "kafka", "kafka.sh"),
		dir:    filepath.Join(t.TempDir(), "kafka"),
		port:   port,
	}
	t.Cleanup(func() {
		// --kill: the data goes with the cluster, so there is nothing to shut down cleanly.
		if out, err := c.run("stop", "--kill", "--clean"); err != nil {
			t.Logf("kafkatest: stopping the cluster: %v\n%s", err, out)
		}
	})
	start := time.Now()
	c.Addrs = c.start()
	t.Logf("kafkatest: three-node cluster at %s started in %v", c.Addrs, time.Since(start).Round(time.Millisecond))
	return c
}

// run runs kafka.sh cmd with the cluster's directory and the given flags, returning its stdout.
func (c *Cluster) run(cmd string, flags ...string) (string, error) {
	args := append([]string{c.script, cmd, "--dir", c.dir}, flags...)
	var stdout, stderr bytes.Buffer
	sh := exec.Command("bash", args...)
	sh.Stdout, sh.Stderr = &stdout, &stderr
	if err := sh.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kafka.sh %s: %w\n%s", cmd, err, stderr.String())
	}
	return strings.TrimSpace(stdout.String()), nil
}

// start starts the nodes that are not running and waits until each has started.
func (c *Cluster) start() string {
	c.t.Helper()
	out, err := c.run("start", "--port", strconv.Itoa(c.port), "--brokers", strconv.Itoa(Nodes))
	if err != nil {
		c.t.Fatalf("kafkatest: %v", err)
	}
	return out
}

// Kill sends SIGKILL to node (1-based) and waits until its process is gone.
func (c *Cluster) Kill(node int32) {
	c.t.Helper()
	if _, err := c.run("stop", "--node", strconv.Itoa(int(node)), "--kill"); err != nil {
		c.t.Fatalf("kafkatest: killing node %d: %v", node, err)
	}
}

// Restart starts every node that is not running, with the data it had, and waits until each
// has logged that it started.
func (c *Cluster) Restart() {
	c.t.Helper()
	c.start()
}

// Leader returns the node that leads partition of topic.
func (c *Cluster) Leader(ctx context.Context, cl *kgo.Client, topic string, partition int32) (int32, error) {
	details, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil {
		return 0, err
	}
	td, ok := details[topic]
	if !ok || td.Err != nil {
		return 0, fmt.Errorf("topic %s not in metadata: %v", topic, td.Err)
	}
	p, ok := td.Partitions[partition]
	if !ok || p.Err != nil || p.Leader < 0 {
		return 0, fmt.Errorf("topic %s partition %d has no leader (%v)", topic, partition, p.Err)
	}
	return p.Leader, nil
}

// Controller returns the node that is the active controller: the leader of the metadata
// log's quorum.
func (c *Cluster) Controller(ctx context.Context, cl *kgo.Client) (int32, error) {
	req := kmsg.NewPtrDescribeQuorumRequest()
	topic := kmsg.NewDescribeQuorumRequestTopic()
	topic.Topic = "__cluster_metadata"
	part := kmsg.NewDescribeQuorumRequestTopicPartition()
	topic.Partitions = append(topic.Partitions, part)
	req.Topics = append(req.Topics, topic)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, err
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return 0, err
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return 0, fmt.Errorf("describe quorum: unexpected answer %+v", resp)
	}
	p := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
		return 0, err
	}
	if p.LeaderID < 0 {
		return 0, fmt.Errorf("the metadata quorum has no leader")
	}
	return p.LeaderID, nil
}
