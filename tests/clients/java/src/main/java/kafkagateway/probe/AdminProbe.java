package kafkagateway.probe;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.FeatureMetadata;
import org.apache.kafka.clients.admin.FeatureUpdate;
import org.apache.kafka.clients.admin.FinalizedVersionRange;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.SupportedVersionRange;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.UpdateFeaturesOptions;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartitionInfo;

/**
 * {@code admin [--topic T [--partitions N]] [--update-feature NAME=LEVEL]}: the Admin
 * client's cluster calls, each reported as an event (or an {@code error} event naming the
 * step, after which the next step still runs: they are independent).
 *
 * <ul>
 *   <li>{@code cluster}: describeCluster's nodes and controller (the gateway's address);
 *   <li>{@code features}: describeFeatures' supported and finalized features and epoch;
 *   <li>{@code topic_created}, {@code topics}, {@code topic}: createTopics, listTopics
 *       and describeTopics of T (partition leaders, another rewritten address);
 *   <li>{@code features_updated}: updateFeatures with an upgrade to NAME=LEVEL.
 * </ul>
 */
final class AdminProbe {
  private AdminProbe() {}

  private static Map<String, Object> node(Node node) {
    if (node == null) {
      return null;
    }
    return Json.obj("id", node.id(), "host", node.host(), "port", node.port());
  }

  static void run(Main.Options opts) {
    try (Admin admin = Admin.create(Main.common(opts, "admin"))) {
      try {
        DescribeClusterResult cluster = admin.describeCluster();
        List<Object> nodes = new ArrayList<>();
        for (Node n : cluster.nodes().get()) {
          nodes.add(node(n));
        }
        Json.emit(
            "cluster",
            "cluster_id", cluster.clusterId().get(),
            "controller", node(cluster.controller().get()),
            "nodes", nodes);
      } catch (Exception exc) {
        Json.error("cluster", exc);
      }
      try {
        FeatureMetadata features = admin.describeFeatures().featureMetadata().get();
        Map<String, Object> supported = new TreeMap<>();
        for (Map.Entry<String, SupportedVersionRange> e : features.supportedFeatures().entrySet()) {
          supported.put(e.getKey(), List.of(e.getValue().minVersion(), e.getValue().maxVersion()));
        }
        Map<String, Object> finalized = new TreeMap<>();
        for (Map.Entry<String, FinalizedVersionRange> e : features.finalizedFeatures().entrySet()) {
          finalized.put(
              e.getKey(), List.of(e.getValue().minVersionLevel(), e.getValue().maxVersionLevel()));
        }
        Json.emit(
            "features",
            "supported", supported,
            "finalized", finalized,
            "epoch", features.finalizedFeaturesEpoch().orElse(null));
      } catch (Exception exc) {
        Json.error("features", exc);
      }
      if (opts.has("topic")) {
        createTopic(opts, opts.get("topic"));
        topics(admin, opts.get("topic"));
      }
      if (opts.has("update-feature")) {
        String[] update = opts.get("update-feature").split("=", 2);
        short level = Short.parseShort(update[1]);
        try {
          admin
              .updateFeatures(
                  Map.of(update[0], new FeatureUpdate(level, FeatureUpdate.UpgradeType.UPGRADE)),
                  new UpdateFeaturesOptions())
              .all()
              .get();
          Json.emit("features_updated", "feature", update[0], "level", level);
        } catch (Exception exc) {
          Json.error("update_features", exc);
        }
      }
    }
  }

  /** Create {@code topic} with {@code --partitions} partitions; false after an error event. */
  static boolean createTopic(Main.Options opts, String topic) {
    try (Admin admin = Admin.create(Main.common(opts, "admin"))) {
      int partitions = opts.getInt("partitions", 3);
      admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get();
      Json.emit("topic_created", "topic", topic, "partitions", partitions);
      return true;
    } catch (Exception exc) {
      Json.error("create_topics", exc);
      return false;
    }
  }

  private static void topics(Admin admin, String topic) {
    try {
      Set<String> names = admin.listTopics().names().get();
      Json.emit("topics", "count", names.size(), "has_topic", names.contains(topic));
    } catch (Exception exc) {
      Json.error("list_topics", exc);
    }
    try {
      TopicDescription described = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
      Map<String, Object> leaders = new LinkedHashMap<>();
      for (TopicPartitionInfo info : described.partitions()) {
        leaders.put(String.valueOf(info.partition()), node(info.leader()));
      }
      Json.emit("topic", "topic", topic, "leaders", leaders);
    } catch (Exception exc) {
      Json.error("describe_topics", exc);
    }
  }
}
