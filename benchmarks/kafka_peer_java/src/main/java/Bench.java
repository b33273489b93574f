// Java side of the Kafka-vs-Ballast harness (benchmarks/kafka_peer.py builds it with Maven
// against Kafka's released jars). Times Kafka's own (unmodified) assignors on the
// scenarios of gen.py: server-side UniformAssignor (KIP-848 group coordinator) and the client
// StickyAssignor / CooperativeStickyAssignor (classic protocol, leader-side assign()).
//
// Per scenario and implementation, three operations, each warmed then timed:
//   fresh : no current assignment.
//   leave : input = the implementation's own fresh result minus victim v (current assignment of the
//           remaining members passed in: GroupSpec member assignment / Subscription ownedPartitions+userData).
//   join  : input = the leave result plus v again with nothing owned (mirrors bench_py.py's re-join).
// Only the assignor call is timed; building GroupSpec/Subscription/Cluster inputs is not (in Kafka the
// coordinator / consumer protocol keeps those structures already).
//
// usage: java -cp ... Bench SCENARIOS.jsonl [impl,impl,...]   -> JSON lines on stdout
// env:   BENCH_WARM (10) BENCH_RUNS (10) BENCH_WARM_BUDGET_S (10) BENCH_RUN_BUDGET_S (30)
//        (a budget stops warm-up after >=1 iteration / timed runs after >=3 runs once exceeded)
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.StickyAssignor;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.coordinator.common.runtime.CoordinatorMetadataDelta;
import org.apache.kafka.coordinator.common.runtime.CoordinatorMetadataImage;
import org.apache.kafka.coordinator.group.api.assignor.GroupAssignment;
import org.apache.kafka.coordinator.group.api.assignor.MemberAssignment;
import org.apache.kafka.coordinator.group.api.assignor.SubscriptionType;
import org.apache.kafka.coordinator.group.assignor.UniformAssignor;
import org.apache.kafka.coordinator.group.modern.Assignment;
import org.apache.kafka.coordinator.group.modern.GroupSpecImpl;
import org.apache.kafka.coordinator.group.modern.MemberSubscriptionAndAssignmentImpl;
import org.apache.kafka.coordinator.group.modern.SubscribedTopicDescriberImpl;

import java.io.BufferedReader;
import java.io.FileReader;
import java.nio.ByteBuffer;
import java.util.*;

public class Bench {
    static final int WARM = intEnv("BENCH_WARM", 10);
    static final int RUNS = intEnv("BENCH_RUNS", 10);
    static final double WARM_BUDGET_S = dblEnv("BENCH_WARM_BUDGET_S", 10);
    static final double RUN_BUDGET_S = dblEnv("BENCH_RUN_BUDGET_S", 30);

    static int intEnv(String k, int d) { String v = System.getenv(k); return v == null ? d : Integer.parseInt(v); }
    static double dblEnv(String k, double d) { String v = System.getenv(k); return v == null ? d : Double.parseDouble(v); }

    // ------------------------------------------------------------------ scenario

    static final class Scenario {
        String name;
        LinkedHashMap<String, Integer> ppt = new LinkedHashMap<>();
        LinkedHashMap<String, List<String>> subs = new LinkedHashMap<>();
        List<String> victims = new ArrayList<>();
        int partitions;
    }

    static Scenario parse(JsonNode n) {
        Scenario s = new Scenario();
        s.name = n.get("name").asText();
        n.get("partitions_per_topic").fields().forEachRemaining(e -> s.ppt.put(e.getKey(), e.getValue().asInt()));
        n.get("subscriptions").fields().forEachRemaining(e -> {
            List<String> ts = new ArrayList<>();
            e.getValue().forEach(t -> ts.add(t.asText()));
            s.subs.put(e.getKey(), ts);
        });
        n.get("victims").forEach(v -> s.victims.add(v.asText()));
        s.partitions = s.ppt.values().stream().mapToInt(Integer::intValue).sum();
        return s;
    }

    // ------------------------------------------------------------------ implementations

    /** prepare() and convert() are untimed; run() is the timed assignor call. */
    interface Impl {
        String name();
        Object prepare(Map<String, List<String>> subs, Map<String, List<TopicPartition>> current);
        Object run(Object input);
        Map<String, List<TopicPartition>> convert(Object raw);
    }

    /** A topic as the group coordinator's metadata image describes it (no racks here). */
    record Topic(String name, Uuid id, int partitionCount)
            implements CoordinatorMetadataImage.TopicMetadata {
        public List<String> partitionRacks(int partition) { return List.of(); }
    }

    /** The scenario's topics as the coordinator's metadata image (Kafka 4.2+ reads
     *  topics through it; earlier versions took a map of TopicMetadata). */
    record Image(Map<Uuid, Topic> byId) implements CoordinatorMetadataImage {
        public Set<Uuid> topicIds() { return byId.keySet(); }
        public Set<String> topicNames() {
            Set<String> out = new HashSet<>();
            for (Topic t : byId.values()) out.add(t.name());
            return out;
        }
        public Optional<TopicMetadata> topicMetadata(String name) {
            for (Topic t : byId.values()) if (t.name().equals(name)) return Optional.of(t);
            return Optional.empty();
        }
        public Optional<TopicMetadata> topicMetadata(Uuid id) { return Optional.ofNullable(byId.get(id)); }
        public CoordinatorMetadataDelta emptyDelta() { return CoordinatorMetadataDelta.EMPTY; }
        public long version() { return 1; }
        public boolean isEmpty() { return byId.isEmpty(); }
    }

    /** Server-side KIP-848 UniformAssignor through GroupSpecImpl / SubscribedTopicDescriberImpl. */
    static final class Uniform implements Impl {
        final Map<String, Uuid> ids = new HashMap<>();
        final Map<Uuid, String> names = new HashMap<>();
        final SubscribedTopicDescriberImpl describer;
        final UniformAssignor assignor = new UniformAssignor();

        Uniform(Scenario s) {
            Map<Uuid, Topic> meta = new HashMap<>();
            long i = 1;
            for (Map.Entry<String, Integer> e : s.ppt.entrySet()) {
                Uuid id = new Uuid(0x5EED0000L, i++);
                ids.put(e.getKey(), id);
                names.put(id, e.getKey());
                meta.put(id, new Topic(e.getKey(), id, e.getValue()));
            }
            describer = new SubscribedTopicDescriberImpl(new Image(meta));
        }

        public String name() { return "kafka-uniform"; }

        public Object prepare(Map<String, List<String>> subs, Map<String, List<TopicPartition>> current) {
            Map<String, MemberSubscriptionAndAssignmentImpl> members = new HashMap<>();
            Map<Uuid, Map<Integer, String>> inverted = new HashMap<>();
            Set<String> first = null;
            boolean homogeneous = true;
            for (Map.Entry<String, List<String>> e : subs.entrySet()) {
                String m = e.getKey();
                Set<String> tset = new HashSet<>(e.getValue());
                if (first == null) first = tset; else if (homogeneous && !first.equals(tset)) homogeneous = false;
                Set<Uuid> topicIds = new HashSet<>();
                for (String t : e.getValue()) topicIds.add(ids.get(t));
                Map<Uuid, Set<Integer>> asg = new HashMap<>();
                List<TopicPartition> cur = current == null ? null : current.get(m);
                if (cur != null) {
                    for (TopicPartition tp : cur) {
                        Uuid id = ids.get(tp.topic());
                        asg.computeIfAbsent(id, k -> new HashSet<>()).add(tp.partition());
                        inverted.computeIfAbsent(id, k -> new HashMap<>()).put(tp.partition(), m);
                    }
                }
                members.put(m, new MemberSubscriptionAndAssignmentImpl(
                    Optional.empty(), Optional.empty(), topicIds, new Assignment(asg)));
            }
            return new GroupSpecImpl(members,
                homogeneous ? SubscriptionType.HOMOGENEOUS : SubscriptionType.HETEROGENEOUS, inverted);
        }

        public Object run(Object input) { return assignor.assign((GroupSpecImpl) input, describer); }

        public Map<String, List<TopicPartition>> convert(Object raw) {
            Map<String, List<TopicPartition>> out = new HashMap<>();
            for (Map.Entry<String, MemberAssignment> e : ((GroupAssignment) raw).members().entrySet()) {
                List<TopicPartition> l = new ArrayList<>();
                for (Map.Entry<Uuid, Set<Integer>> tp : e.getValue().partitions().entrySet()) {
                    String t = names.get(tp.getKey());
                    for (int p : tp.getValue()) l.add(new TopicPartition(t, p));
                }
                out.put(e.getKey(), l);
            }
            return out;
        }
    }

    /** Client-side (classic protocol) StickyAssignor / CooperativeStickyAssignor, leader assign(). */
    static final class ClientSticky implements Impl {
        final boolean cooperative;
        final Cluster cluster;
        final ConsumerPartitionAssignor assignor;

        ClientSticky(Scenario s, boolean cooperative) {
            this.cooperative = cooperative;
            this.assignor = cooperative ? new CooperativeStickyAssignor() : new StickyAssignor();
            Node node = new Node(0, "localhost", 9092);
            Node[] replicas = {node};
            List<PartitionInfo> parts = new ArrayList<>(s.partitions);
            for (Map.Entry<String, Integer> e : s.ppt.entrySet())
                for (int p = 0; p < e.getValue(); p++)
                    parts.add(new PartitionInfo(e.getKey(), p, node, replicas, replicas));
            cluster = new Cluster("bench", List.of(node), parts, Collections.emptySet(), Collections.emptySet());
        }

        public String name() { return cooperative ? "kafka-coop-sticky" : "kafka-sticky"; }

        public Object prepare(Map<String, List<String>> subs, Map<String, List<TopicPartition>> current) {
            Map<String, ConsumerPartitionAssignor.Subscription> out = new HashMap<>();
            for (Map.Entry<String, List<String>> e : subs.entrySet()) {
                String m = e.getKey();
                List<TopicPartition> owned = current == null ? null : current.get(m);
                ByteBuffer userData = null;
                if (owned != null && !cooperative) {
                    // eager StickyAssignor reads the previous assignment from its own user data, produced
                    // by the member's assignor after onAssignment(): use that public path per member.
                    StickyAssignor helper = new StickyAssignor();
                    helper.onAssignment(new ConsumerPartitionAssignor.Assignment(owned),
                        new ConsumerGroupMetadata("bench", 1, m, Optional.empty()));
                    userData = helper.subscriptionUserData(new HashSet<>(e.getValue()));
                }
                out.put(m, new ConsumerPartitionAssignor.Subscription(e.getValue(), userData,
                    owned == null ? Collections.emptyList() : owned, owned == null ? -1 : 1, Optional.empty()));
            }
            return new ConsumerPartitionAssignor.GroupSubscription(out);
        }

        public Object run(Object input) {
            // each timed call gets a freshly prepared GroupSubscription (StickyAssignor consumes userData buffers)
            return assignor.assign(cluster, (ConsumerPartitionAssignor.GroupSubscription) input);
        }

        public Map<String, List<TopicPartition>> convert(Object raw) {
            Map<String, List<TopicPartition>> out = new HashMap<>();
            for (Map.Entry<String, ConsumerPartitionAssignor.Assignment> e :
                    ((ConsumerPartitionAssignor.GroupAssignment) raw).groupAssignment().entrySet())
                out.put(e.getKey(), new ArrayList<>(e.getValue().partitions()));
            return out;
        }
    }

    // ------------------------------------------------------------------ metrics

    static int[] counts(Map<String, List<TopicPartition>> a, Set<String> members) {
        int max = Integer.MIN_VALUE, min = Integer.MAX_VALUE, assigned = 0;
        for (String m : members) {
            List<TopicPartition> l = a.get(m);
            int c = l == null ? 0 : l.size();
            max = Math.max(max, c); min = Math.min(min, c); assigned += c;
        }
        return new int[]{max - min, assigned};
    }

    /** Partitions whose input owner is still a member but which that owner no longer holds. */
    static int moved(Map<String, List<TopicPartition>> before, Map<String, List<TopicPartition>> after) {
        Map<TopicPartition, String> owner = new HashMap<>();
        for (Map.Entry<String, List<TopicPartition>> e : after.entrySet())
            for (TopicPartition tp : e.getValue()) owner.put(tp, e.getKey());
        int moved = 0;
        for (Map.Entry<String, List<TopicPartition>> e : before.entrySet())
            for (TopicPartition tp : e.getValue())
                if (!e.getKey().equals(owner.get(tp))) moved++;
        return moved;
    }

    static Map<String, List<TopicPartition>> without(Map<String, List<TopicPartition>> a, String v) {
        Map<String, List<TopicPartition>> out = new HashMap<>(a);
        out.remove(v);
        return out;
    }

    static Map<String, List<String>> withoutSub(Map<String, List<String>> subs, String v) {
        Map<String, List<String>> out = new LinkedHashMap<>(subs);
        out.remove(v);
        return out;
    }

    // ------------------------------------------------------------------ timing

    static final class Stats {
        List<Double> ms = new ArrayList<>();
        List<Integer> moved = new ArrayList<>();
        int maxMin, assigned, warm;
    }

    static double median(List<Double> xs) {
        List<Double> s = new ArrayList<>(xs); Collections.sort(s);
        int n = s.size();
        return n % 2 == 1 ? s.get(n / 2) : (s.get(n / 2 - 1) + s.get(n / 2)) / 2;
    }

    static double p90(List<Double> xs) {
        List<Double> s = new ArrayList<>(xs); Collections.sort(s);
        return s.get(Math.max(0, (int) Math.ceil(0.9 * s.size()) - 1));
    }

    static double time(Impl impl, Object input, Object[] rawOut) {
        long t0 = System.nanoTime();
        rawOut[0] = impl.run(input);
        return (System.nanoTime() - t0) / 1e6;
    }

    static Stats fresh(Impl impl, Scenario s) {
        Stats st = new Stats();
        Object[] raw = new Object[1];
        long start = System.nanoTime();
        for (int i = 0; i < WARM; i++) {
            time(impl, impl.prepare(s.subs, null), raw);
            st.warm++;
            if ((System.nanoTime() - start) / 1e9 > WARM_BUDGET_S) break;
        }
        start = System.nanoTime();
        for (int i = 0; i < RUNS; i++) {
            Object in = impl.prepare(s.subs, null);
            st.ms.add(time(impl, in, raw));
            if (st.ms.size() >= 3 && (System.nanoTime() - start) / 1e9 > RUN_BUDGET_S) break;
        }
        int[] c = counts(impl.convert(raw[0]), s.subs.keySet());
        st.maxMin = c[0]; st.assigned = c[1];
        st.moved.add(0);
        return st;
    }

    /** One leave then one re-join of victim v starting from base; returns {leaveMs, joinMs} and fills stats. */
    static void leaveJoin(Impl impl, Scenario s, Map<String, List<TopicPartition>> base, String v,
                          Stats leave, Stats join, boolean record) {
        Object[] raw = new Object[1];
        Map<String, List<String>> subsL = withoutSub(s.subs, v);
        Map<String, List<TopicPartition>> curL = without(base, v);
        double lm = time(impl, impl.prepare(subsL, curL), raw);
        Map<String, List<TopicPartition>> afterL = impl.convert(raw[0]);
        Map<String, List<TopicPartition>> curJ = new HashMap<>(afterL);
        curJ.remove(v);
        // the re-joining member owns nothing; everyone else passes the leave result as current
        double jm = time(impl, impl.prepare(s.subs, curJ), raw);
        if (!record) return;
        Map<String, List<TopicPartition>> afterJ = impl.convert(raw[0]);
        leave.ms.add(lm);
        join.ms.add(jm);
        leave.moved.add(moved(curL, afterL));
        join.moved.add(moved(curJ, afterJ));
        int[] cl = counts(afterL, subsL.keySet());
        int[] cj = counts(afterJ, s.subs.keySet());
        leave.maxMin = Math.max(leave.maxMin, cl[0]); leave.assigned = cl[1];
        join.maxMin = Math.max(join.maxMin, cj[0]); join.assigned = cj[1];
    }

    static String json(Scenario s, Impl impl, String op, Stats st, int members) {
        List<Integer> mv = new ArrayList<>(st.moved); Collections.sort(mv);
        int movedMed = mv.isEmpty() ? 0 : mv.get(mv.size() / 2);
        return String.format(Locale.ROOT,
            "{\"lang\":\"java\",\"scenario\":\"%s\",\"impl\":\"%s\",\"op\":\"%s\",\"members\":%d,\"partitions\":%d," +
            "\"n_warm\":%d,\"n_runs\":%d,\"median_ms\":%.3f,\"p90_ms\":%.3f,\"moved\":%d,\"max_min\":%d," +
            "\"assigned\":%d,\"runs_ms\":%s}",
            s.name, impl.name(), op, members, s.partitions, st.warm, st.ms.size(), median(st.ms), p90(st.ms),
            movedMed, st.maxMin, st.assigned, st.ms.stream().map(x -> String.format(Locale.ROOT, "%.3f", x)).toList());
    }

    public static void main(String[] args) throws Exception {
        Set<String> only = args.length > 1 && !args[1].isEmpty() ? new HashSet<>(Arrays.asList(args[1].split(","))) : null;
        Set<String> scen = args.length > 2 && !args[2].isEmpty() ? new HashSet<>(Arrays.asList(args[2].split(","))) : null;
        ObjectMapper om = new ObjectMapper();
        try (BufferedReader r = new BufferedReader(new FileReader(args[0]))) {
            String line;
            while ((line = r.readLine()) != null) {
                if (line.isBlank()) continue;
                Scenario s = parse(om.readTree(line));
                if (scen != null && !scen.contains(s.name)) continue;
                List<Impl> impls = new ArrayList<>();
                if (only == null || only.contains("kafka-uniform")) impls.add(new Uniform(s));
                if (only == null || only.contains("kafka-sticky")) impls.add(new ClientSticky(s, false));
                if (only == null || only.contains("kafka-coop-sticky")) impls.add(new ClientSticky(s, true));
                int n = s.subs.size();
                for (Impl impl : impls) {
                    Stats f = fresh(impl, s);
                    System.out.println(json(s, impl, "fresh", f, n));
                    System.out.flush();
                    // base assignment = this implementation's own fresh result
                    Object[] raw = new Object[1];
                    time(impl, impl.prepare(s.subs, null), raw);
                    Map<String, List<TopicPartition>> base = impl.convert(raw[0]);
                    Stats leave = new Stats(), join = new Stats();
                    long start = System.nanoTime();
                    for (int i = 0; i < WARM && i < 10; i++) {
                        leaveJoin(impl, s, base, s.victims.get(i), leave, join, false);
                        leave.warm++; join.warm++;
                        if ((System.nanoTime() - start) / 1e9 > WARM_BUDGET_S) break;
                    }
                    start = System.nanoTime();
                    for (int i = 0; i < RUNS && i < 10; i++) {
                        leaveJoin(impl, s, base, s.victims.get(10 + i), leave, join, true);
                        if (leave.ms.size() >= 3 && (System.nanoTime() - start) / 1e9 > 2 * RUN_BUDGET_S) break;
                    }
                    System.out.println(json(s, impl, "leave", leave, n - 1));
                    System.out.println(json(s, impl, "join", join, n));
                    System.out.flush();
                }
            }
        }
    }
}
