package kafkagateway.probe;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * The consuming scenarios.
 *
 * <ul>
 *   <li>{@code consume --topic T --expect N --group G --protocol classic|consumer
 *       [--timeout-ms MS]}: a consumer in group G with that {@code group.protocol}
 *       (KIP-848's is {@code consumer}) subscribes, polls until N records or the timeout,
 *       commits, and reports each {@code record}, its {@code membership} and
 *       {@code committed}. Without {@code --group} it reads the topic to its end instead.
 *   <li>{@code share --topic T --expect N --group G}: a KafkaShareConsumer (KIP-932) in
 *       share group G, whose {@code share.auto.offset.reset} is set to earliest first.
 * </ul>
 */
final class Consuming {
  private Consuming() {}

  private static Properties consumerProps(Main.Options opts, String role) {
    Properties props = Main.common(opts, role);
    props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
    props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
    props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    return props;
  }

  private static void emitRecord(ConsumerRecord<String, String> record, String how) {
    Json.emit(
        "record",
        "how", how,
        "key", record.key(),
        "value", record.value(),
        "partition", record.partition(),
        "offset", record.offset());
  }

  /**
   * Group {@code group}'s metadata as a consumer that never joined has it: what
   * sendOffsetsToTransaction takes (its constructors are deprecated for removal in 4.x).
   */
  static ConsumerGroupMetadata groupMetadata(Main.Options opts, String group) {
    Properties props = consumerProps(opts, "group-metadata");
    props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
    try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
      return consumer.groupMetadata();
    }
  }

  static void consume(Main.Options opts) {
    if (!opts.has("group")) {
      readToEnd(opts, opts.get("topic"), opts.get("isolation", "read_uncommitted"));
      return;
    }
    String protocol = opts.get("protocol", "classic");
    Properties props = consumerProps(opts, "consumer-" + protocol);
    props.put(ConsumerConfig.GROUP_ID_CONFIG, opts.get("group"));
    props.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
    if (protocol.equals("classic")) {
      // KIP-848's protocol takes these from the broker and refuses them on the client.
      props.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "6000");
      props.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
    }
    int expect = opts.getInt("expect", 1);
    long deadline = System.currentTimeMillis() + opts.getInt("timeout-ms", 20000);
    try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
      String step = "subscribe";
      try {
        consumer.subscribe(List.of(opts.get("topic")));
        step = "poll";
        int seen = 0;
        while (seen < expect && System.currentTimeMillis() < deadline) {
          for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(200))) {
            emitRecord(record, "group");
            seen++;
          }
        }
        Json.emit(
            "membership",
            "group_protocol", protocol,
            "member_id", consumer.groupMetadata().memberId(),
            "generation", consumer.groupMetadata().generationId(),
            "assignment", consumer.assignment().stream().map(TopicPartition::toString).toList());
        step = "commit";
        consumer.commitSync();
        Map<String, Object> committed = new HashMap<>();
        for (Map.Entry<TopicPartition, OffsetAndMetadata> entry :
            consumer.committed(consumer.assignment()).entrySet()) {
          committed.put(
              entry.getKey().toString(), entry.getValue() == null ? null : entry.getValue().offset());
        }
        Json.emit("committed", "count", seen, "offsets", committed);
      } catch (Exception exc) {
        Json.error(step, exc);
      }
    }
  }

  /**
   * Read every partition of {@code topic} from its start to its end offset at {@code
   * isolation} (for read_committed the end is the last stable offset), without a group.
   */
  static void readToEnd(Main.Options opts, String topic, String isolation) {
    Properties props = consumerProps(opts, "reader-" + isolation);
    props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
    long deadline = System.currentTimeMillis() + opts.getInt("timeout-ms", 20000);
    try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
      String step = "assign";
      try {
        List<TopicPartition> partitions = new ArrayList<>();
        for (PartitionInfo info : consumer.partitionsFor(topic)) {
          partitions.add(new TopicPartition(topic, info.partition()));
        }
        consumer.assign(partitions);
        consumer.seekToBeginning(partitions);
        Map<TopicPartition, Long> ends = consumer.endOffsets(partitions);
        step = "poll";
        int seen = 0;
        while (!reachedEnd(consumer, ends) && System.currentTimeMillis() < deadline) {
          ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
          for (ConsumerRecord<String, String> record : records) {
            emitRecord(record, isolation);
            seen++;
          }
        }
        Json.emit(
            "read",
            "isolation", isolation,
            "count", seen,
            "reached_end", reachedEnd(consumer, ends),
            "end_offsets", ends.values().stream().mapToLong(Long::longValue).sum());
      } catch (Exception exc) {
        Json.error(step, exc);
      }
    }
  }

  private static boolean reachedEnd(
      KafkaConsumer<String, String> consumer, Map<TopicPartition, Long> ends) {
    for (Map.Entry<TopicPartition, Long> end : ends.entrySet()) {
      if (consumer.position(end.getKey()) < end.getValue()) {
        return false;
      }
    }
    return true;
  }

  static void share(Main.Options opts) {
    String group = opts.get("group");
    int expect = opts.getInt("expect", 1);
    long deadline = System.currentTimeMillis() + opts.getInt("timeout-ms", 20000);
    String step = "share.auto.offset.reset";
    try (Admin admin = Admin.create(Main.common(opts, "share-admin"))) {
      // A share group starts at the log end by default; this one must see what was produced.
      ConfigResource resource = new ConfigResource(ConfigResource.Type.GROUP, group);
      AlterConfigOp earliest =
          new AlterConfigOp(
              new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET);
      admin.incrementalAlterConfigs(Map.of(resource, List.of(earliest))).all().get();
    } catch (Exception exc) {
      Json.error(step, exc);
      return;
    }
    Properties props = consumerProps(opts, "share");
    props.remove(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG);
    props.remove(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG);
    props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
    try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(props)) {
      step = "subscribe";
      try {
        consumer.subscribe(List.of(opts.get("topic")));
        step = "poll";
        int seen = 0;
        while (seen < expect && System.currentTimeMillis() < deadline) {
          for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(200))) {
            emitRecord(record, "share");
            seen++;
          }
        }
        step = "commit";
        consumer.commitSync();
        Json.emit("share_consumed", "count", seen);
      } catch (Exception exc) {
        Json.error(step, exc);
      }
    }
  }
}
