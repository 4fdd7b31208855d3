package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// recordFields is how a record appears in the output: "bytes" counts key, value and
// headers, so a -pad header shows up there without being printed.
func recordFields(r *kgo.Record) map[string]any {
	size := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		size += len(h.Key) + len(h.Value)
	}
	return map[string]any{
		"topic":     r.Topic,
		"partition": r.Partition,
		"offset":    r.Offset,
		"key":       string(r.Key),
		"value":     string(r.Value),
		"bytes":     size,
	}
}

// createTopic creates o.topic with o.create partitions unless -create is 0; a topic
// that already exists is fine (a rerun against the same broker).
func createTopic(ctx context.Context, o *options, cl *kgo.Client) error {
	if o.create <= 0 {
		return nil
	}
	adm := kadm.NewClient(cl)
	resp, err := adm.CreateTopic(ctx, int32(o.create), 1, nil, o.topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("create topic %s: %w", o.topic, err)
	}
	return nil
}

// produceValues produces one record per value (key "key-<i>", and a header "pad" of
// -pad bytes when set) and waits for the acknowledgements, printing each record
// where it landed. oneByOne sends each record as its own Produce request, after the
// previous one was written (acked, with acks other than 0).
func produceValues(ctx context.Context, o *options, cl *kgo.Client, values []string, oneByOne bool) error {
	records := make([]*kgo.Record, len(values))
	for i, v := range values {
		records[i] = &kgo.Record{Topic: o.topic, Key: []byte("key-" + strconv.Itoa(i)), Value: []byte(v)}
		if o.pad > 0 {
			records[i].Headers = []kgo.RecordHeader{{Key: "pad", Value: bytes.Repeat([]byte{'x'}, o.pad)}}
		}
	}
	batches := [][]*kgo.Record{records}
	if oneByOne {
		batches = batches[:0]
		for _, r := range records {
			batches = append(batches, []*kgo.Record{r})
		}
	}
	for _, batch := range batches {
		if err := cl.ProduceSync(ctx, batch...).FirstErr(); err != nil {
			return fmt.Errorf("produce: %w", err)
		}
	}
	for _, r := range records {
		o.emit("produced", recordFields(r))
	}
	return nil
}

func values(prefix string, count int) []string {
	out := make([]string, count)
	for i := range out {
		out[i] = prefix + "-" + strconv.Itoa(i)
	}
	return out
}

// runProduce produces -count records. With -acks all (the default) franz-go's
// defaults stay as they are: acks=all and the idempotent producer. With -acks leader
// or none idempotence is off (it needs acks=all) and every record is its own Produce
// request, so several such requests follow one another on one connection: with
// acks=0 the broker answers none of them, and a proxy that waited for an answer
// would stall or mismatch the ones after.
func runProduce(ctx context.Context, o *options) error {
	opts := []kgo.Opt{kgo.DefaultProduceTopic(o.topic)}
	switch o.acks {
	case "all":
	case "leader":
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	case "none":
		opts = append(opts, kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite())
	default:
		return fmt.Errorf("unknown acks %q (all, leader, none)", o.acks)
	}
	cl, err := o.newClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := createTopic(ctx, o, cl); err != nil {
		return err
	}
	return produceValues(ctx, o, cl, values(o.prefix, o.count), o.acks != "all")
}

// poll reads until want records arrived (or ctx ends) and returns them in poll order.
func poll(ctx context.Context, cl *kgo.Client, want int) ([]*kgo.Record, error) {
	var got []*kgo.Record
	for len(got) < want {
		fetches := cl.PollRecords(ctx, want-len(got))
		if err := ctx.Err(); err != nil {
			return got, fmt.Errorf("got %d of %d records: %w", len(got), want, err)
		}
		var fetchErr error
		fetches.EachError(func(topic string, partition int32, err error) {
			fetchErr = fmt.Errorf("fetch %s[%d]: %w", topic, partition, err)
		})
		if fetchErr != nil {
			return got, fetchErr
		}
		got = append(got, fetches.Records()...)
	}
	return got, nil
}

func isolationLevel(name string) (kgo.IsolationLevel, error) {
	switch name {
	case "read_committed":
		return kgo.ReadCommitted(), nil
	case "read_uncommitted":
		return kgo.ReadUncommitted(), nil
	}
	return kgo.ReadUncommitted(), fmt.Errorf("unknown isolation %q", name)
}

// runConsume reads every partition of o.topic from its start without a group
// (franz-go's direct consumer) until o.count records arrived.
func runConsume(ctx context.Context, o *options) error {
	isolation, err := isolationLevel(o.isolation)
	if err != nil {
		return err
	}
	cl, err := o.newClient(
		kgo.ConsumeTopics(o.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(isolation),
		kgo.FetchMaxWait(500*time.Millisecond),
	)
	if err != nil {
		return err
	}
	defer cl.Close()
	records, err := poll(ctx, cl, o.count)
	for _, r := range records {
		o.emit("consumed", recordFields(r))
	}
	return err
}
