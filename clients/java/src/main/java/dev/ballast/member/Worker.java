package dev.ballast.member;

import java.io.FileWriter;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.stream.Collectors;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.common.TopicPartition;

/**
 * {@code ballast worker} in Java: "processes" a record by appending {@code topic partition
 * offset value time} to {@code --out} and commits each batch; {@code <out>.events} (JSON
 * lines) says when partitions were granted and revoked and what each commit covered. The
 * same files as the Python worker's, so the fault suite's checker reads both. SIGTERM: a
 * clean leave ({@code --restart}: keep the partitions for leave_grace; {@code --hand-off}:
 * read on until the controller has moved every partition, then leave); SIGKILL: a crash.
 *
 * <pre>java -cp ... dev.ballast.member.Worker --bootstrap HOST:PORT --group G --member M
 *     --topic T [--topic T2] --out FILE [--heartbeat-topic ballast.heartbeats]
 *     [--assignments-topic ballast.assignments] [--heartbeat-interval-ms 500]
 *     [--restart | --hand-off] [--public-key controller.pub]... [--member-key M.key]</pre>
 *
 * A bad argument or key file ends it at once with one line and exit code 2.
 */
public final class Worker {
    private Worker() {}

    public static void main(String[] argv) throws IOException, InterruptedException {
        try {
            run(argv);
        } catch (IllegalArgumentException e) { // a bad argument or key file (Signing.KeyFileError)
            System.err.println("ballast java member: " + e.getMessage());
            System.exit(2);
        }
    }

    private static void run(String[] argv) throws IOException, InterruptedException {
        Map<String, List<String>> args = parse(argv);
        String memberKey = one(args, "--member-key", "");
        BallastMember.Settings settings = new BallastMember.Settings(
                one(args, "--bootstrap", null), one(args, "--group", null), one(args, "--member", null),
                args.getOrDefault("--topic", List.of()),
                one(args, "--assignments-topic", "ballast.assignments"),
                one(args, "--heartbeat-topic", "ballast.heartbeats"),
                Duration.ofMillis(Long.parseLong(one(args, "--heartbeat-interval-ms", "500"))),
                args.getOrDefault("--public-key", List.of()).stream().map(Path::of).toList(),
                memberKey.isEmpty() ? null : Path.of(memberKey));
        boolean restart = args.containsKey("--restart");
        boolean handOff = args.containsKey("--hand-off");
        String out = one(args, "--out", null);
        try (PrintWriter sink = new PrintWriter(new FileWriter(out, StandardCharsets.UTF_8, true));
                PrintWriter events = new PrintWriter(new FileWriter(out + ".events", StandardCharsets.UTF_8, true))) {
            BallastMember member = new BallastMember(settings, new BallastMember.Listener() {
                @Override
                public void revoked(Collection<TopicPartition> tps) {
                    note(events, "revoked", tps);
                }

                @Override
                public void assigned(Collection<TopicPartition> tps) {
                    note(events, "granted", tps);
                }
            });
            CountDownLatch done = new CountDownLatch(1);
            AtomicBoolean stopping = new AtomicBoolean();
            Thread main = Thread.currentThread();
            Runtime.getRuntime().addShutdownHook(new Thread(() -> {
                if (handOff) {
                    stopping.set(true); // the loop hands off and ends once it holds nothing
                } else {
                    main.interrupt();
                }
                try {
                    done.await();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }));
            member.start();
            try {
                while (!Thread.currentThread().isInterrupted() && !member.handedOff()) {
                    if (stopping.get()) member.handOff(Duration.ofSeconds(20));
                    ConsumerRecords<byte[], byte[]> batch = member.poll(Duration.ofMillis(200));
                    if (batch.isEmpty()) continue;
                    for (ConsumerRecord<byte[], byte[]> r : batch) {
                        String value = r.value() == null ? "" : new String(r.value(), StandardCharsets.UTF_8);
                        sink.printf("%s %d %d %s %.6f%n", r.topic(), r.partition(), r.offset(), value, now());
                    }
                    sink.flush();
                    Map<TopicPartition, Long> committed = member.commit();
                    events.printf("{\"t\": %.6f, \"kind\": \"commit\", \"offsets\": [%s]}%n", now(),
                            committed.entrySet().stream()
                                    .map(e -> String.format("[\"%s\", %d, %d]", e.getKey().topic(),
                                            e.getKey().partition(), e.getValue()))
                                    .collect(Collectors.joining(", ")));
                    events.flush();
                }
            } catch (org.apache.kafka.common.errors.InterruptException e) {
                Thread.interrupted(); // SIGTERM while the client waited: leave below
            } finally {
                Thread.interrupted();
                member.close(!restart);
                done.countDown();
            }
        }
    }

    private static void note(PrintWriter events, String kind, Collection<TopicPartition> tps) {
        String list = Records.sorted(tps).stream()
                .map(tp -> String.format("[\"%s\", %d]", tp.topic(), tp.partition()))
                .collect(Collectors.joining(", "));
        events.printf("{\"t\": %.6f, \"kind\": \"%s\", \"partitions\": [%s]}%n", now(), kind, list);
        events.flush();
    }

    private static double now() {
        return System.currentTimeMillis() / 1000.0;
    }

    private static Map<String, List<String>> parse(String[] argv) {
        Map<String, List<String>> out = new java.util.HashMap<>();
        for (int i = 0; i < argv.length; i++) {
            String flag = argv[i];
            if (!flag.startsWith("--")) throw new IllegalArgumentException("unexpected argument: " + flag);
            if (flag.equals("--restart") || flag.equals("--hand-off")) {
                out.put(flag, List.of());
            } else if (i + 1 < argv.length) {
                out.computeIfAbsent(flag, k -> new ArrayList<>()).add(argv[++i]);
            } else {
                throw new IllegalArgumentException(flag + " needs a value");
            }
        }
        return out;
    }

    private static String one(Map<String, List<String>> args, String flag, String fallback) {
        List<String> values = args.get(flag);
        if (values == null || values.isEmpty()) {
            if (fallback == null) throw new IllegalArgumentException(flag + " is required");
            return fallback;
        }
        return values.get(values.size() - 1);
    }
}
