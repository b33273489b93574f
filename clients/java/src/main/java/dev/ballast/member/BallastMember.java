package dev.ballast.member;

import dev.ballast.member.FencingView.Verdict;
import dev.ballast.member.Records.Entry;
import dev.ballast.member.Records.Grant;
import dev.ballast.member.Records.InvalidRecord;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.utils.Utils;

/**
 * A Ballast member on Kafka's Java client: it announces itself on the heartbeat topic, reads
 * its own key of the assignments topic under the fencing rule, and consumes exactly what it
 * was granted with {@code assign()}. A revoke is applied (fetching stopped, offsets committed)
 * before it is acknowledged, so the controller hands a partition on only after its last
 * reader let go. Not thread-safe: one thread calls {@link #poll}, {@link #commit} and
 * {@link #close}, as with {@link KafkaConsumer}.
 */
public final class BallastMember implements AutoCloseable {
    /** Told of partitions before they are released and after they are taken. */
    public interface Listener {
        void revoked(Collection<TopicPartition> partitions);

        void assigned(Collection<TopicPartition> partitions);
    }

    /**
     * Where the member is and how it announces itself. {@code publicKeys}: the controller's
     * public keys (PEM files; empty: grants are not verified; two while a key is replaced);
     * {@code memberKey}: this member's own private key (null: heartbeats are not signed,
     * which a controller with {@code membership.member_keys_dir} does not admit).
     */
    public record Settings(
            String bootstrap,
            String group,
            String member,
            List<String> topics,
            String assignmentsTopic,
            String heartbeatTopic,
            Duration heartbeatInterval,
            List<Path> publicKeys,
            Path memberKey) {
        public Settings {
            publicKeys = List.copyOf(publicKeys);
            if (!Records.isName(group)) throw new IllegalArgumentException("group: not a Kafka name: " + group);
            if (!Records.isMember(member)) throw new IllegalArgumentException("member: not a member id: " + member);
            if (topics.isEmpty() || !topics.stream().allMatch(Records::isName)) {
                throw new IllegalArgumentException("topics: one or more Kafka topic names");
            }
        }
    }

    private record Pending(Set<TopicPartition> partitions, long generation) {}

    private final Settings settings;
    private final Listener listener;
    private final String instance;
    private final byte[] key;
    private final FencingView view;
    private final Signing.Verifier verifier;
    private final Signing.HeartbeatSigner signer;
    private final KafkaConsumer<byte[], byte[]> reader;
    private final KafkaConsumer<byte[], byte[]> data;
    private final KafkaProducer<byte[], byte[]> producer;
    private final Map<TopicPartition, Long> consumed = new HashMap<>();
    private Set<TopicPartition> held = Set.of();
    private long generation = -1;
    private Pending pending;
    /** When {@link #handOff} gives up waiting (epoch ms); -1 until it is called. */
    private long handOffDeadline = -1;
    private long nextBeat;
    private long invalid;

    public BallastMember(Settings settings, Listener listener) {
        this.settings = settings;
        this.listener = listener;
        byte[] random = new byte[8];
        new SecureRandom().nextBytes(random);
        this.instance = HexFormat.of().formatHex(random);
        this.key = Records.assignmentKey(settings.group(), settings.member()).getBytes(StandardCharsets.UTF_8);
        this.view = new FencingView(settings.group(), settings.member());
        this.verifier = settings.publicKeys().isEmpty() ? null
                : new Signing.Verifier(settings.publicKeys().stream().map(Signing::loadPublic).toList());
        this.signer = settings.memberKey() == null ? null
                : new Signing.HeartbeatSigner(Signing.loadPrivate(settings.memberKey()));
        Properties common = new Properties();
        common.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, settings.bootstrap());
        common.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        common.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        common.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        common.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        Properties readerProps = new Properties();
        readerProps.putAll(common);
        // A deposed leader's aborted transaction never reaches us (ha.transactional_id_prefix).
        readerProps.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        readerProps.put(ConsumerConfig.CLIENT_ID_CONFIG, settings.member() + "-assignments");
        this.reader = new KafkaConsumer<>(readerProps);
        Properties dataProps = new Properties();
        dataProps.putAll(common);
        dataProps.put(ConsumerConfig.GROUP_ID_CONFIG, settings.group()); // commits only: never subscribes
        dataProps.put(ConsumerConfig.CLIENT_ID_CONFIG, settings.member());
        this.data = new KafkaConsumer<>(dataProps);
        Properties producerProps = new Properties();
        producerProps.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, settings.bootstrap());
        producerProps.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        producerProps.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        producerProps.put(ProducerConfig.LINGER_MS_CONFIG, "0");
        producerProps.put(ProducerConfig.CLIENT_ID_CONFIG, settings.member() + "-presence");
        this.producer = new KafkaProducer<>(producerProps);
    }

    /** Read our key's history to its end, then announce ourselves (holding nothing yet). */
    public void start() {
        TopicPartition own = ownPartition();
        reader.assign(List.of(own));
        reader.seekToBeginning(List.of(own));
        long end = reader.endOffsets(List.of(own)).get(own);
        while (reader.position(own) < end) {
            reader.poll(Duration.ofMillis(200)).forEach(this::consider);
        }
        announce(live());
    }

    /**
     * Leave without a gap: announce {@code draining} and keep polling while the controller
     * revokes each partition and grants it to another member. {@link #handedOff} turns true
     * once a record leaves this member holding nothing, or {@code timeout} from now; then
     * {@link #close()}. From the polling thread, like every other call.
     */
    public void handOff(Duration timeout) {
        if (timeout.isNegative() || timeout.isZero()) {
            throw new IllegalArgumentException("timeout: must be above 0, got " + timeout);
        }
        if (handOffDeadline >= 0) return; // the first deadline holds
        handOffDeadline = System.currentTimeMillis() + timeout.toMillis();
        announce(live());
    }

    /** {@link #handOff} was called and nothing is left to read (or its time ran out). */
    public boolean handedOff() {
        return handOffDeadline >= 0
                && ((held.isEmpty() && pending == null) || System.currentTimeMillis() >= handOffDeadline);
    }

    /**
     * Records of the partitions held now. A new assignment is applied here, between two
     * batches: what was returned before a revoke is committed before it is acknowledged.
     */
    public ConsumerRecords<byte[], byte[]> poll(Duration timeout) {
        reader.poll(Duration.ZERO).forEach(this::consider);
        if (pending != null) apply();
        if (System.currentTimeMillis() >= nextBeat) announce(live());
        if (held.isEmpty()) {
            // Nothing to fetch: wait on the assignments instead.
            reader.poll(timeout).forEach(this::consider);
            return ConsumerRecords.empty();
        }
        ConsumerRecords<byte[], byte[]> records = data.poll(timeout);
        for (ConsumerRecord<byte[], byte[]> r : records) {
            consumed.put(new TopicPartition(r.topic(), r.partition()), r.offset() + 1);
        }
        return records;
    }

    /** Commit everything returned so far on the partitions held. */
    public Map<TopicPartition, Long> commit() {
        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
        Map<TopicPartition, Long> done = new HashMap<>();
        consumed.forEach((tp, next) -> {
            if (held.contains(tp)) {
                offsets.put(tp, new OffsetAndMetadata(next));
                done.put(tp, next);
            }
        });
        if (!offsets.isEmpty()) data.commitSync(offsets);
        return done;
    }

    public Set<TopicPartition> assignment() {
        return held;
    }

    public long generation() {
        return generation;
    }

    /** Records of our key or partition that were not what the protocol says (skipped). */
    public long invalidRecords() {
        return invalid;
    }

    /**
     * A clean leave ({@code leave}: the controller reassigns at once) or a restart (the
     * partitions wait {@code leave_grace} for this member to come back).
     */
    public void close(boolean leave) {
        try {
            if (leave) {
                if (!held.isEmpty()) release(held);
                data.assign(List.of());
                held = Set.of();
                announce("leaving");
                send(null);
                producer.flush();
            }
        } finally {
            producer.close(Duration.ofSeconds(5));
            data.close(CloseOptions.timeout(Duration.ofSeconds(5)));
            reader.close(CloseOptions.timeout(Duration.ofSeconds(5)));
        }
    }

    @Override
    public void close() {
        close(true);
    }

    private TopicPartition ownPartition() {
        long deadline = System.currentTimeMillis() + 30_000;
        while (true) {
            List<PartitionInfo> infos = reader.partitionsFor(settings.assignmentsTopic());
            if (infos != null && !infos.isEmpty()) {
                // Kafka's default partitioner, as the controller's producer keys it.
                int p = Utils.toPositive(Utils.murmur2(key)) % infos.size();
                return new TopicPartition(settings.assignmentsTopic(), p);
            }
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("assignments topic " + settings.assignmentsTopic() + " not found");
            }
            sleep(200);
        }
    }

    private void consider(ConsumerRecord<byte[], byte[]> record) {
        String k = record.key() == null ? "" : new String(record.key(), StandardCharsets.UTF_8);
        if (!k.equals(settings.group()) && !java.util.Arrays.equals(record.key(), key)) return;
        Entry entry;
        try {
            entry = Records.read(record.key(), record.value(), record.headers(), verifier);
        } catch (InvalidRecord e) {
            invalid++;
            System.err.printf("{\"event\":\"invalid_assignment_record\",\"offset\":%d,\"reason\":\"%s\"}%n",
                    record.offset(), e.getMessage().replace("\"", "'"));
            return;
        }
        if (view.add(entry) != Verdict.CURRENT || !(entry instanceof Grant grant)) return;
        if (!grant.tombstone() && (grant.instance() == null || grant.instance().equals(instance))) {
            pending = new Pending(new HashSet<>(grant.partitions()), view.generation());
        } else {
            // Our tombstone, or a grant issued to another process under our member id (a
            // predecessor's, until the controller has seen us): hold nothing, ack nothing.
            pending = new Pending(Set.of(), generation);
        }
    }

    private void apply() {
        Pending next = pending;
        pending = null;
        Set<TopicPartition> revoked = new HashSet<>(held);
        revoked.removeAll(next.partitions());
        Set<TopicPartition> added = new HashSet<>(next.partitions());
        added.removeAll(held);
        if (!revoked.isEmpty()) release(revoked);
        data.assign(Records.sorted(next.partitions()));
        for (TopicPartition tp : next.partitions()) {
            Long position = consumed.get(tp);
            if (position != null) data.seek(tp, position); // kept: go on from what was returned
        }
        held = Set.copyOf(next.partitions());
        generation = next.generation();
        if (!added.isEmpty()) listener.assigned(added);
        announce(live()); // the acknowledgement
    }

    /** Stop fetching, tell the application, commit what it was given: then let go. */
    private void release(Set<TopicPartition> revoked) {
        data.pause(revoked); // still assigned, so the commit below works
        listener.revoked(revoked);
        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
        for (TopicPartition tp : revoked) {
            Long offset = consumed.remove(tp);
            if (offset != null) offsets.put(tp, new OffsetAndMetadata(offset));
        }
        if (!offsets.isEmpty()) data.commitSync(offsets);
    }

    /** The state of a member that is not leaving yet: {@code draining} once it hands off. */
    private String live() {
        return handOffDeadline >= 0 ? "draining" : "active";
    }

    private void announce(String state) {
        byte[] body = Records.presence(settings.group(), settings.member(), settings.topics(), instance,
                state, generation, held, verifier == null ? null : verifier.keyIds());
        send(body);
        producer.flush();
        nextBeat = System.currentTimeMillis() + settings.heartbeatInterval().toMillis();
    }

    /** A heartbeat (null: the leave's tombstone), signed when the member has a key. */
    private void send(byte[] body) {
        ProducerRecord<byte[], byte[]> record = new ProducerRecord<>(settings.heartbeatTopic(), key, body);
        if (signer != null) signer.headers(key, body).forEach(record.headers()::add);
        producer.send(record);
    }

    private static void sleep(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }
}
