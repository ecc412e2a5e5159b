package changelog_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-dev/sluice/changelog"
)

// TestAwaitWritable: AwaitWritable waits while a topic's leader does not serve a partition yet
// (ListOffsets answers NOT_LEADER_OR_FOLLOWER, as a broker does for a topic created a moment
// ago), returns once it does, and gives up after its limit for a topic that does not exist.
func TestAwaitWritable(t *testing.T) {
	c := newCluster(t)
	cl := client(t, c)
	ctx := context.Background()
	refused := 0
	c.ControlKey(int16(kmsg.ListOffsets), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if refused == 3 {
			return nil, nil, false // served
		}
		refused++
		r := req.(*kmsg.ListOffsetsRequest)
		resp := r.ResponseKind().(*kmsg.ListOffsetsResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewListOffsetsResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewListOffsetsResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.NotLeaderForPartition.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	if !changelog.AwaitWritable(ctx, cl, []string{topic}, 5*time.Second) {
		t.Fatal("not writable after its leader served it")
	}
	if refused != 3 {
		t.Fatalf("asked %d times while the leader refused, want 3", refused)
	}
	start := time.Now()
	if changelog.AwaitWritable(ctx, cl, []string{topic, "no-such-topic"}, 100*time.Millisecond) {
		t.Fatal("a topic that does not exist is writable")
	}
	if waited := time.Since(start); waited < 100*time.Millisecond {
		t.Fatalf("gave up after %v, before its limit", waited)
	}
}
