// Command gatewaysarama drives IBM/sarama, pinned to an old Kafka release with -version,
// against a Kafka address (normally a kafka-gateway) for the project's integration tests
// of the version bridge: sarama picks each request's version from that release alone.
//
// Every subcommand prints JSON lines on stdout, one object per event, each with an
// "event" field; keys and values are base64 (JSON's []byte), a null key is null. On
// failure an {"event":"error",...} line ends the output and the exit code is 1.
// The Python side (tests/harness/go_clients.py) builds and runs it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// options are the flags shared by all subcommands (each uses the ones it needs).
type options struct {
	bootstrap   string
	topic       string
	group       string
	prefix      string
	version     sarama.KafkaVersion
	compression sarama.CompressionCodec
	apiVersions bool
	hash        bool
	count       int
	fetchBytes  int
	linger      time.Duration
	timeout     time.Duration

	out *json.Encoder
}

var commands = map[string]func(ctx context.Context, o *options) error{
	"produce": runProduce,
	"consume": runConsume,
	"group":   runGroup,
	"offsets": runOffsets,
}

// emit prints one JSON line with the given event name and fields.
func (o *options) emit(event string, fields map[string]any) {
	line := map[string]any{"event": event}
	for k, v := range fields {
		line[k] = v
	}
	if err := o.out.Encode(line); err != nil {
		fmt.Fprintln(os.Stderr, "gatewaysarama: cannot write output:", err)
		os.Exit(2)
	}
}

// config is a sarama config at -version with short timeouts (a broken gateway should fail
// a test in seconds) and few retries (a refused request should not be retried for long).
func (o *options) config() *sarama.Config {
	c := sarama.NewConfig()
	c.Version = o.version
	c.ClientID = "gatewaysarama"
	c.ApiVersionsRequest = o.apiVersions
	c.Net.DialTimeout = 5 * time.Second
	c.Net.ReadTimeout = 10 * time.Second
	c.Net.WriteTimeout = 10 * time.Second
	c.Metadata.Retry.Max = 3
	c.Metadata.Retry.Backoff = 250 * time.Millisecond
	c.Consumer.Fetch.Default = int32(o.fetchBytes)
	return c
}

// record is a produced or consumed record as printed.
func record(m *sarama.ConsumerMessage) map[string]any {
	return map[string]any{
		"partition":       m.Partition,
		"offset":          m.Offset,
		"key":             m.Key,
		"value":           m.Value,
		"timestamp_ms":    m.Timestamp.UnixMilli(),
		"block_timestamp": m.BlockTimestamp.UnixMilli(),
	}
}

func parseCodec(name string) (sarama.CompressionCodec, error) {
	var codec sarama.CompressionCodec
	err := codec.UnmarshalText([]byte(name))
	return codec, err
}

func main() {
	if len(os.Args) < 2 || commands[os.Args[1]] == nil {
		fmt.Fprintln(os.Stderr, "usage: gatewaysarama produce|consume|group|offsets -bootstrap host:port -topic t [flags]")
		os.Exit(2)
	}
	o := &options{out: json.NewEncoder(os.Stdout)}
	var version, codec string
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	fs.StringVar(&o.bootstrap, "bootstrap", "127.0.0.1:9092", "bootstrap servers (comma separated)")
	fs.StringVar(&o.topic, "topic", "", "topic")
	fs.StringVar(&o.group, "group", "", "group: the consumer group")
	fs.StringVar(&o.prefix, "prefix", "v", "produce: keys and values start with it")
	fs.StringVar(&version, "version", "0.8.2.0", "the Kafka release sarama speaks to (sarama.Version)")
	fs.StringVar(&codec, "compression", "none", "produce: none, gzip, snappy, lz4 or zstd")
	fs.BoolVar(&o.hash, "hash", false, "produce: spread records by key hash (sarama's default) instead of to partition 0")
	fs.BoolVar(&o.apiVersions, "api-versions", true, "send ApiVersions on each connection (sarama's ApiVersionsRequest)")
	fs.IntVar(&o.count, "count", 10, "produce: records to send; consume, group: records to read")
	fs.IntVar(&o.fetchBytes, "fetch-bytes", 1024*1024, "consume, group, offsets: a fetch's bytes per partition (Consumer.Fetch.Default)")
	fs.DurationVar(&o.linger, "linger", time.Second, "consume: how long to wait past -count for more (a duplicate)")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "upper bound for the whole command")
	if err := fs.Parse(os.Args[2:]); err != nil {
		os.Exit(2)
	}
	var err error
	if o.version, err = sarama.ParseKafkaVersion(version); err == nil {
		o.compression, err = parseCodec(codec)
	}
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
		err = commands[os.Args[1]](ctx, o)
		cancel()
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w (timeout %s)", err, o.timeout)
		}
		o.emit("error", map[string]any{"error": err.Error()})
		os.Exit(1)
	}
}

// keyValue is the i-th record produce sends: a null key now and then, values of several
// sizes with bytes of every kind (NUL, 0xff, invalid UTF-8), so a byte changed anywhere shows.
func keyValue(prefix string, i int) ([]byte, []byte) {
	var key []byte
	if i%9 != 4 {
		key = []byte(fmt.Sprintf("%s-key-%d", prefix, i))
	}
	value := []byte(strings.Repeat(fmt.Sprintf("%s-value-%d-", prefix, i), 1+i%5))
	value = append(value, 0x00, 0xff, byte(i), 0xc3)
	return key, value
}

// runProduce sends -count records to partition 0 of -topic (-hash: by key) with acks=all, as one
// SendMessages call (so they share compressed wrappers), and prints each as produced.
func runProduce(ctx context.Context, o *options) error {
	c := o.config()
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Return.Successes = true
	c.Producer.Compression = o.compression
	c.Producer.Partitioner = sarama.NewManualPartitioner
	if o.hash {
		c.Producer.Partitioner = sarama.NewHashPartitioner
	}
	c.Producer.Retry.Max = 2
	// Wrappers of up to 64 records: a reader that resumes at 100 (half of the tests' 200)
	// resumes inside one, and must be given its records from there on.
	c.Producer.Flush.Messages = 64
	c.Producer.Flush.MaxMessages = 64
	c.Producer.Flush.Frequency = 20 * time.Millisecond
	producer, err := sarama.NewSyncProducer(strings.Split(o.bootstrap, ","), c)
	if err != nil {
		return err
	}
	defer producer.Close()
	messages := make([]*sarama.ProducerMessage, o.count)
	for i := range messages {
		key, value := keyValue(o.prefix, i)
		m := &sarama.ProducerMessage{Topic: o.topic, Partition: 0, Value: sarama.ByteEncoder(value)}
		if key != nil {
			m.Key = sarama.ByteEncoder(key)
		}
		messages[i] = m
	}
	done := make(chan error, 1)
	go func() { done <- producer.SendMessages(messages) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if err != nil {
		return err
	}
	for i, m := range messages {
		key, value := keyValue(o.prefix, i)
		o.emit("produced", map[string]any{
			"partition": m.Partition, "offset": m.Offset, "key": key, "value": value,
		})
	}
	return nil
}

// runConsume reads partition 0 of -topic from its oldest offset: -count records, then
// -linger longer for any beyond them.
func runConsume(ctx context.Context, o *options) error {
	c := o.config()
	c.Consumer.Return.Errors = true
	consumer, err := sarama.NewConsumer(strings.Split(o.bootstrap, ","), c)
	if err != nil {
		return err
	}
	defer consumer.Close()
	partition, err := consumer.ConsumePartition(o.topic, 0, sarama.OffsetOldest)
	if err != nil {
		return err
	}
	defer partition.Close()
	got := 0
	var linger <-chan time.Time
	for {
		select {
		case m := <-partition.Messages():
			o.emit("consumed", record(m))
			if got++; got == o.count {
				linger = time.After(o.linger)
			}
		case err := <-partition.Errors():
			return err
		case <-linger:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("%d of %d records: %w", got, o.count, ctx.Err())
		}
	}
}

// taker is the group's handler: it marks -count records, commits exactly them and ends
// the session; records past them in the same claim are left for the next member.
type taker struct {
	o    *options
	want int
	done chan struct{}

	lock sync.Mutex // the claims' goroutines share the count
	got  int
}

func (t *taker) Setup(s sarama.ConsumerGroupSession) error {
	t.o.emit("assigned", map[string]any{"claims": s.Claims(), "generation": s.GenerationID()})
	return nil
}

func (t *taker) Cleanup(sarama.ConsumerGroupSession) error { return nil }

// take marks m unless -count are marked already; at the -count-th it commits them all.
func (t *taker) take(s sarama.ConsumerGroupSession, m *sarama.ConsumerMessage) bool {
	t.lock.Lock()
	defer t.lock.Unlock()
	if t.got >= t.want {
		return false
	}
	t.o.emit("consumed", record(m))
	s.MarkMessage(m, "")
	if t.got++; t.got == t.want {
		s.Commit()
		close(t.done)
		return false
	}
	return true
}

func (t *taker) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for {
		select {
		case m, ok := <-claim.Messages():
			if !ok || !t.take(s, m) {
				return nil
			}
		case <-s.Context().Done():
			return nil
		}
	}
}

// runGroup joins -group on -topic (offsets from the oldest where the group has none),
// reads -count records, commits them (no auto-commit) and leaves.
func runGroup(ctx context.Context, o *options) error {
	c := o.config()
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	c.Consumer.Offsets.AutoCommit.Enable = false
	c.Consumer.Group.Session.Timeout = 10 * time.Second
	c.Consumer.Group.Heartbeat.Interval = time.Second
	c.Consumer.Group.Rebalance.Timeout = 10 * time.Second
	c.Consumer.Return.Errors = true
	group, err := sarama.NewConsumerGroup(strings.Split(o.bootstrap, ","), o.group, c)
	if err != nil {
		return err
	}
	t := &taker{o: o, want: o.count, done: make(chan struct{})}
	session, stop := context.WithCancel(ctx)
	failed := make(chan error, 1)
	go func() {
		for session.Err() == nil {
			if err := group.Consume(session, []string{o.topic}, t); err != nil {
				failed <- err
				return
			}
		}
	}()
	select {
	case <-t.done:
		err = nil
	case err = <-failed:
	case err = <-group.Errors():
	case <-ctx.Done():
		t.lock.Lock()
		err = fmt.Errorf("%d of %d records: %w", t.got, t.want, ctx.Err())
		t.lock.Unlock()
	}
	stop()
	if closeErr := group.Close(); err == nil && closeErr != nil {
		err = closeErr
	}
	if err == nil {
		o.emit("committed", map[string]any{"records": t.got})
	}
	return err
}

// runOffsets reads partition 0 of -topic as a consumer outside any group membership that
// keeps its offset in -group (sarama's OffsetManager: at 0.8.2, OffsetCommit v1 and
// OffsetFetch v1): from the committed offset (the oldest where none is), -count records,
// then commits the offset after the last one.
func runOffsets(ctx context.Context, o *options) error {
	c := o.config()
	c.Consumer.Return.Errors = true
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	c.Consumer.Offsets.AutoCommit.Enable = false
	client, err := sarama.NewClient(strings.Split(o.bootstrap, ","), c)
	if err != nil {
		return err
	}
	defer client.Close()
	offsets, err := sarama.NewOffsetManagerFromClient(o.group, client)
	if err != nil {
		return err
	}
	defer offsets.Close()
	committed, err := offsets.ManagePartition(o.topic, 0)
	if err != nil {
		return err
	}
	// Without auto-commit only the manager's Close releases it: Close would wait forever.
	defer committed.AsyncClose()
	start, _ := committed.NextOffset()
	// NextOffset is Offsets.Initial (OffsetOldest, negative) where nothing was committed.
	o.emit("resumed", map[string]any{"offset": start, "committed": start >= 0})
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return err
	}
	defer consumer.Close()
	partition, err := consumer.ConsumePartition(o.topic, 0, start)
	if err != nil {
		return err
	}
	defer partition.Close()
	for got := 0; got < o.count; got++ {
		select {
		case m := <-partition.Messages():
			o.emit("consumed", record(m))
			committed.MarkOffset(m.Offset+1, "")
		case err := <-partition.Errors():
			return err
		case err := <-committed.Errors():
			return err
		case <-ctx.Done():
			return fmt.Errorf("%d of %d records: %w", got, o.count, ctx.Err())
		}
	}
	offsets.Commit()
	select {
	case err := <-committed.Errors():
		return err
	default:
	}
	next, _ := committed.NextOffset()
	o.emit("committed", map[string]any{"offset": next})
	return nil
}
