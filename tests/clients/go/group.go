package main

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// groupOpts configures a group member for a test: timings short enough for a test on a
// small machine, no autocommit (the command commits exactly what it printed), and the
// protocol: "classic" (JoinGroup/SyncGroup, client-side balancing) or "consumer"
// (KIP-848, ServerSideBalancer: the broker assigns through ConsumerGroupHeartbeat).
// franz-go silently falls back to classic when the broker does not advertise
// ConsumerGroupHeartbeat v1+; the "wire" line shows which one really ran.
func groupOpts(o *options, topic string) ([]kgo.Opt, error) {
	opts := []kgo.Opt{
		kgo.ConsumerGroup(o.group),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.SessionTimeout(6 * time.Second),
		kgo.HeartbeatInterval(500 * time.Millisecond),
		kgo.RebalanceTimeout(10 * time.Second),
		kgo.FetchMaxWait(500 * time.Millisecond),
	}
	switch o.protocol {
	case "classic":
	case "consumer":
		opts = append(opts, kgo.ServerSideBalancer(), kgo.Balancers(kgo.RangeBalancer()))
	default:
		return nil, fmt.Errorf("unknown group protocol %q", o.protocol)
	}
	return opts, nil
}

// runGroup joins o.group, reads o.count records, commits exactly those (per partition,
// the offset after the last one read) and leaves, so a second run resumes after them.
func runGroup(ctx context.Context, o *options) error {
	opts, err := groupOpts(o, o.topic)
	if err != nil {
		return err
	}
	cl, err := o.newClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close() // leaves the group
	records, err := poll(ctx, cl, o.count)
	if err != nil {
		return err
	}
	records = records[:o.count]
	for _, r := range records {
		o.emit("consumed", recordFields(r))
	}
	if err := cl.CommitRecords(ctx, records...); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	committed := map[string]int64{}
	for _, r := range records {
		committed[fmt.Sprint(r.Partition)] = r.Offset + 1
	}
	member, generation := cl.GroupMetadata()
	o.emit("committed", map[string]any{
		"group":      o.group,
		"offsets":    committed,
		"member_id":  member,
		"generation": generation,
	})
	return nil
}
