// Java client checks run by test_parity.py: share-group answers compared with Kafka's
// (compiled with ShareCheck.java, whose helpers it reuses). One mode per run; prints
// "RESULT <mode> key=value ..." lines for the Python test to compare, "FAIL <mode>: <why>" and
// exit 1 on a failed requirement (2 on an unexpected exception, 3 past the time bound).
//
// Usage: ParityShareCheck <mode> <bootstrap> <topic> <group>
//   maxbytes0:   20 records in one batch; a consumer with fetch.max.bytes=0 (ShareFetch
//                MaxBytes 0) polls 10 x 300 ms; then a default consumer of the same group
//                drains. RESULT maxbytes0 zero=<records the first got> drained=<the second>
//   recordlimit: 50 records in one batch; consumer X (share.acquire.mode=record_limit,
//                max.poll.records=10, explicit) polls once and holds its records; consumer Y of
//                the same group then takes what the broker did not acquire for X.
//                RESULT recordlimit first=<X's first poll> other=<Y's records>
//                Then in group <group>-bo, batch_optimized with max.poll.records=10:
//                RESULT batchoptimized first=<first poll size>
//   mixed:       an explicit-mode and an implicit-mode consumer of one group on one partition;
//                records produced one per batch until both got some (at least 60), then
//                drained. RESULT mixed explicit=<n> implicit=<n> produced=<n> distinct=<n>
import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;

public class ParityShareCheck {
    static void require(boolean cond, String msg) { ShareCheck.require(cond, msg); }

    static void out(String line) {
        synchronized (System.out) {
            System.out.println(line);
            System.out.flush();
        }
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0];
        ShareCheck.bs = args[1];
        ShareCheck.check = mode;
        String topic = args[2];
        String group = args[3];
        Thread watchdog = new Thread(() -> {
            try { Thread.sleep(100_000); } catch (InterruptedException e) { return; }
            out("FAIL " + mode + ": whole run exceeded 100000 ms");
            Runtime.getRuntime().halt(3);
        });
        watchdog.setDaemon(true);
        watchdog.start();
        Properties ap = new Properties();
        ap.put("bootstrap.servers", ShareCheck.bs);
        ShareCheck.admin = Admin.create(ap);
        int rc = 0;
        try {
            switch (mode) {
                case "maxbytes0": maxBytesZero(topic, group); break;
                case "recordlimit": recordLimit(topic, group); break;
                case "mixed": mixed(topic, group); break;
                default: throw new IllegalArgumentException("unknown mode " + mode);
            }
        } catch (ShareCheck.Failed f) {
            out("FAIL " + mode + ": " + f.getMessage());
            rc = 1;
        } catch (Throwable t) {
            out("FAIL " + mode + ": unexpected " + t);
            t.printStackTrace(System.out);
            rc = 2;
        }
        System.out.flush();
        try { ShareCheck.admin.close(Duration.ofSeconds(5)); } catch (Throwable ignored) { }
        Runtime.getRuntime().halt(rc);
    }

    /** Polls until `n` records arrived in total (explicit consumers ACCEPT each, then commit). */
    static List<ConsumerRecord<String, String>> drain(KafkaShareConsumer<String, String> k, String topic, int n,
                                                      boolean explicit) {
        List<ConsumerRecord<String, String>> got = new ArrayList<>();
        long deadline = System.currentTimeMillis() + ShareCheck.CHECK_TIMEOUT_MS;
        while (got.size() < n && System.currentTimeMillis() < deadline) {
            ConsumerRecords<String, String> rs = k.poll(Duration.ofMillis(200));
            for (ConsumerRecord<String, String> r : rs) {
                got.add(r);
                if (explicit) k.acknowledge(r, AcknowledgeType.ACCEPT);
            }
            if (!rs.isEmpty()) ShareCheck.commitOk(k, topic, "drain");
        }
        return got;
    }

    static void maxBytesZero(String topic, String group) throws Exception {
        ShareCheck.setGroupConfig(group, ShareCheck.earliest());
        ShareCheck.produceOneBatch(topic, ShareCheck.values("m", 20));
        int zero = 0;
        try (KafkaShareConsumer<String, String> k = ShareCheck.consumer(group, "maxbytes0", false, topic,
                "fetch.max.bytes", "0")) {
            for (int i = 0; i < 10; i++) zero += k.poll(Duration.ofMillis(300)).count();
        }
        int drained;
        try (KafkaShareConsumer<String, String> k = ShareCheck.consumer(group, "drain", true, topic)) {
            drained = drain(k, topic, 20 - zero, true).size();
        }
        out("RESULT maxbytes0 zero=" + zero + " drained=" + drained);
    }

    static void recordLimit(String topic, String group) throws Exception {
        ShareCheck.setGroupConfig(group, ShareCheck.earliest());
        ShareCheck.produceOneBatch(topic, ShareCheck.values("r", 50));
        try (KafkaShareConsumer<String, String> x = ShareCheck.consumer(group, "limited", true, topic,
                "share.acquire.mode", "record_limit", "max.poll.records", "10")) {
            List<ConsumerRecord<String, String>> first = List.of();
            long deadline = System.currentTimeMillis() + ShareCheck.CHECK_TIMEOUT_MS;
            while (first.isEmpty() && System.currentTimeMillis() < deadline)
                first = ShareCheck.toList(x.poll(Duration.ofMillis(200)));
            // X holds its records (no acknowledgement): Y can only get what X was not given.
            int other;
            try (KafkaShareConsumer<String, String> y = ShareCheck.consumer(group, "other", true, topic)) {
                other = drain(y, topic, 50 - first.size(), true).size();
            }
            out("RESULT recordlimit first=" + first.size() + " other=" + other);
        }
        String bo = group + "-bo";
        ShareCheck.setGroupConfig(bo, ShareCheck.earliest());
        try (KafkaShareConsumer<String, String> k = ShareCheck.consumer(bo, "optimized", true, topic,
                "share.acquire.mode", "batch_optimized", "max.poll.records", "10")) {
            List<ConsumerRecord<String, String>> first = List.of();
            long deadline = System.currentTimeMillis() + ShareCheck.CHECK_TIMEOUT_MS;
            while (first.isEmpty() && System.currentTimeMillis() < deadline)
                first = ShareCheck.toList(k.poll(Duration.ofMillis(200)));
            out("RESULT batchoptimized first=" + first.size());
        }
    }

    static void mixed(String topic, String group) throws Exception {
        ShareCheck.setGroupConfig(group, ShareCheck.earliest());
        ConcurrentHashMap<String, AtomicInteger> seen = new ConcurrentHashMap<>();
        AtomicInteger[] per = {new AtomicInteger(), new AtomicInteger()};
        AtomicBoolean stop = new AtomicBoolean();
        AtomicReference<Throwable> err = new AtomicReference<>();
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < 2; i++) {
            final int idx = i;
            final boolean explicit = i == 0;
            Thread t = new Thread(() -> {
                try (KafkaShareConsumer<String, String> k = ShareCheck.consumer(group,
                        explicit ? "explicit" : "implicit", explicit, topic, "max.poll.records", "10")) {
                    while (!stop.get()) {
                        ConsumerRecords<String, String> rs = k.poll(Duration.ofMillis(100));
                        if (rs.isEmpty()) continue;
                        for (ConsumerRecord<String, String> r : rs) {
                            seen.computeIfAbsent(r.value(), x -> new AtomicInteger()).incrementAndGet();
                            per[idx].incrementAndGet();
                            if (explicit) k.acknowledge(r, AcknowledgeType.ACCEPT);
                        }
                        ShareCheck.commitOk(k, topic, (explicit ? "explicit" : "implicit") + " consumer");
                        Thread.sleep(20);
                    }
                } catch (Throwable e) {
                    err.compareAndSet(null, e);
                }
            }, "mixed-" + idx);
            t.start();
            threads.add(t);
        }
        int produced = 0;
        try (KafkaProducer<String, String> prod = ShareCheck.producer(null)) {
            long deadline = System.currentTimeMillis() + ShareCheck.CHECK_TIMEOUT_MS;
            while (err.get() == null && System.currentTimeMillis() < deadline
                    && (produced < 60 || per[0].get() == 0 || per[1].get() == 0)) {
                ShareCheck.produceEach(prod, topic, List.of("x" + produced));
                produced++;
                Thread.sleep(10);
            }
        }
        long deadline = System.currentTimeMillis() + ShareCheck.CHECK_TIMEOUT_MS;
        while (err.get() == null && seen.size() < produced && System.currentTimeMillis() < deadline)
            Thread.sleep(50);
        stop.set(true);
        for (Thread t : threads) t.join(30_000);
        if (err.get() instanceof ShareCheck.Failed) throw (ShareCheck.Failed) err.get();
        require(err.get() == null, "consumer thread failed: " + err.get());
        out("RESULT mixed explicit=" + per[0] + " implicit=" + per[1] + " produced=" + produced
                + " distinct=" + seen.size());
    }
}
