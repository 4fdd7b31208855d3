package kafkagateway.oldadmin;

import java.util.Collections;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.AdminClient;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.requests.DescribeLogDirsResponse;
import org.apache.kafka.common.resource.Resource;
import org.apache.kafka.common.resource.ResourceFilter;
import org.apache.kafka.common.resource.ResourceType;

/**
 * Kafka 1.0's AdminClient through a kafka-gateway:
 * {@code Main admin --bootstrap HOST:PORT --topic TOPIC --broker ID} (the probe's command
 * line, tests/harness/java_clients.py).
 *
 * <p>Describes the topic's configs (DescribeConfigs v0), creates, describes and deletes an
 * ACL on it (CreateAcls, DescribeAcls, DeleteAcls v0) and describes the broker's log dirs
 * (DescribeLogDirs v0). Each result is a JSON line on stdout: {@code config},
 * {@code acl_error} (a call that failed: its exception's class), {@code log_dir}, then
 * {@code done}. The client's own log goes to stderr.
 */
public final class Main {
  private Main() {}

  public static void main(String[] args) throws Exception {
    Map<String, String> opts = new java.util.HashMap<>();
    for (int i = 1; i + 1 < args.length; i += 2) {
      opts.put(args[i].replaceFirst("^--", ""), args[i + 1]);
    }
    Properties props = new Properties();
    props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, opts.get("bootstrap"));
    props.put(AdminClientConfig.CLIENT_ID_CONFIG, "old-admin-1.0");
    props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
    String topic = opts.get("topic");
    int broker = Integer.parseInt(opts.get("broker"));
    try (AdminClient admin = AdminClient.create(props)) {
      ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
      Config config = admin.describeConfigs(Collections.singleton(resource)).all().get().get(resource);
      for (ConfigEntry entry : config.entries()) {
        emit("config", "name", entry.name(), "value", entry.value(), "is_default", entry.isDefault(),
            "is_sensitive", entry.isSensitive(), "read_only", entry.isReadOnly());
      }
      AclBinding acl = new AclBinding(new Resource(ResourceType.TOPIC, topic),
          new AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW));
      AclBindingFilter filter = new AclBindingFilter(new ResourceFilter(ResourceType.TOPIC, topic),
          new AccessControlEntryFilter("User:alice", "*", AclOperation.ANY, AclPermissionType.ANY));
      call("createAcls", () -> admin.createAcls(Collections.singleton(acl)).all().get());
      call("describeAcls", () -> admin.describeAcls(filter).values().get());
      call("deleteAcls", () -> admin.deleteAcls(Collections.singleton(filter)).all().get());
      Map<String, DescribeLogDirsResponse.LogDirInfo> dirs =
          admin.describeLogDirs(Collections.singleton(broker)).all().get().get(broker);
      for (Map.Entry<String, DescribeLogDirsResponse.LogDirInfo> dir : dirs.entrySet()) {
        StringBuilder partitions = new StringBuilder();
        for (TopicPartition partition : dir.getValue().replicaInfos.keySet()) {
          partitions.append(partitions.length() == 0 ? "" : ",").append(partition);
        }
        emit("log_dir", "path", dir.getKey(), "error", dir.getValue().error.name(),
            "partitions", partitions.toString());
      }
    }
    emit("done");
  }

  interface Call {
    Object run() throws Exception;
  }

  static void call(String name, Call call) {
    try {
      call.run();
      emit("acl_ok", "call", name);
    } catch (ExecutionException e) {
      emit("acl_error", "call", name, "error", e.getCause().getClass().getSimpleName());
    } catch (Exception e) {
      emit("acl_error", "call", name, "error", e.getClass().getSimpleName());
    }
  }

  /** One JSON line: the event, then name/value pairs (strings, booleans, null). */
  static void emit(String event, Object... pairs) {
    StringBuilder out = new StringBuilder("{\"event\":\"").append(event).append('"');
    for (int i = 0; i < pairs.length; i += 2) {
      out.append(",\"").append(pairs[i]).append("\":");
      Object value = pairs[i + 1];
      if (value == null || value instanceof Boolean) {
        out.append(value);
      } else {
        out.append('"');
        for (char c : value.toString().toCharArray()) {
          if (c == '"' || c == '\\') {
            out.append('\\').append(c);
          } else if (c < 0x20) {
            out.append(String.format("\\u%04x", (int) c));
          } else {
            out.append(c);
          }
        }
        out.append('"');
      }
    }
    System.out.println(out.append('}'));
    System.out.flush();
  }
}
