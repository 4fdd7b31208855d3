package main

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// runTxn runs two transactions with a plain transactional producer: the first, of
// values "aborted-<i>", is aborted; the second, "committed-<i>", is committed. Aborting
// first puts the aborted records at lower offsets, so a read_committed reader that
// wrongly returned them would see them before the committed ones.
func runTxn(ctx context.Context, o *options) error {
	cl, err := o.newClient(
		kgo.DefaultProduceTopic(o.topic),
		kgo.TransactionalID(o.txnID),
		kgo.TransactionTimeout(o.timeout),
	)
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := createTopic(ctx, o, cl); err != nil {
		return err
	}
	for _, end := range []struct {
		prefix string
		commit kgo.TransactionEndTry
	}{{"aborted", kgo.TryAbort}, {"committed", kgo.TryCommit}} {
		if err := cl.BeginTransaction(); err != nil {
			return fmt.Errorf("begin %s transaction: %w", end.prefix, err)
		}
		if err := produceValues(ctx, o, cl, values(end.prefix, o.count), false); err != nil {
			return err
		}
		if err := cl.EndTransaction(ctx, end.commit); err != nil {
			return fmt.Errorf("end %s transaction: %w", end.prefix, err)
		}
		o.emit("transaction", map[string]any{"ended": end.prefix, "records": o.count})
	}
	return nil
}

// runEOS is consume-transform-produce with franz-go's GroupTransactSession: it reads
// -source in -group and writes each record's value, prefixed "eos-", to -topic, one
// transaction per poll, committing the group's offsets inside the transaction
// (AddOffsetsToTxn, TxnOffsetCommit), until -count records went through.
func runEOS(ctx context.Context, o *options) error {
	opts, err := groupOpts(o, o.source)
	if err != nil {
		return err
	}
	opts = append(opts,
		kgo.DefaultProduceTopic(o.topic),
		kgo.TransactionalID(o.txnID),
		kgo.TransactionTimeout(o.timeout),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	sess, err := kgo.NewGroupTransactSession(o.clientOpts(opts...)...)
	if err != nil {
		return err
	}
	defer sess.Close()
	if err := createTopic(ctx, o, sess.Client()); err != nil {
		return err
	}
	done := 0
	for done < o.count {
		fetches := sess.PollRecords(ctx, o.count-done)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("moved %d of %d records: %w", done, o.count, err)
		}
		if err := fetches.Err(); err != nil {
			return fmt.Errorf("poll: %w", err)
		}
		if err := sess.Begin(); err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		var out []*kgo.Record
		fetches.EachRecord(func(r *kgo.Record) {
			out = append(out, &kgo.Record{Key: r.Key, Value: append([]byte("eos-"), r.Value...)})
		})
		if err := sess.ProduceSync(ctx, out...).FirstErr(); err != nil {
			return fmt.Errorf("produce: %w", err)
		}
		committed, err := sess.End(ctx, kgo.TryCommit)
		if err != nil {
			return fmt.Errorf("end transaction: %w", err)
		}
		if committed {
			done += len(out)
		}
		o.emit("transaction", map[string]any{"records": len(out), "committed": committed})
	}
	return nil
}
