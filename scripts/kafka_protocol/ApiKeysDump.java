// What one kafka-clients jar knows of its API keys, read by reflection (apikeys.py compiles
// and runs this against each release's jar). Releases before 2.2 ship no message specs, so
// their ApiKeys enum is the only record of their versions; for later releases the same dump
// is the generator's cross-check. Reflection only, because the names moved between
// releases: 0.10.0-0.10.1 keep the versions in Protocol.MIN_VERSIONS / CURR_VERSION, 0.10.2
// in ProtoUtils, 0.11+ has oldestVersion()/latestVersion() on the enum.
//
// Output, one fact a line, tab-separated:
//   key  ID  NAME  OLDEST  LATEST
//   flag ID  MEMBER  true|false        (every boolean no-argument member of the constant)
//   set  METHOD  ID,ID,...             (every static no-argument ApiKeys method returning ApiKeys)
//   const  NAME  VALUE                 (every static short or int field of ApiKeys)
//   default  ID  MIN  MAX              (the release's default ApiVersions answer, when it has one)
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;

public class ApiKeysDump {
    public static void main(String[] args) throws Exception {
        Class<?> keys = Class.forName("org.apache.kafka.common.protocol.ApiKeys");
        Object[] values = keys.getEnumConstants();
        for (Object key : values) {
            int id = number(member(key, "id"));
            Object name = member(key, "name");
            Integer oldest = versionOf(key, id, "oldestVersion", "MIN_VERSIONS");
            Integer latest = versionOf(key, id, "latestVersion", "CURR_VERSION");
            System.out.println("key\t" + id + "\t" + name + "\t" + oldest + "\t" + latest);
            Map<String, Boolean> flags = new TreeMap<>();
            for (Method m : keys.getMethods()) {
                if (m.getParameterCount() == 0 && m.getReturnType() == boolean.class
                        && !Modifier.isStatic(m.getModifiers())) {
                    flags.put(m.getName() + "()", (Boolean) m.invoke(key));
                }
            }
            for (Field f : keys.getFields()) {
                if (f.getType() == boolean.class && !Modifier.isStatic(f.getModifiers())) {
                    flags.put(f.getName(), f.getBoolean(key));
                }
            }
            for (Map.Entry<String, Boolean> e : flags.entrySet()) {
                System.out.println("flag\t" + id + "\t" + e.getKey() + "\t" + e.getValue());
            }
        }
        for (Method m : keys.getMethods()) {
            if (!Modifier.isStatic(m.getModifiers()) || m.getParameterCount() != 0
                    || !Collection.class.isAssignableFrom(m.getReturnType())) {
                continue;
            }
            TreeSet<Integer> ids = new TreeSet<>();
            for (Object o : (Collection<?>) m.invoke(null)) {
                if (keys.isInstance(o)) {
                    ids.add(number(member(o, "id")));
                }
            }
            System.out.println("set\t" + m.getName() + "\t" + join(ids));
        }
        for (Field f : keys.getFields()) {
            if (Modifier.isStatic(f.getModifiers())
                    && (f.getType() == short.class || f.getType() == int.class)) {
                System.out.println("const\t" + f.getName() + "\t" + number(f.get(null)));
            }
        }
        for (String[] row : defaultAnswer()) {
            System.out.println("default\t" + row[0] + "\t" + row[1] + "\t" + row[2]);
        }
    }

    // A method of that name, else a public field of that name; null when neither exists.
    static Object member(Object target, String name) {
        Class<?> c = target instanceof Class ? (Class<?>) target : target.getClass();
        Object self = target instanceof Class ? null : target;
        try {
            return c.getMethod(name).invoke(self);
        } catch (ReflectiveOperationException | RuntimeException e) {
            // no such method: try the field
        }
        try {
            return c.getField(name).get(self);
        } catch (ReflectiveOperationException | RuntimeException e) {
            return null;
        }
    }

    static Integer versionOf(Object key, int id, String method, String protocolArray) {
        Object v = member(key, method);
        if (v != null) {
            return number(v);
        }
        try {  // 0.10.2: ProtoUtils.oldestVersion(id) / latestVersion(id)
            Class<?> utils = Class.forName("org.apache.kafka.common.protocol.ProtoUtils");
            return number(utils.getMethod(method, int.class).invoke(null, id));
        } catch (ReflectiveOperationException | RuntimeException e) {
            // older still: the arrays of Protocol
        }
        try {  // 0.10.0-0.10.1: Protocol.MIN_VERSIONS[id] / CURR_VERSION[id]
            Class<?> protocol = Class.forName("org.apache.kafka.common.protocol.Protocol");
            Object array = protocol.getField(protocolArray).get(null);
            return number(java.lang.reflect.Array.get(array, id));
        } catch (ReflectiveOperationException | RuntimeException e) {
            return null;
        }
    }

    static int number(Object o) {
        return ((Number) o).intValue();
    }

    static String join(Collection<Integer> ids) {
        StringBuilder out = new StringBuilder();
        for (Integer i : ids) {
            out.append(out.length() == 0 ? "" : ",").append(i);
        }
        return out.toString();
    }

    // The ApiVersions answer the release's classes build by default: 0.10-2.3 keep it as
    // ApiVersionsResponse.API_VERSIONS_RESPONSE (a list of ApiVersion with public fields),
    // 2.4+ as DEFAULT_API_VERSIONS_RESPONSE or defaultApiVersionsResponse() (generated data).
    static List<String[]> defaultAnswer() {
        List<String[]> rows = new ArrayList<>();
        Object response = null;
        try {
            Class<?> c = Class.forName("org.apache.kafka.common.requests.ApiVersionsResponse");
            for (String name : new String[] {"API_VERSIONS_RESPONSE", "DEFAULT_API_VERSIONS_RESPONSE",
                                             "defaultApiVersionsResponse"}) {
                response = member(c, name);
                if (response != null) {
                    break;
                }
            }
        } catch (ReflectiveOperationException | RuntimeException | LinkageError e) {
            return rows;
        }
        if (response == null) {
            return rows;
        }
        Object list = member(response, "apiVersions");
        if (list == null) {
            Object data = member(response, "data");
            list = data == null ? null : member(data, "apiKeys");
        }
        if (!(list instanceof Collection)) {
            return rows;
        }
        for (Object v : (Collection<?>) list) {
            rows.add(new String[] {
                String.valueOf(number(member(v, "apiKey"))),
                String.valueOf(number(member(v, "minVersion"))),
                String.valueOf(number(member(v, "maxVersion"))),
            });
        }
        return rows;
    }
}
