package dev.ballast.member;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.regex.Pattern;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;

/**
 * The records of docs/protocol.md a member reads (assignments, fence markers) and writes
 * (presence). Every byte read is untrusted: {@link #read} returns an entry or throws its
 * one error, {@link InvalidRecord}, naming what was wrong.
 */
final class Records {
    static final int MAX_BYTES = 1 << 20;
    static final long MAX_COUNTER = (1L << 62) - 1;
    static final String EPOCH_HEADER = "ballast-epoch";
    static final String GENERATION_HEADER = "ballast-generation";
    private static final Pattern NAME = Pattern.compile("[A-Za-z0-9._\\-]{1,249}");
    private static final Pattern MEMBER = Pattern.compile("[A-Za-z0-9._\\-:@]{1,255}");
    private static final ObjectMapper JSON = new ObjectMapper();

    private Records() {}

    /** A record that is not what the protocol says; the reader skips it. */
    static final class InvalidRecord extends Exception {
        private static final long serialVersionUID = 1L;

        InvalidRecord(String why) {
            super(why);
        }
    }

    /** One entry of the assignments log: a grant (or its tombstone) or a fence marker. */
    sealed interface Entry permits Grant, Fence {
        String group();
    }

    /**
     * A member's record; {@code tombstone} has no partitions, and its epoch and generation
     * come from headers when the controller wrote them ({@code -1}: absent).
     */
    record Grant(
            String group,
            String member,
            long epoch,
            long generation,
            List<TopicPartition> partitions,
            String instance,
            boolean tombstone)
            implements Entry {}

    /** A new leader's marker: records of the group below this epoch no longer count. */
    record Fence(String group, long epoch) implements Entry {}

    static String assignmentKey(String group, String member) {
        return group + "/" + member;
    }

    static boolean isName(String s) {
        return s != null && NAME.matcher(s).matches();
    }

    static boolean isMember(String s) {
        return s != null && MEMBER.matcher(s).matches();
    }

    /** {@code verifier}: null to take unsigned records, else only what its keys signed. */
    static Entry read(byte[] key, byte[] value, Headers headers, Signing.Verifier verifier) throws InvalidRecord {
        try {
            if (verifier != null) {
                String problem = verifier.problem("assignments", key == null ? new byte[0] : key, value, headers);
                if (problem != null) throw new InvalidRecord(problem);
            }
            return readEntry(key, value, headers);
        } catch (RuntimeException e) { // whatever the bytes: the one documented error
            throw new InvalidRecord("unreadable (" + e.getClass().getSimpleName() + ")");
        }
    }

    private static Entry readEntry(byte[] key, byte[] value, Headers headers) throws InvalidRecord {
        if (key == null || key.length > 1024) throw new InvalidRecord("key missing or too long");
        if (value != null && value.length > MAX_BYTES) throw new InvalidRecord("value over 1 MiB");
        String k = new String(key, StandardCharsets.UTF_8);
        String[] parts = k.split("/", -1);
        if (parts.length == 1) {
            if (!isName(k)) throw new InvalidRecord("fence key " + k + ": not a group name");
            if (value == null) throw new InvalidRecord("fence " + k + ": a tombstone");
            JsonNode body = parse(value);
            if (!k.equals(text(body, "group"))) throw new InvalidRecord("fence: group differs from key");
            return new Fence(k, counter(body, "controller_epoch"));
        }
        if (parts.length != 2 || !isName(parts[0]) || !isMember(parts[1])) {
            throw new InvalidRecord("key " + k + ": not <group>/<member>");
        }
        if (value == null) {
            return new Grant(parts[0], parts[1], header(headers, EPOCH_HEADER),
                    header(headers, GENERATION_HEADER), List.of(), null, true);
        }
        JsonNode body = parse(value);
        if (!parts[0].equals(text(body, "group")) || !parts[1].equals(text(body, "member"))) {
            throw new InvalidRecord("key " + k + ": body names another group or member");
        }
        JsonNode instance = body.get("instance");
        if (instance != null && !instance.isNull() && (!instance.isTextual() || instance.asText().length() > 64)) {
            throw new InvalidRecord("instance: not a string of at most 64 characters");
        }
        return new Grant(parts[0], parts[1], counter(body, "controller_epoch"), counter(body, "generation"),
                partitions(body.get("partitions")),
                instance == null || instance.isNull() ? null : instance.asText(), false);
    }

    /** A presence on the heartbeat topic (docs/protocol.md, "Member presence"). */
    static byte[] presence(String group, String member, Collection<String> topics, String instance,
            String state, long generation, Collection<TopicPartition> held, List<String> verifyKeys) {
        ObjectNode body = JSON.createObjectNode();
        body.put("version", 1);
        body.put("group", group);
        body.put("member", member);
        ArrayNode ts = body.putArray("topics");
        topics.stream().sorted().distinct().forEach(ts::add);
        body.put("instance", instance);
        body.put("state", state);
        body.put("generation", generation);
        ArrayNode ps = body.putArray("partitions");
        sorted(held).forEach(tp -> ps.addArray().add(tp.topic()).add(tp.partition()));
        if (verifyKeys != null) {
            ArrayNode ks = body.putArray("verify_keys");
            verifyKeys.forEach(ks::add);
        }
        body.put("sent_at", System.currentTimeMillis() / 1000.0);
        try {
            return JSON.writeValueAsBytes(body);
        } catch (JsonProcessingException e) {
            throw new IllegalStateException(e);
        }
    }

    static List<TopicPartition> sorted(Collection<TopicPartition> tps) {
        List<TopicPartition> out = new ArrayList<>(tps);
        out.sort((a, b) -> a.topic().equals(b.topic())
                ? Integer.compare(a.partition(), b.partition())
                : a.topic().compareTo(b.topic()));
        return out;
    }

    private static JsonNode parse(byte[] value) throws InvalidRecord {
        try {
            JsonNode body = JSON.readTree(value);
            if (body == null || !body.isObject()) throw new InvalidRecord("value: not a JSON object");
            if (body.get("version") == null || body.get("version").asInt(-1) != 1) {
                throw new InvalidRecord("version: not 1");
            }
            return body;
        } catch (java.io.IOException e) {
            throw new InvalidRecord("value: not JSON (" + e.getClass().getSimpleName() + ")");
        }
    }

    private static String text(JsonNode body, String field) throws InvalidRecord {
        JsonNode node = body.get(field);
        if (node == null || !node.isTextual()) throw new InvalidRecord(field + ": not a string");
        return node.asText();
    }

    private static long counter(JsonNode body, String field) throws InvalidRecord {
        JsonNode node = body.get(field);
        if (node == null || !node.canConvertToExactIntegral() || !node.canConvertToLong()
                || node.asLong() < 0 || node.asLong() > MAX_COUNTER) {
            throw new InvalidRecord(field + ": not an integer in 0.." + MAX_COUNTER);
        }
        return node.asLong();
    }

    private static List<TopicPartition> partitions(JsonNode node) throws InvalidRecord {
        if (node == null || !node.isArray() || node.size() > 1_000_000) {
            throw new InvalidRecord("partitions: not a list");
        }
        List<TopicPartition> out = new ArrayList<>(node.size());
        for (JsonNode pair : node) {
            if (!pair.isArray() || pair.size() != 2 || !pair.get(0).isTextual()
                    || !isName(pair.get(0).asText())
                    || !pair.get(1).canConvertToInt() || !pair.get(1).isIntegralNumber()
                    || pair.get(1).asInt() < 0) {
                throw new InvalidRecord("partitions: an entry is not [topic, partition]");
            }
            out.add(new TopicPartition(pair.get(0).asText(), pair.get(1).asInt()));
        }
        return out;
    }

    private static long header(Headers headers, String name) throws InvalidRecord {
        Header found = null;
        for (Header h : headers.headers(name)) {
            if (found != null) throw new InvalidRecord(name + ": given twice");
            found = h;
        }
        if (found == null) return -1;
        String digits = new String(found.value(), StandardCharsets.US_ASCII);
        if (!digits.matches("[0-9]{1,19}")) throw new InvalidRecord(name + ": not digits");
        long n;
        try {
            n = Long.parseLong(digits);
        } catch (NumberFormatException e) {
            throw new InvalidRecord(name + ": out of range");
        }
        if (n > MAX_COUNTER) throw new InvalidRecord(name + ": out of range");
        return n;
    }
}
