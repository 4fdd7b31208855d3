package kafkagateway.probe;

import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.common.config.SaslConfigs;

/**
 * A Java Kafka client (kafka-clients 4.x) run through a kafka-gateway, one scenario per run.
 *
 * <p>{@code Main SCENARIO --bootstrap HOST:PORT [--option value ...]}; every result is a
 * JSON line on stdout (see {@link Json}), the client's own log goes to stderr. A client
 * call that fails is reported as an {@code error} event and the scenario stops there with
 * exit 0: the test decides whether that failure was the expected one. Exit 2 is a usage
 * error, anything else a crash of the probe itself.
 *
 * <p>Scenarios: {@code produce}, {@code consume}, {@code transactions}, {@code admin},
 * {@code share}; their options are in {@link Producing}, {@link Consuming} and
 * {@link AdminProbe}. Every scenario logs in with SASL given {@code --sasl-mechanism}
 * ({@link #sasl}).
 */
public final class Main {
  private Main() {}

  public static void main(String[] args) throws Exception {
    if (args.length < 1) {
      usage("missing scenario");
    }
    Options opts = Options.parse(args);
    switch (args[0]) {
      case "produce" -> Producing.produce(opts);
      case "transactions" -> Producing.transactions(opts);
      case "consume" -> Consuming.consume(opts);
      case "share" -> Consuming.share(opts);
      case "admin" -> AdminProbe.run(opts);
      default -> usage("unknown scenario " + args[0]);
    }
    Json.emit("done", "scenario", args[0]);
  }

  static void usage(String why) {
    System.err.println(
        "usage: Main produce|transactions|consume|share|admin --bootstrap HOST:PORT ...: " + why);
    System.exit(2);
  }

  /**
   * Settings every client of the probe shares: timeouts short enough that a gateway that
   * breaks something fails the test in seconds, not the client's minutes-long defaults.
   */
  static Properties common(Options opts, String role) {
    Properties props = new Properties();
    props.put(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG, opts.get("bootstrap"));
    props.put(CommonClientConfigs.CLIENT_ID_CONFIG, "gateway-probe-" + role);
    props.put(CommonClientConfigs.REQUEST_TIMEOUT_MS_CONFIG, "10000");
    props.put(CommonClientConfigs.DEFAULT_API_TIMEOUT_MS_CONFIG, opts.get("api-timeout-ms", "20000"));
    props.put(CommonClientConfigs.SOCKET_CONNECTION_SETUP_TIMEOUT_MS_CONFIG, "5000");
    props.put(CommonClientConfigs.SOCKET_CONNECTION_SETUP_TIMEOUT_MAX_MS_CONFIG, "5000");
    props.put(CommonClientConfigs.RECONNECT_BACKOFF_MAX_MS_CONFIG, "1000");
    props.put(CommonClientConfigs.RETRY_BACKOFF_MAX_MS_CONFIG, "1000");
    if (opts.has("sasl-mechanism")) {
      sasl(props, opts);
    }
    return props;
  }

  /**
   * SASL_PLAINTEXT with {@code --sasl-mechanism} (PLAIN, SCRAM-SHA-256/512) as
   * {@code --sasl-username} with {@code --sasl-password}.
   */
  static void sasl(Properties props, Options opts) {
    String mechanism = opts.get("sasl-mechanism");
    String module =
        mechanism.startsWith("SCRAM-")
            ? "org.apache.kafka.common.security.scram.ScramLoginModule"
            : "org.apache.kafka.common.security.plain.PlainLoginModule";
    props.put(CommonClientConfigs.SECURITY_PROTOCOL_CONFIG, "SASL_PLAINTEXT");
    props.put(SaslConfigs.SASL_MECHANISM, mechanism);
    props.put(
        SaslConfigs.SASL_JAAS_CONFIG,
        String.format(
            "%s required username=\"%s\" password=\"%s\";",
            module, opts.get("sasl-username"), opts.get("sasl-password")));
  }

  /** {@code --name value} pairs after the scenario name. */
  static final class Options {
    private final Map<String, String> values;

    private Options(Map<String, String> values) {
      this.values = values;
    }

    static Options parse(String[] args) {
      Map<String, String> values = new HashMap<>();
      for (int i = 1; i < args.length; i += 2) {
        if (!args[i].startsWith("--") || i + 1 >= args.length) {
          usage("expected --name value pairs, got " + args[i]);
        }
        values.put(args[i].substring(2), args[i + 1]);
      }
      return new Options(values);
    }

    String get(String name) {
      String value = values.get(name);
      if (value == null) {
        usage("missing --" + name);
      }
      return value;
    }

    String get(String name, String fallback) {
      return values.getOrDefault(name, fallback);
    }

    int getInt(String name, int fallback) {
      return Integer.parseInt(values.getOrDefault(name, String.valueOf(fallback)));
    }

    boolean has(String name) {
      return values.containsKey(name);
    }
  }
}
