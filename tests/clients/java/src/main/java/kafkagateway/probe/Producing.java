package kafkagateway.probe;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.Future;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListConsumerGroupOffsetsOptions;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The producing scenarios.
 *
 * <ul>
 *   <li>{@code produce --topic T --count N [--prefix P] [--partitions K]}: an idempotent
 *       producer with acks=all sends records {@code k<i>}={@code P-<i>} and reports each
 *       one's partition and offset ({@code delivered}), then {@code produced}. With
 *       {@code --partitions} the topic is created first (Admin), with K partitions.
 *   <li>{@code transactions --topic T --count N --transactional-id ID}: one transaction of
 *       N records {@code committed-<i>} is committed, a second of N {@code aborted-<i>} is
 *       aborted. Each also commits an offset for group {@code ID} (sendOffsetsToTransaction:
 *       N, then 2N); {@code txn_offsets} reports the group's offsets afterwards (only the
 *       committed transaction's should count). Then the topic is read to its end
 *       read_committed and read_uncommitted ({@link Consuming#readToEnd}).
 * </ul>
 */
final class Producing {
  private Producing() {}

  static Properties producerProps(Main.Options opts, String role) {
    Properties props = Main.common(opts, role);
    props.put(ProducerConfig.ACKS_CONFIG, "all");
    props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
    props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "20000");
    props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "20000");
    props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
    props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
    props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
    return props;
  }

  static void produce(Main.Options opts) {
    String topic = opts.get("topic");
    String prefix = opts.get("prefix", "value");
    int count = opts.getInt("count", 10);
    if (opts.has("partitions") && !AdminProbe.createTopic(opts, topic)) {
      return;
    }
    try (KafkaProducer<String, String> producer =
        new KafkaProducer<>(producerProps(opts, "producer"))) {
      if (!send(producer, topic, "k", prefix, count, "produce")) {
        return;
      }
      Json.emit("produced", "count", count);
    }
  }

  /** Send {@code count} records and wait for each; false (after an error event) on failure. */
  private static boolean send(
      KafkaProducer<String, String> producer,
      String topic,
      String keyPrefix,
      String valuePrefix,
      int count,
      String step) {
    List<Future<RecordMetadata>> sent = new ArrayList<>();
    try {
      for (int i = 0; i < count; i++) {
        sent.add(
            producer.send(new ProducerRecord<>(topic, keyPrefix + i, valuePrefix + "-" + i)));
      }
      for (int i = 0; i < count; i++) {
        RecordMetadata meta = sent.get(i).get();
        Json.emit(
            "delivered",
            "key", keyPrefix + i,
            "partition", meta.partition(),
            "offset", meta.offset());
      }
      return true;
    } catch (Exception exc) {
      Json.error(step, exc);
      return false;
    }
  }

  private static Map<TopicPartition, OffsetAndMetadata> offset(String topic, long offset) {
    return Map.of(new TopicPartition(topic, 0), new OffsetAndMetadata(offset));
  }

  /** The offsets group {@code group} has committed, as a {@code txn_offsets} event. */
  private static void groupOffsets(Main.Options opts, String group) {
    try (Admin admin = Admin.create(Main.common(opts, "admin"))) {
      Map<String, Object> offsets = new TreeMap<>();
      // requireStable: wait until no transaction holds offsets of the group pending.
      ListConsumerGroupOffsetsOptions stable = new ListConsumerGroupOffsetsOptions().requireStable(true);
      for (Map.Entry<TopicPartition, OffsetAndMetadata> entry :
          admin
              .listConsumerGroupOffsets(group, stable)
              .partitionsToOffsetAndMetadata()
              .get()
              .entrySet()) {
        offsets.put(entry.getKey().toString(), entry.getValue().offset());
      }
      Json.emit("txn_offsets", "group", group, "offsets", offsets);
    } catch (Exception exc) {
      Json.error("txn_offsets", exc);
    }
  }

  static void transactions(Main.Options opts) {
    String topic = opts.get("topic");
    int count = opts.getInt("count", 5);
    Properties props = producerProps(opts, "transactional");
    String group = opts.get("transactional-id");
    ConsumerGroupMetadata groupMetadata = Consuming.groupMetadata(opts, group);
    props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, group);
    props.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "20000");
    try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
      String step = "init";
      try {
        producer.initTransactions();
        step = "commit";
        producer.beginTransaction();
        if (!send(producer, topic, "c", "committed", count, step)) {
          return;
        }
        producer.sendOffsetsToTransaction(offset(topic, count), groupMetadata);
        producer.commitTransaction();
        Json.emit("transaction", "outcome", "committed", "count", count);
        step = "abort";
        producer.beginTransaction();
        if (!send(producer, topic, "a", "aborted", count, step)) {
          return;
        }
        producer.sendOffsetsToTransaction(offset(topic, 2 * count), groupMetadata);
        producer.abortTransaction();
        Json.emit("transaction", "outcome", "aborted", "count", count);
      } catch (Exception exc) {
        Json.error(step, exc);
        return;
      }
    }
    groupOffsets(opts, group);
    Consuming.readToEnd(opts, topic, "read_committed");
    Consuming.readToEnd(opts, topic, "read_uncommitted");
  }
}
