package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// errText is err's message, or "" for nil (JSON-friendly).
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// runAdmin runs kadm's calls one after the other, one output line each: CreateTopics
// (with -create; the topic must be new), ListTopics, Metadata, DescribeCluster,
// ApiVersions of every broker; with -group: DescribeGroups, ConsumerGroupDescribe,
// ListGroups, OffsetFetch (and DeleteGroups last, with -delete-group); with -txn-id:
// DescribeTransactions, ListTransactions; with -topic: DescribeProducers, ListOffsets. Calls whose
// result is per item (a group, a broker) report the item's error in the line instead
// of failing the command, so one run shows everything the gateway answered.
func runAdmin(ctx context.Context, o *options) error {
	cl, err := o.newClient()
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	if o.create > 0 {
		created, err := adm.CreateTopic(ctx, int32(o.create), 1, nil, o.topic)
		if err == nil {
			err = created.Err
		}
		if err != nil {
			return fmt.Errorf("create topic: %w", err)
		}
		o.emit("created", map[string]any{
			"topic": created.Topic, "partitions": created.NumPartitions, "id": created.ID.String(),
		})
	}

	topics, err := adm.ListTopics(ctx)
	if err != nil {
		return fmt.Errorf("list topics: %w", err)
	}
	o.emit("topics", map[string]any{"names": topics.Names()})

	meta, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return fmt.Errorf("metadata: %w", err)
	}
	o.emit("metadata", map[string]any{
		"cluster": meta.Cluster, "controller": meta.Controller, "brokers": brokerList(meta.Brokers),
	})

	if err := describeCluster(ctx, o, cl); err != nil {
		return err
	}

	versions, err := adm.ApiVersions(ctx)
	if err != nil {
		return fmt.Errorf("api versions: %w", err)
	}
	for _, v := range versions.Sorted() {
		fields := map[string]any{"node_id": v.NodeID, "error": errText(v.Err)}
		if v.Err == nil {
			maps := versionFields(v.Raw())
			for k, val := range maps {
				fields[k] = val
			}
		}
		o.emit("api_versions", fields)
	}

	if o.group != "" {
		describeGroups(ctx, o, adm)
	}
	if o.txnID != "" {
		describeTransactions(ctx, o, adm)
	}
	if o.topic != "" {
		if err := describeProducers(ctx, o, adm); err != nil {
			return err
		}
		if err := listOffsets(ctx, o, adm); err != nil {
			return err
		}
	}
	if o.group != "" && o.deleteGroup {
		deleted, err := adm.DeleteGroup(ctx, o.group)
		if err == nil {
			err = deleted.Err
		}
		o.emit("delete_group", map[string]any{
			"group": o.group, "error": errText(err), "message": deleted.ErrMessage,
		})
	}
	return nil
}

func brokerList(brokers []kgo.BrokerMetadata) []map[string]any {
	out := make([]map[string]any, 0, len(brokers))
	for _, b := range brokers {
		out = append(out, map[string]any{"node_id": b.NodeID, "host": b.Host, "port": b.Port})
	}
	return out
}

// describeCluster sends DescribeCluster (KIP-700) itself: kadm 1.20 has no call for it.
func describeCluster(ctx context.Context, o *options, cl *kgo.Client) error {
	req := kmsg.NewPtrDescribeClusterRequest()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("describe cluster: %w", err)
	}
	brokers := make([]kgo.BrokerMetadata, 0, len(resp.Brokers))
	for _, b := range resp.Brokers {
		brokers = append(brokers, kgo.BrokerMetadata{NodeID: b.NodeID, Host: b.Host, Port: b.Port})
	}
	o.emit("describe_cluster", map[string]any{
		"error":      errText(kerr.ErrorForCode(resp.ErrorCode)),
		"cluster":    resp.ClusterID,
		"controller": resp.ControllerID,
		"brokers":    brokerList(brokers),
	})
	return nil
}

// describeGroups reports o.group through the classic DescribeGroups, the KIP-848
// ConsumerGroupDescribe, and OffsetFetch (its committed offsets).
func describeGroups(ctx context.Context, o *options, adm *kadm.Client) {
	classic, err := adm.DescribeGroups(ctx, o.group)
	fields := map[string]any{"group": o.group, "error": errText(err)}
	if g, ok := classic[o.group]; ok {
		fields["error"] = errText(g.Err)
		fields["state"] = g.State
		fields["protocol_type"] = g.ProtocolType
		fields["protocol"] = g.Protocol
		fields["members"] = len(g.Members)
		fields["coordinator"] = brokerList([]kgo.BrokerMetadata{{
			NodeID: g.Coordinator.NodeID, Host: g.Coordinator.Host, Port: g.Coordinator.Port,
		}})
	}
	o.emit("describe_groups", fields)

	next, err := adm.DescribeConsumerGroups(ctx, o.group)
	fields = map[string]any{"group": o.group, "error": errText(err)}
	if g, ok := next[o.group]; ok {
		fields["error"] = errText(g.Err)
		fields["state"] = g.State
		fields["epoch"] = g.Epoch
		fields["assignor"] = g.AssignorName
		fields["members"] = len(g.Members)
	}
	o.emit("describe_consumer_groups", fields)

	listed, err := adm.ListGroups(ctx)
	fields = map[string]any{"group": o.group, "error": errText(err), "listed": false}
	if g, ok := listed[o.group]; ok {
		fields["listed"] = true
		fields["type"] = g.GroupType
		fields["protocol_type"] = g.ProtocolType
		fields["state"] = g.State
		fields["coordinator"] = g.Coordinator
	}
	o.emit("list_groups", fields)

	offsets, err := adm.FetchOffsets(ctx, o.group)
	committed := map[string]map[string]int64{}
	offsets.Each(func(r kadm.OffsetResponse) {
		if committed[r.Topic] == nil {
			committed[r.Topic] = map[string]int64{}
		}
		committed[r.Topic][fmt.Sprint(r.Partition)] = r.At
	})
	o.emit("group_offsets", map[string]any{"group": o.group, "error": errText(err), "offsets": committed})
}

// describeTransactions reports -txn-id through DescribeTransactions and
// ListTransactions, both of which go to the transaction coordinator the gateway named.
func describeTransactions(ctx context.Context, o *options, adm *kadm.Client) {
	described, err := adm.DescribeTransactions(ctx, o.txnID)
	fields := map[string]any{"txn_id": o.txnID, "error": errText(err)}
	if t, ok := described[o.txnID]; ok {
		fields["error"] = errText(t.Err)
		fields["state"] = t.State
		fields["producer_id"] = t.ProducerID
		fields["coordinator"] = t.Coordinator
	}
	o.emit("describe_transactions", fields)

	listed, err := adm.ListTransactions(ctx, nil, nil)
	fields = map[string]any{"txn_id": o.txnID, "error": errText(err), "listed": false}
	if t, ok := listed[o.txnID]; ok {
		fields["listed"] = true
		fields["state"] = t.State
		fields["producer_id"] = t.ProducerID
	}
	o.emit("list_transactions", fields)
}

// describeProducers reports the producer IDs each partition leader of -topic knows
// (DescribeProducers goes to the leaders, at the addresses the gateway gave).
func describeProducers(ctx context.Context, o *options, adm *kadm.Client) error {
	meta, err := adm.Metadata(ctx, o.topic)
	if err != nil {
		return fmt.Errorf("metadata of %s: %w", o.topic, err)
	}
	set := kadm.TopicsSet{}
	for p := range meta.Topics[o.topic].Partitions {
		set.Add(o.topic, p)
	}
	described, err := adm.DescribeProducers(ctx, set)
	if err != nil {
		return fmt.Errorf("describe producers: %w", err)
	}
	producers := map[string][]int64{}
	described.EachPartition(func(p kadm.DescribedProducersPartition) {
		ids := []int64{}
		for _, b := range p.ActiveProducers.Sorted() {
			ids = append(ids, b.ProducerID)
		}
		producers[fmt.Sprint(p.Partition)] = ids
	})
	o.emit("describe_producers", map[string]any{"topic": o.topic, "producers": producers})
	return nil
}

// listOffsets reports the start and end offsets (ListOffsets) of o.topic's partitions.
func listOffsets(ctx context.Context, o *options, adm *kadm.Client) error {
	fields := map[string]any{"topic": o.topic}
	for name, list := range map[string]func(context.Context, ...string) (kadm.ListedOffsets, error){
		"start": adm.ListStartOffsets, "end": adm.ListEndOffsets,
	} {
		listed, err := list(ctx, o.topic)
		if err == nil {
			err = listed.Error()
		}
		if err != nil {
			return fmt.Errorf("list %s offsets: %w", name, err)
		}
		at := map[string]int64{}
		listed.Each(func(l kadm.ListedOffset) { at[fmt.Sprint(l.Partition)] = l.Offset })
		fields[name] = at
	}
	o.emit("offsets", fields)
	return nil
}

// versionFields describes an ApiVersions answer: max version per request name,
// features, and kversion's guess of the Kafka release, plus where the answer
// differs from kversion's table for Kafka 4.4 (what franz-go expects of that release).
func versionFields(resp *kmsg.ApiVersionsResponse) map[string]any {
	vs := kversion.FromApiVersionsResponse(resp)
	keys := map[string][2]int16{}
	for _, k := range resp.ApiKeys {
		keys[keyName(k.ApiKey)] = [2]int16{k.MinVersion, k.MaxVersion}
	}
	supported := map[string][2]int16{}
	vs.EachSupportedFeature(func(name string, lo, hi int16) { supported[name] = [2]int16{lo, hi} })
	finalized := map[string]int16{}
	vs.EachFinalizedFeature(func(name string, level int16) { finalized[name] = level })

	// Per key: [kversion 4.4 max, answered max]; -1 where one side lacks the key.
	diff := map[string][2]int16{}
	table := kversion.V4_4_0()
	table.EachMaxKeyVersion(func(k, v int16) {
		got, ok := vs.LookupMaxKeyVersion(k)
		if !ok {
			got = -1
		}
		if got != v {
			diff[keyName(k)] = [2]int16{v, got}
		}
	})
	vs.EachMaxKeyVersion(func(k, v int16) {
		if !table.HasKey(k) {
			diff[keyName(k)] = [2]int16{-1, v}
		}
	})
	// Top-level tags kmsg does not know, as compact strings where they read as one
	// (the gateway's KIP-885 BrokerSoftwareName/Version are such tags).
	unknown := map[string]string{}
	resp.UnknownTags.Each(func(tag uint32, raw []byte) {
		r := kbin.Reader{Src: raw}
		text := r.CompactString()
		if r.Complete() != nil {
			text = fmt.Sprintf("%x", raw)
		}
		unknown[fmt.Sprint(tag)] = text
	})
	return map[string]any{
		"unknown_tags":       unknown,
		"guess":              vs.VersionGuess(),
		"keys":               keys,
		"supported_features": supported,
		"finalized_features": finalized,
		"finalized_epoch":    resp.FinalizedFeaturesEpoch,
		"diff_vs_kafka_4_4":  diff,
		"api_versions_error": errText(kerr.ErrorForCode(resp.ErrorCode)),
	}
}

func keyName(k int16) string {
	if name := kmsg.NameForKey(k); name != "" {
		return name
	}
	return fmt.Sprintf("Key%d", k)
}

// runVersions sends ApiVersions on the bootstrap connection only. A broker that
// advertises an unreachable host still answers this, so the same command gives the
// broker's own answer (direct) and the gateway's (through it) for comparison.
func runVersions(ctx context.Context, o *options) error {
	cl, err := o.newClient()
	if err != nil {
		return err
	}
	defer cl.Close()
	seeds := cl.SeedBrokers()
	if len(seeds) == 0 {
		return errors.New("no seed broker")
	}
	req := kmsg.NewPtrApiVersionsRequest()
	req.ClientSoftwareName = "kafka-gateway-tests-franz-go"
	req.ClientSoftwareVersion = "1.22"
	resp, err := req.RequestWith(ctx, seeds[0])
	if err != nil {
		return fmt.Errorf("api versions: %w", err)
	}
	fields := versionFields(resp)
	fields["response_version"] = resp.Version
	o.emit("api_versions", fields)
	return nil
}
