/*
 * Dumps the KIP-584 features one Apache Kafka release knows, as JSON on stdout, read by
 * reflection from that release's kafka-server-common jar (run by features.py with
 * `java -cp DIR:kafka-server-common.jar:kafka-clients.jar FeatureDump MINOR...`).
 *
 * It is compiled with javac alone, against no Kafka jar: the classes and their methods
 * differ from release to release (MetadataVersion.latestProduction() arrived in 3.7,
 * the feature enum is Features in 3.9 and Feature from 4.0, its default level is
 * defaultValue(MetadataVersion) in 3.9 and defaultLevel(MetadataVersion) from 4.0,
 * fromVersionString took a second argument in 4.2), so every lookup is by name and a
 * missing one is written as null rather than failing the dump. The arguments are the
 * minor releases ("3.9") whose metadata.version this jar's fromVersionString is asked
 * for, as kafka-features.sh --release-version does.
 */

import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

public final class FeatureDump {
    private static final String PACKAGE = "org.apache.kafka.server.common.";

    private FeatureDump() {
    }

    public static void main(String[] args) throws Exception {
        Class<?> mv = Class.forName(PACKAGE + "MetadataVersion");
        StringBuilder out = new StringBuilder("{");
        out.append("\"metadata_version\":").append(metadataVersion(mv, args));
        out.append(",\"features\":").append(features(mv));
        out.append("}");
        System.out.println(out);
    }

    private static String metadataVersion(Class<?> mv, String[] releases) throws Exception {
        List<String> versions = new ArrayList<>();
        for (Object value : mv.getEnumConstants()) {
            Object production = call(value, "isProduction");
            versions.add("{\"constant\":" + quote(((Enum<?>) value).name())
                + ",\"level\":" + call(value, "featureLevel")
                + ",\"version\":" + quote(call(value, "version"))
                + ",\"release\":" + quote(call(value, "shortVersion"))
                + ",\"production\":" + production + "}");
        }
        // fromVersionString is what kafka-features.sh --release-version resolves a release
        // name with: its answer is the metadata.version that release ships.
        Map<String, String> fromRelease = new TreeMap<>();
        for (String release : releases) {
            fromRelease.put(release, quote(version(fromVersionString(mv, release))));
        }
        return "{\"versions\":[" + String.join(",", versions) + "]"
            + ",\"minimum_version\":" + quote(version(staticField(mv, "MINIMUM_VERSION")))
            + ",\"minimum_kraft_version\":" + quote(version(staticField(mv, "MINIMUM_KRAFT_VERSION")))
            + ",\"latest_production\":" + quote(version(staticCall(mv, "latestProduction")))
            + ",\"latest_testing\":" + quote(version(staticCall(mv, "latestTesting")))
            + ",\"latest\":" + quote(version(staticCall(mv, "latest")))
            + ",\"from_release\":" + object(fromRelease) + "}";
    }

    private static Object fromVersionString(Class<?> mv, String release) {
        try {
            // 4.2+: (String, boolean unstableFeatureVersionsEnabled); false is the tool's
            // default, a release's production levels.
            Method method = mv.getMethod("fromVersionString", String.class, boolean.class);
            return method.invoke(null, release, false);
        } catch (ReflectiveOperationException e) {
            // fall through to the one-argument form
        }
        try {
            return mv.getMethod("fromVersionString", String.class).invoke(null, release);
        } catch (ReflectiveOperationException e) {
            return null;
        }
    }

    private static String features(Class<?> mv) throws Exception {
        Class<?> feature = featureEnum();
        if (feature == null) {
            return "[]";
        }
        Class<?> featureVersion = Class.forName(PACKAGE + "FeatureVersion");
        Object productionList = staticField(feature, "PRODUCTION_FEATURES");
        Method defaultLevel = method(feature, "defaultLevel", mv);
        if (defaultLevel == null) {
            defaultLevel = method(feature, "defaultValue", mv);
        }
        List<String> out = new ArrayList<>();
        for (Object value : feature.getEnumConstants()) {
            List<String> levels = new ArrayList<>();
            for (Object level : (Object[]) call(value, "featureVersions")) {
                levels.add("{\"level\":" + invoke(featureVersion, "featureLevel", level)
                    + ",\"bootstrap\":"
                    + quote(version(invoke(featureVersion, "bootstrapMetadataVersion", level)))
                    + ",\"dependencies\":"
                    + dependencies(invoke(featureVersion, "dependencies", level)) + "}");
            }
            Map<String, String> defaults = new TreeMap<>();
            if (defaultLevel != null) {
                for (Object version : mv.getEnumConstants()) {
                    if (((Number) call(version, "featureLevel")).intValue() > 0) {
                        defaults.put(version(version), String.valueOf(defaultLevel.invoke(value, version)));
                    }
                }
            }
            boolean production = productionList instanceof List && ((List<?>) productionList).contains(value);
            out.add("{\"constant\":" + quote(((Enum<?>) value).name())
                + ",\"name\":" + quote(call(value, "featureName"))
                + ",\"production\":" + production
                + ",\"minimum_production\":" + call(value, "minimumProduction")
                + ",\"latest_production\":" + call(value, "latestProduction")
                + ",\"latest_testing\":" + call(value, "latestTesting")
                + ",\"levels\":[" + String.join(",", levels) + "]"
                + ",\"defaults\":" + object(defaults) + "}");
        }
        return "[" + String.join(",", out) + "]";
    }

    /** The release's enum of features: Feature (4.0+) or Features (3.9); null before 3.9. */
    private static Class<?> featureEnum() {
        for (String name : new String[] {"Feature", "Features"}) {
            try {
                Class<?> found = Class.forName(PACKAGE + name);
                // 3.6-3.8 have a Features that is a plain class (finalized features).
                if (found.isEnum() && method(found, "featureVersions") != null) {
                    return found;
                }
            } catch (ClassNotFoundException e) {
                // try the next name
            }
        }
        return null;
    }

    private static String dependencies(Object map) {
        Map<String, String> sorted = new TreeMap<>();
        if (map instanceof Map) {
            for (Map.Entry<?, ?> entry : ((Map<?, ?>) map).entrySet()) {
                sorted.put(String.valueOf(entry.getKey()), String.valueOf(entry.getValue()));
            }
        }
        return object(sorted);
    }

    /** A MetadataVersion's "3.9-IV0" name, or null. */
    private static String version(Object metadataVersion) {
        Object name = metadataVersion == null ? null : call(metadataVersion, "version");
        return name == null ? null : name.toString();
    }

    private static Method method(Class<?> type, String name, Class<?>... parameters) {
        try {
            return type.getMethod(name, parameters);
        } catch (NoSuchMethodException e) {
            return null;
        }
    }

    /** A public no-argument method's result, or null where this release lacks it. */
    private static Object call(Object target, String name) {
        return invoke(target.getClass(), name, target);
    }

    private static Object invoke(Class<?> type, String name, Object target) {
        // An enum constant with a body is an anonymous subclass: look the method up on the
        // declaring enum, which is public where the subclass is not.
        Class<?> owner = type.isAnonymousClass() ? type.getSuperclass() : type;
        Method found = method(owner, name);
        try {
            return found == null ? null : found.invoke(target);
        } catch (ReflectiveOperationException e) {
            return null;
        }
    }

    private static Object staticCall(Class<?> type, String name) {
        Method found = method(type, name);
        try {
            return found == null || !Modifier.isStatic(found.getModifiers()) ? null : found.invoke(null);
        } catch (ReflectiveOperationException e) {
            return null;
        }
    }

    private static Object staticField(Class<?> type, String name) {
        try {
            Field field = type.getField(name);
            return Modifier.isStatic(field.getModifiers()) ? field.get(null) : null;
        } catch (ReflectiveOperationException e) {
            return null;
        }
    }

    /** {"key": value} from values already written as JSON. */
    private static String object(Map<String, String> values) {
        List<String> items = new ArrayList<>();
        for (Map.Entry<String, String> entry : values.entrySet()) {
            items.add(quote(entry.getKey()) + ":" + entry.getValue());
        }
        return "{" + String.join(",", items) + "}";
    }

    private static String quote(Object text) {
        if (text == null) {
            return "null";
        }
        StringBuilder out = new StringBuilder("\"");
        for (char c : text.toString().toCharArray()) {
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20) {
                out.append(String.format("\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        return out.append('"').toString();
    }
}
