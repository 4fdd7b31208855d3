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
		if err := produceValues(ctx, o, cl, values(end.prefix, o.count)); err != nil {
			return err
		}
		if err := cl.EndTransaction(ctx, end.commit); err != nil {
			return fmt.Errorf("end %s transaction: %w", end.prefix, err)
		}
		o.emit("transaction", map[string]any{"ended": end.prefix, "records": o.count})
	}
	return nil
}
