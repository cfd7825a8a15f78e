// Java client check run by test_java_share.py: share groups (KIP-932) through
// KafkaShareConsumer (kafka-clients 4.x) against the broker, records produced with a plain
// (and, for check 5, a transactional) KafkaProducer. Every group first gets the group config
// share.auto.offset.reset=earliest through Admin incrementalAlterConfigs (ConfigResource GROUP),
// so records produced before a consumer joins are delivered.
//
// Usage: ShareCheck <bootstrap> <lockMs> <topicImplicit> <topicExplicit> <topicClose> <topicLock> <topicTxn>
//   lockMs = the broker's group.share.record.lock.duration.ms (expected AcquisitionLockTimeoutMs)
// Prints one "OK <check>: ..." line per check; on a failure prints "FAIL <check>: <why>" and
// exits 1 (2 on an unexpected exception, 3 when the whole run exceeds its time bound).
import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.*;

public class ShareCheck {
    static final long CHECK_TIMEOUT_MS = 20_000;   // per wait inside a check
    static final long RUN_TIMEOUT_MS = 100_000;    // whole program (watchdog)
    static String bs;
    static int lockMs;
    static Admin admin;
    static String check = "setup";

    static final class Failed extends RuntimeException {
        Failed(String m) { super(m); }
    }

    static void require(boolean cond, String msg) {
        if (!cond) throw new Failed(msg);
    }

    public static void main(String[] args) throws Exception {
        bs = args[0];
        lockMs = Integer.parseInt(args[1]);
        Thread watchdog = new Thread(() -> {
            try { Thread.sleep(RUN_TIMEOUT_MS); } catch (InterruptedException e) { return; }
            System.out.println("FAIL " + check + ": whole run exceeded " + RUN_TIMEOUT_MS + " ms");
            System.out.flush();
            Runtime.getRuntime().halt(3);
        });
        watchdog.setDaemon(true);
        watchdog.start();
        Properties ap = new Properties();
        ap.put("bootstrap.servers", bs);
        admin = Admin.create(ap);
        int rc = 0;
        try {
            long t = System.currentTimeMillis();
            check = "implicit"; implicitTwoConsumers(args[2]); t = took(t);
            check = "explicit"; explicitAcks(args[3]); t = took(t);
            check = "close"; closeWithoutAck(args[4]); t = took(t);
            check = "lock-expiry"; lockExpiry(args[5]); t = took(t);
            check = "read_committed"; readCommitted(args[6]); took(t);
            System.out.println("ALL OK");
        } catch (Failed f) {
            System.out.println("FAIL " + check + ": " + f.getMessage());
            rc = 1;
        } catch (Throwable t) {
            System.out.println("FAIL " + check + ": unexpected " + t);
            t.printStackTrace(System.out);
            rc = 2;
        }
        System.out.flush();
        try { admin.close(Duration.ofSeconds(5)); } catch (Throwable ignored) { }
        Runtime.getRuntime().halt(rc);  // don't wait for lingering client threads
    }

    // ------------------------------------------------------------------ helpers

    static long took(long since) {
        long now = System.currentTimeMillis();
        System.out.println("  (" + check + " took " + (now - since) + " ms)");
        return now;
    }

    static void setGroupConfig(String group, Map<String, String> cfg) throws Exception {
        List<AlterConfigOp> ops = new ArrayList<>();
        cfg.forEach((k, v) -> ops.add(new AlterConfigOp(new ConfigEntry(k, v), AlterConfigOp.OpType.SET)));
        ConfigResource res = new ConfigResource(ConfigResource.Type.GROUP, group);
        admin.incrementalAlterConfigs(Map.of(res, ops)).all().get(30, TimeUnit.SECONDS);
        // Kafka (KRaft) applies the change on the broker asynchronously after the controller
        // committed it: wait until it reads back, or a consumer could join with the old values.
        long deadline = System.currentTimeMillis() + CHECK_TIMEOUT_MS;
        while (true) {
            Config got = admin.describeConfigs(List.of(res)).all().get(30, TimeUnit.SECONDS).get(res);
            String bad = null;
            for (Map.Entry<String, String> e : cfg.entrySet()) {
                ConfigEntry ce = got.get(e.getKey());
                if (ce == null || !e.getValue().equals(ce.value())) bad = "group config " + e.getKey() + " of "
                        + group + " reads back as " + ce + " after the alter";
            }
            if (bad == null) return;
            require(System.currentTimeMillis() < deadline, bad);
            Thread.sleep(100);
        }
    }

    static Map<String, String> earliest(String... more) {
        Map<String, String> m = new LinkedHashMap<>();
        m.put("share.auto.offset.reset", "earliest");
        for (int i = 0; i + 1 < more.length; i += 2) m.put(more[i], more[i + 1]);
        return m;
    }

    static KafkaProducer<String, String> producer(String txnId) {
        return producer(txnId, 0);
    }

    static KafkaProducer<String, String> producer(String txnId, int lingerMs) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bs);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("linger.ms", String.valueOf(lingerMs));
        if (txnId != null) p.put("transactional.id", txnId);
        return new KafkaProducer<>(p);
    }

    /** One record per produce request (and so per log batch), waited for. */
    static void produceEach(KafkaProducer<String, String> prod, String topic, List<String> values) throws Exception {
        for (String v : values) prod.send(new ProducerRecord<>(topic, 0, null, v)).get(30, TimeUnit.SECONDS);
    }

    /** All values in one record batch (one produce request): linger holds them until flush(). */
    static void produceOneBatch(String topic, List<String> values) throws Exception {
        try (KafkaProducer<String, String> prod = producer(null, 5000)) {
            List<java.util.concurrent.Future<RecordMetadata>> fs = new ArrayList<>();
            for (String v : values) fs.add(prod.send(new ProducerRecord<>(topic, 0, null, v)));
            prod.flush();
            for (java.util.concurrent.Future<RecordMetadata> f : fs) f.get(30, TimeUnit.SECONDS);
        }
    }

    static List<String> values(String prefix, int n) {
        List<String> l = new ArrayList<>();
        for (int i = 0; i < n; i++) l.add(prefix + i);
        return l;
    }

    static KafkaShareConsumer<String, String> consumer(String group, String clientId, boolean explicit,
                                                       String topic, String... extra) {
        Properties c = new Properties();
        c.put("bootstrap.servers", bs);
        c.put("group.id", group);
        c.put("client.id", clientId);
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        c.put("share.acknowledgement.mode", explicit ? "explicit" : "implicit");
        for (int i = 0; i + 1 < extra.length; i += 2) c.put(extra[i], extra[i + 1]);
        KafkaShareConsumer<String, String> k = new KafkaShareConsumer<>(c);
        k.subscribe(List.of(topic));
        return k;
    }

    static int dc(ConsumerRecord<String, String> r) {
        Optional<Short> d = r.deliveryCount();
        require(d.isPresent(), "record " + r.value() + " has no deliveryCount (share consumers always have one)");
        return d.get();
    }

    /** commitSync must return an entry for `topic` partition 0 and no error for any partition. */
    static void commitOk(KafkaShareConsumer<String, String> k, String topic, String what) {
        Map<TopicIdPartition, Optional<KafkaException>> res = k.commitSync(Duration.ofSeconds(30));
        require(!res.isEmpty(), what + ": commitSync returned no partition result");
        for (Map.Entry<TopicIdPartition, Optional<KafkaException>> e : res.entrySet()) {
            require(e.getValue().isEmpty(), what + ": commitSync error on " + e.getKey() + ": " + e.getValue().orElse(null));
            require(e.getKey().topic().equals(topic) && e.getKey().partition() == 0,
                    what + ": commitSync result for unexpected partition " + e.getKey());
        }
    }

    /** Poll until a poll returns records (or the check timeout); that first non-empty poll must
     * hold exactly `n` records. They were produced as one record batch, and in explicit mode the
     * next poll would need them all acknowledged first. */
    static List<ConsumerRecord<String, String>> pollBatch(KafkaShareConsumer<String, String> k, int n, String what) {
        long deadline = System.currentTimeMillis() + CHECK_TIMEOUT_MS;
        while (System.currentTimeMillis() < deadline) {
            ConsumerRecords<String, String> rs = k.poll(Duration.ofMillis(200));
            if (rs.isEmpty()) continue;
            List<ConsumerRecord<String, String>> got = toList(rs);
            require(got.size() == n, what + ": first non-empty poll returned " + got.size() + " records, expected "
                    + n + " (one record batch): " + vals(got));
            return got;
        }
        throw new Failed(what + ": no records within " + CHECK_TIMEOUT_MS + " ms");
    }

    static List<String> vals(Collection<ConsumerRecord<String, String>> rs) {
        List<String> l = new ArrayList<>();
        for (ConsumerRecord<String, String> r : rs) l.add(r.value() + "#" + r.deliveryCount().orElse((short) -1));
        return l;
    }

    static void expectLockTimeout(KafkaShareConsumer<String, String> k, int expected, String what) {
        Optional<Integer> t = k.acquisitionLockTimeoutMs();
        require(t.isPresent() && t.get() == expected,
                what + ": acquisitionLockTimeoutMs() = " + t + ", expected " + expected);
    }

    // ------------------------------------------------------------------ 1. implicit, two consumers

    /** Two implicit-mode consumers in one group on one partition: together they receive every
     * produced record exactly once, and both receive some. Records are produced one per batch,
     * slowly, until both consumers have received at least one (and at least 100 are produced). */
    static void implicitTwoConsumers(String topic) throws Exception {
        String group = "share-implicit-" + topic;
        setGroupConfig(group, earliest());
        ConcurrentHashMap<String, AtomicInteger> seen = new ConcurrentHashMap<>();
        AtomicInteger[] perConsumer = {new AtomicInteger(), new AtomicInteger()};
        AtomicBoolean stop = new AtomicBoolean();
        AtomicReference<Throwable> err = new AtomicReference<>();
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < 2; i++) {
            final int idx = i;
            Thread t = new Thread(() -> {
                try (KafkaShareConsumer<String, String> k = consumer(group, "implicit-" + idx, false, topic,
                        "max.poll.records", "10")) {
                    while (!stop.get()) {
                        ConsumerRecords<String, String> rs = k.poll(Duration.ofMillis(100));
                        if (rs.isEmpty()) continue;
                        for (ConsumerRecord<String, String> r : rs) {
                            seen.computeIfAbsent(r.value(), x -> new AtomicInteger()).incrementAndGet();
                            perConsumer[idx].incrementAndGet();
                        }
                        // implicit mode: commitSync acknowledges (ACCEPT) everything the last poll returned
                        commitOk(k, topic, "implicit consumer " + idx);
                        Thread.sleep(20);  // leave room for the other consumer
                    }
                } catch (Throwable e) {
                    err.compareAndSet(null, e);
                }
            }, "implicit-" + idx);
            t.start();
            threads.add(t);
        }
        int produced = 0;
        try (KafkaProducer<String, String> prod = producer(null)) {
            long deadline = System.currentTimeMillis() + CHECK_TIMEOUT_MS;
            while (err.get() == null && System.currentTimeMillis() < deadline
                    && (produced < 100 || perConsumer[0].get() == 0 || perConsumer[1].get() == 0)) {
                produceEach(prod, topic, List.of("i" + produced));
                produced++;
                Thread.sleep(10);
            }
        }
        long deadline = System.currentTimeMillis() + CHECK_TIMEOUT_MS;
        while (err.get() == null && seen.size() < produced && System.currentTimeMillis() < deadline)
            Thread.sleep(50);
        Thread.sleep(1500);  // any duplicate delivery would show up here
        stop.set(true);
        for (Thread t : threads) t.join(30_000);
        if (err.get() instanceof Failed) throw (Failed) err.get();
        require(err.get() == null, "consumer thread failed: " + err.get());
        int total = perConsumer[0].get() + perConsumer[1].get();
        List<String> dups = new ArrayList<>();
        seen.forEach((v, c) -> { if (c.get() > 1) dups.add(v + "x" + c.get()); });
        require(seen.size() == produced, "received " + seen.size() + " distinct of " + produced + " produced");
        require(dups.isEmpty() && total == produced, "duplicate deliveries: " + dups);
        require(perConsumer[0].get() > 0 && perConsumer[1].get() > 0,
                "one consumer got nothing: " + perConsumer[0] + "/" + perConsumer[1]);
        System.out.println("OK implicit: two consumers received all records exactly once, duplicates=0 (produced="
                + produced + " consumerA=" + perConsumer[0] + " consumerB=" + perConsumer[1] + ")");
    }

    // ------------------------------------------------------------------ 2. explicit acks

    /** RELEASE -> redelivered with deliveryCount 2; REJECT and ACCEPT -> never again. */
    static void explicitAcks(String topic) throws Exception {
        String group = "share-explicit-" + topic;
        setGroupConfig(group, earliest());
        List<String> all = values("e", 9);
        try (KafkaProducer<String, String> prod = producer(null)) {
            produceEach(prod, topic, all);
        }
        Set<String> released = new TreeSet<>(), rejected = new TreeSet<>(), accepted = new TreeSet<>();
        try (KafkaShareConsumer<String, String> k = consumer(group, "explicit", true, topic)) {
            // acknowledge each poll's records (and commitSync) before the next poll; i%3: 0 RELEASE,
            // 1 REJECT, 2 ACCEPT on first delivery; released ones must come back with
            // deliveryCount 2 (possibly already in a later poll of this loop) and are then ACCEPTed
            Map<String, Integer> first = new TreeMap<>(), second = new TreeMap<>();
            long deadline = System.currentTimeMillis() + CHECK_TIMEOUT_MS;
            while ((first.size() < all.size() || second.size() < released.size())
                    && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> rs = k.poll(Duration.ofMillis(200));
                for (ConsumerRecord<String, String> r : rs) {
                    String v = r.value();
                    if (!first.containsKey(v)) {
                        require(dc(r) == 1, "first delivery of " + v + " has deliveryCount " + dc(r));
                        first.put(v, dc(r));
                        int i = Integer.parseInt(v.substring(1));
                        AcknowledgeType t = i % 3 == 0 ? AcknowledgeType.RELEASE
                                : i % 3 == 1 ? AcknowledgeType.REJECT : AcknowledgeType.ACCEPT;
                        (t == AcknowledgeType.RELEASE ? released : t == AcknowledgeType.REJECT ? rejected : accepted).add(v);
                        k.acknowledge(r, t);
                    } else {
                        require(released.contains(v), "record " + v + " redelivered although "
                                + (rejected.contains(v) ? "rejected" : "accepted"));
                        require(second.put(v, dc(r)) == null, "released record " + v + " redelivered twice");
                        require(dc(r) == 2, "redelivered " + v + " has deliveryCount " + dc(r) + ", expected 2");
                        k.acknowledge(r, AcknowledgeType.ACCEPT);
                    }
                }
                if (!rs.isEmpty()) commitOk(k, topic, "explicit");
            }
            require(first.keySet().equals(new TreeSet<>(all)), "first delivery got " + first.keySet());
            require(second.keySet().equals(released), "redelivered " + second.keySet() + ", released " + released);
            expectLockTimeout(k, lockMs, "explicit");
            // nothing else may come back
            deadline = System.currentTimeMillis() + 2000;
            while (System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> rs = k.poll(Duration.ofMillis(200));
                require(rs.isEmpty(), "unexpected delivery after all were acknowledged: " + vals(toList(rs)));
            }
        }
        System.out.println("OK explicit: RELEASE redelivered with deliveryCount=2, REJECT/ACCEPT not redelivered, "
                + "commitSync without errors (released=" + released + ")");
    }

    static List<ConsumerRecord<String, String>> toList(ConsumerRecords<String, String> rs) {
        List<ConsumerRecord<String, String>> l = new ArrayList<>();
        rs.forEach(l::add);
        return l;
    }

    // ------------------------------------------------------------------ 3. close without ack

    /** A consumer that closes holding unacknowledged records: they go to another consumer. */
    static void closeWithoutAck(String topic) throws Exception {
        String group = "share-close-" + topic;
        setGroupConfig(group, earliest());
        List<String> all = values("c", 5);
        produceOneBatch(topic, all);
        List<ConsumerRecord<String, String>> a;
        try (KafkaShareConsumer<String, String> ka = consumer(group, "close-a", true, topic)) {
            a = pollBatch(ka, all.size(), "consumer A");
            for (ConsumerRecord<String, String> r : a)
                require(dc(r) == 1, "A: first delivery of " + r.value() + " has deliveryCount " + dc(r));
        }  // close() with all records unacknowledged
        try (KafkaShareConsumer<String, String> kb = consumer(group, "close-b", true, topic)) {
            List<ConsumerRecord<String, String>> b = pollBatch(kb, all.size(), "consumer B after A closed");
            Set<String> bv = new TreeSet<>();
            for (ConsumerRecord<String, String> r : b) {
                require(bv.add(r.value()), "B got " + r.value() + " twice");
                // Kafka >= 4.2 (KAFKA-19972) counts the delivery to the closed member: 2, not 1
                require(dc(r) == 2, "B: " + r.value() + " released by A's close has deliveryCount " + dc(r)
                        + ", expected 2");
                kb.acknowledge(r, AcknowledgeType.ACCEPT);
            }
            require(bv.equals(new TreeSet<>(all)), "B got " + vals(b));
            commitOk(kb, topic, "consumer B");
        }
        System.out.println("OK close: records of a consumer closed without acknowledging went to another consumer "
                + "with deliveryCount=2");
    }

    // ------------------------------------------------------------------ 4. lock expiry

    /** With share.record.lock.duration.ms=2000 on the group, records held by a live consumer that
     * does not acknowledge them are redelivered to another consumer (deliveryCount 2); the late
     * ACCEPT of the first consumer then fails for that partition. */
    static void lockExpiry(String topic) throws Exception {
        String group = "share-lock-" + topic;
        int groupLockMs = 2000;
        setGroupConfig(group, earliest("share.record.lock.duration.ms", String.valueOf(groupLockMs)));
        List<String> all = values("l", 5);
        produceOneBatch(topic, all);
        try (KafkaShareConsumer<String, String> ka = consumer(group, "lock-a", true, topic);
             KafkaShareConsumer<String, String> kb = consumer(group, "lock-b", true, topic)) {
            List<ConsumerRecord<String, String>> a = pollBatch(ka, all.size(), "consumer A");
            long acquiredAt = System.currentTimeMillis();
            expectLockTimeout(ka, groupLockMs, "lock-expiry");
            for (ConsumerRecord<String, String> r : a)
                require(dc(r) == 1, "A: first delivery of " + r.value() + " has deliveryCount " + dc(r));
            List<ConsumerRecord<String, String>> b = pollBatch(kb, all.size(), "consumer B after A's locks expired");
            long after = System.currentTimeMillis() - acquiredAt;
            Set<String> bv = new TreeSet<>();
            for (ConsumerRecord<String, String> r : b) {
                require(bv.add(r.value()), "B got " + r.value() + " twice");
                require(dc(r) == 2, "B: redelivered " + r.value() + " has deliveryCount " + dc(r) + ", expected 2");
            }
            require(bv.equals(new TreeSet<>(all)), "B got " + vals(b));
            require(after >= groupLockMs - 500, "B got A's records " + after + " ms after A acquired them, lock is "
                    + groupLockMs + " ms");
            // A's acknowledgement comes too late: the records are now acquired by B
            for (ConsumerRecord<String, String> r : a) ka.acknowledge(r, AcknowledgeType.ACCEPT);
            Map<TopicIdPartition, Optional<KafkaException>> res = ka.commitSync(Duration.ofSeconds(30));
            require(res.size() == 1, "late commitSync of A returned " + res);
            Optional<KafkaException> e = res.values().iterator().next();
            require(e.isPresent() && e.get() instanceof org.apache.kafka.common.errors.InvalidRecordStateException,
                    "late ACCEPT by A (records now acquired by B) should fail with InvalidRecordStateException, got " + e);
            // B still owns them
            for (ConsumerRecord<String, String> r : b) kb.acknowledge(r, AcknowledgeType.ACCEPT);
            commitOk(kb, topic, "consumer B");
            long deadline = System.currentTimeMillis() + 1000;
            while (System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> rs = kb.poll(Duration.ofMillis(200));
                require(rs.isEmpty(), "unexpected delivery after B accepted everything: " + vals(toList(rs)));
            }
            System.out.println("OK lock-expiry: unacknowledged records redelivered to another consumer with "
                    + "deliveryCount=2 after the lock expired; late ACCEPT -> InvalidRecordStateException (B got them after "
                    + after + " ms)");
        }
    }

    // ------------------------------------------------------------------ 5. read_committed

    /** Group config share.isolation.level=read_committed hides aborted transactional records;
     * a read_uncommitted group on the same topic sees them. */
    static void readCommitted(String topic) throws Exception {
        try (KafkaProducer<String, String> prod = producer("share-txn-" + topic)) {
            prod.initTransactions();
            String[] prefixes = {"c1-", "a-", "c2-"};
            for (int round = 0; round < 3; round++) {
                prod.beginTransaction();
                for (String v : values(prefixes[round], 5)) prod.send(new ProducerRecord<>(topic, 0, null, v));
                prod.flush();
                if (round == 1) prod.abortTransaction(); else prod.commitTransaction();
            }
        }
        String rc = "share-rc-" + topic, ru = "share-ru-" + topic;
        setGroupConfig(rc, earliest("share.isolation.level", "read_committed"));
        setGroupConfig(ru, earliest());
        Set<String> committed = new TreeSet<>(values("c1-", 5));
        committed.addAll(values("c2-", 5));
        Set<String> everything = new TreeSet<>(committed);
        everything.addAll(values("a-", 5));
        // both groups read concurrently
        CompletableFuture<List<String>> fc = CompletableFuture.supplyAsync(() -> readAll(rc, topic, committed.size()));
        CompletableFuture<List<String>> fu = CompletableFuture.supplyAsync(() -> readAll(ru, topic, everything.size()));
        List<String> got, gotU;
        try {
            got = fc.get(60, TimeUnit.SECONDS);
            gotU = fu.get(60, TimeUnit.SECONDS);
        } catch (ExecutionException e) {
            if (e.getCause() instanceof Failed) throw (Failed) e.getCause();
            throw e;
        }
        require(new TreeSet<>(got).equals(committed) && got.size() == committed.size(),
                "read_committed share group got " + got);
        require(new TreeSet<>(gotU).equals(everything) && gotU.size() == everything.size(),
                "read_uncommitted share group got " + gotU);
        System.out.println("OK read_committed: share.isolation.level=read_committed delivered only the 10 committed "
                + "records, read_uncommitted all 15");
    }

    /** Implicit consumer without commitSync: each poll acknowledges (ACCEPT, and GAP for control
     * records) the previous poll's records, piggybacked on the next ShareFetch. Polls until n
     * records, then 1.5 s more to catch extras, then closes. A second consumer of the same group
     * must then get nothing: the piggybacked acknowledgements were applied. */
    static List<String> readAll(String group, String topic, int n) {
        List<String> got = new ArrayList<>();
        try (KafkaShareConsumer<String, String> k = consumer(group, group, false, topic)) {
            long deadline = System.currentTimeMillis() + CHECK_TIMEOUT_MS;
            long extraUntil = Long.MAX_VALUE;
            while (System.currentTimeMillis() < Math.min(deadline, extraUntil)) {
                for (ConsumerRecord<String, String> r : k.poll(Duration.ofMillis(200))) got.add(r.value());
                if (got.size() >= n && extraUntil == Long.MAX_VALUE) extraUntil = System.currentTimeMillis() + 1500;
            }
        }
        try (KafkaShareConsumer<String, String> k = consumer(group, group + "-again", false, topic)) {
            long until = System.currentTimeMillis() + 2500;
            while (System.currentTimeMillis() < until) {
                ConsumerRecords<String, String> rs = k.poll(Duration.ofMillis(200));
                require(rs.isEmpty(), group + ": records delivered again after the first consumer acknowledged "
                        + "them implicitly and closed: " + vals(toList(rs)));
            }
        }
        return got;
    }
}
