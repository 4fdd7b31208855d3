// Command gatewayclient drives franz-go (kgo and kadm) against a Kafka address,
// normally a kafka-gateway, for the project's integration tests.
//
// Every subcommand prints JSON lines on stdout, one object per event, each with an
// "event" field. Every run ends with {"event":"wire",...}: the request versions the
// client sent (see wireLog); on failure an {"event":"error",...} line follows it and
// the exit code is 1.
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
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// command is one subcommand: its one-line help and what it runs.
type command struct {
	help string
	run  func(ctx context.Context, o *options) error
}

var commands = map[string]command{
	"produce":  {"produce -count records to -topic (-acks all: idempotent; -pad bytes)", runProduce},
	"consume":  {"read -count records of -topic from the start, no group", runConsume},
	"group":    {"consume -count records in -group, commit exactly them, leave", runGroup},
	"txn":      {"abort one transaction of -count records, then commit one", runTxn},
	"eos":      {"read -count records of -source in -group, write them to -topic (EOS)", runEOS},
	"admin":    {"kadm: create, topics, metadata, cluster, versions, -group, -topic offsets", runAdmin},
	"versions": {"ApiVersions on the bootstrap connection only, with kversion's guess", runVersions},
}

// options are the flags shared by all subcommands (each uses the ones it needs).
type options struct {
	bootstrap   string
	topic       string
	source      string
	group       string
	protocol    string
	isolation   string
	prefix      string
	acks        string
	txnID       string
	count       int
	pad         int
	deleteGroup bool
	create      int
	timeout     time.Duration

	out  *json.Encoder
	wire *wireLog
}

// emit prints one JSON line with the given event name and fields.
func (o *options) emit(event string, fields map[string]any) {
	line := map[string]any{"event": event}
	for k, v := range fields {
		line[k] = v
	}
	if err := o.out.Encode(line); err != nil {
		fmt.Fprintln(os.Stderr, "gatewayclient: cannot write output:", err)
		os.Exit(2)
	}
}

// clientOpts are the kgo options every client of this program uses: the recording
// dialer (with its own 5 s dial timeout), short timeouts (a broken gateway should fail
// a test in seconds), and a client software name that KIP-511 accepts.
func (o *options) clientOpts(extra ...kgo.Opt) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(strings.Split(o.bootstrap, ",")...),
		kgo.Dialer(o.wire.dial),
		kgo.RequestTimeoutOverhead(5 * time.Second),
		kgo.RetryTimeout(o.timeout),
		kgo.MetadataMinAge(250 * time.Millisecond),
		kgo.SoftwareNameAndVersion("kafka-gateway-tests-franz-go", "1.22"),
	}
	return append(opts, extra...)
}

// newClient is a kgo client with clientOpts and the command's own options.
func (o *options) newClient(extra ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(o.clientOpts(extra...)...)
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: gatewayclient <command> -bootstrap host:port [flags]")
	for _, name := range []string{"produce", "consume", "group", "txn", "eos", "admin", "versions"} {
		fmt.Fprintf(os.Stderr, "  %-9s %s\n", name, commands[name].help)
	}
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	cmd, ok := commands[os.Args[1]]
	if !ok {
		usage()
		os.Exit(2)
	}
	o := &options{out: json.NewEncoder(os.Stdout), wire: newWireLog()}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	fs.StringVar(&o.bootstrap, "bootstrap", "127.0.0.1:9092", "bootstrap servers (comma separated)")
	fs.StringVar(&o.topic, "topic", "", "topic")
	fs.StringVar(&o.source, "source", "", "topic eos reads from")
	fs.StringVar(&o.group, "group", "", "consumer group")
	fs.StringVar(&o.protocol, "protocol", "classic", "group protocol: classic or consumer (KIP-848)")
	fs.StringVar(&o.isolation, "isolation", "read_uncommitted", "read_committed or read_uncommitted")
	fs.StringVar(&o.acks, "acks", "all", "produce: all, leader or none (acks=0)")
	fs.StringVar(&o.prefix, "prefix", "v", "record value prefix (values are <prefix>-<i>)")
	fs.StringVar(&o.txnID, "txn-id", "", "transactional id")
	fs.BoolVar(&o.deleteGroup, "delete-group", false, "admin: delete -group at the end")
	fs.IntVar(&o.count, "count", 10, "number of records")
	fs.IntVar(&o.pad, "pad", 0, "produce: add a header of this many bytes to each record")
	fs.IntVar(&o.create, "create", 0, "create -topic with this many partitions first (0: do not)")
	fs.DurationVar(&o.timeout, "timeout", 20*time.Second, "upper bound for the whole command")
	if err := fs.Parse(os.Args[2:]); err != nil {
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	err := cmd.run(ctx, o)
	cancel()
	o.emit("wire", map[string]any{"requests": o.wire.summary(), "client_max": o.wire.clientMax()})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w (timeout %s)", err, o.timeout)
		}
		o.emit("error", map[string]any{"error": err.Error()})
		os.Exit(1)
	}
}
