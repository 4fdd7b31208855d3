package kafkagateway.probe;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * What the probe saw, as one JSON object per line on stdout (the Python test reads them).
 *
 * <p>A few lines of JSON writing instead of a JSON library: the probe's classpath is then
 * kafka-clients alone, as an application using the Java client would have it.
 */
final class Json {
  private Json() {}

  /** An ordered map from alternating keys and values: {@code obj("event", "x", "n", 1)}. */
  static Map<String, Object> obj(Object... keysAndValues) {
    Map<String, Object> map = new LinkedHashMap<>();
    for (int i = 0; i < keysAndValues.length; i += 2) {
      map.put((String) keysAndValues[i], keysAndValues[i + 1]);
    }
    return map;
  }

  /** Print one event line: {@code {"event": name, ...fields}}. */
  static void emit(String event, Object... fields) {
    Map<String, Object> line = obj("event", event);
    line.putAll(obj(fields));
    synchronized (System.out) {
      System.out.println(write(line));
      System.out.flush();
    }
  }

  /** A failed client call as an event: which step, the exception and its cause. */
  static void error(String step, Throwable exc) {
    Throwable cause = exc.getCause() != null ? exc.getCause() : exc;
    emit(
        "error",
        "step", step,
        "class", exc.getClass().getName(),
        "message", String.valueOf(exc.getMessage()),
        "cause_class", cause.getClass().getName(),
        "cause_message", String.valueOf(cause.getMessage()));
  }

  static String write(Object value) {
    StringBuilder out = new StringBuilder();
    append(out, value);
    return out.toString();
  }

  private static void append(StringBuilder out, Object value) {
    if (value == null) {
      out.append("null");
    } else if (value instanceof Number || value instanceof Boolean) {
      out.append(value);
    } else if (value instanceof Map<?, ?> map) {
      out.append('{');
      boolean first = true;
      for (Map.Entry<?, ?> entry : map.entrySet()) {
        if (!first) {
          out.append(", ");
        }
        first = false;
        appendString(out, String.valueOf(entry.getKey()));
        out.append(": ");
        append(out, entry.getValue());
      }
      out.append('}');
    } else if (value instanceof List<?> list) {
      out.append('[');
      for (int i = 0; i < list.size(); i++) {
        if (i > 0) {
          out.append(", ");
        }
        append(out, list.get(i));
      }
      out.append(']');
    } else {
      appendString(out, value.toString());
    }
  }

  private static void appendString(StringBuilder out, String text) {
    out.append('"');
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      switch (c) {
        case '"' -> out.append("\\\"");
        case '\\' -> out.append("\\\\");
        case '\n' -> out.append("\\n");
        case '\r' -> out.append("\\r");
        case '\t' -> out.append("\\t");
        default -> {
          if (c < 0x20) {
            out.append(String.format("\\u%04x", (int) c));
          } else {
            out.append(c);
          }
        }
      }
    }
    out.append('"');
  }
}
