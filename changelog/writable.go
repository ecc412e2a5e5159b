package changelog

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// AwaitWritable waits until every partition of topics has a leader that serves it: a fresh
// metadata request names a leader for each, and a ListOffsets of each partition, sent to that
// leader, answers without error. It asks every 10 ms, for at most limit, and reports whether
// they were ready; a topic not ready by then is left to the producer's retries.
//
// A topic that CreateTopics has just created is known to the controller before its leader
// serves it. A produce to it in that moment gets NOT_LEADER_OR_FOLLOWER, and franz-go tries
// again only after a backoff and a metadata refresh: a Nexmark q8 run on a local broker lost
// 0.3–1 s so, about one run in three. Asking the broker directly, without the client's retries,
// costs a few milliseconds a round.
func AwaitWritable(ctx context.Context, cl *kgo.Client, topics []string, limit time.Duration) bool {
	if len(topics) == 0 {
		return true
	}
	deadline := time.Now().Add(limit)
	for {
		if writable(ctx, cl, topics) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// writable is one round of AwaitWritable.
func writable(ctx context.Context, cl *kgo.Client, topics []string) bool {
	mreq := kmsg.NewPtrMetadataRequest()
	mreq.AllowAutoTopicCreation = false // a probe: it creates nothing
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		mreq.Topics = append(mreq.Topics, rt)
	}
	mresp, err := mreq.RequestWith(ctx, cl)
	if err != nil || len(mresp.Topics) != len(topics) {
		return false
	}
	byLeader := map[int32]*kmsg.ListOffsetsRequest{}
	for _, t := range mresp.Topics {
		if t.ErrorCode != 0 || t.Topic == nil || len(t.Partitions) == 0 {
			return false
		}
		for _, p := range t.Partitions {
			if p.ErrorCode != 0 || p.Leader < 0 {
				return false
			}
			req := byLeader[p.Leader]
			if req == nil {
				req = kmsg.NewPtrListOffsetsRequest()
				req.ReplicaID = -1
				byLeader[p.Leader] = req
			}
			if n := len(req.Topics); n == 0 || req.Topics[n-1].Topic != *t.Topic {
				rt := kmsg.NewListOffsetsRequestTopic()
				rt.Topic = *t.Topic
				req.Topics = append(req.Topics, rt)
			}
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition = p.Partition
			rp.CurrentLeaderEpoch = -1
			rp.Timestamp = -1 // the end offset
			rt := &req.Topics[len(req.Topics)-1]
			rt.Partitions = append(rt.Partitions, rp)
		}
	}
	for leader, req := range byLeader {
		resp, err := req.RequestWith(ctx, cl.Broker(int(leader)))
		if err != nil {
			return false
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode != 0 {
					return false
				}
			}
		}
	}
	return true
}
