package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
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
// ApiVersions of every broker, the groups of -group and the offsets of -topic. Calls whose
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
	if o.topic != "" {
		return listOffsets(ctx, o, adm)
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
	return map[string]any{
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
