// More Java KafkaShareConsumer (kafka-clients 4.x) checks run by test_java_share.py, mirroring
// test_share.py's delivery-limit, broker kill -9 and load scenarios. Compiled together with
// ShareCheck.java and reuses its helpers (ShareCheck.bs / ShareCheck.admin are set here).
//
// Usage: ShareMoreCheck <mode> <bootstrap> <args...>
//   limit   <bs> <topic>
//       group config share.delivery.count.limit=2: a record RELEASEd on every delivery is
//       delivered exactly twice (deliveryCount 1, 2), then never again; a later record arrives.
//   hold    <bs> <topic> <group> <nAccept> <nHold>
//       crash phase 1: produces nAccept records "accept-i" (several batches) and ACCEPTs them
//       (commitSync without errors), then produces nHold records "hold-i" as ONE batch and
//       holds them (first poll must return them all) without acknowledging. Prints
//       "ACCEPTED <value>" per committed record, "HOLDING <value> <deliveryCount>" per held
//       record, then "READY" and waits to be killed (the test kill -9s the broker, then us).
//   recover <bs> <topic> <group> <nHold>
//       crash phase 2 (after the broker restart): a new explicit consumer in the same group
//       ACCEPTs (commitSync) everything it gets until all nHold "hold-" values arrived, then
//       3 s more. Prints "GOT <value> <deliveryCount> <msSinceStart>" per delivery; the test
//       asserts on them.
//   load    <bs> <topic> <seconds> <consumers> <producers> <ratePerProducer>
//       `consumers` implicit share consumers (threads, one group, even ones commitSync after
//       every poll, odd ones rely on the acknowledgements piggybacked on the next ShareFetch)
//       and `producers` producers (threads, alternating partitions 0/1, rate-limited) for
//       `seconds`; then drain: every acknowledged produced record consumed exactly once with
//       deliveryCount 1, the acknowledgement commit callback confirms every (partition, offset)
//       exactly once and without error, commitSync returns no errors, no exceptions.
// Prints "OK <mode>: ..." on success; "FAIL <mode>: <why>" and exit 1 on a failed check, 2 on an
// unexpected exception, 3 when the run exceeds its time bound (watchdog).
import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;

public class ShareMoreCheck {
    static String mode = "setup";

    static void require(boolean cond, String msg) { ShareCheck.require(cond, msg); }

    static void out(String line) {
        synchronized (System.out) {
            System.out.println(line);
            System.out.flush();
        }
    }

    public static void main(String[] args) throws Exception {
        mode = args[0];
        ShareCheck.bs = args[1];
        ShareCheck.check = mode;
        long bound = mode.equals("hold") ? 120_000
                : mode.equals("load") ? (long) (Double.parseDouble(args[3]) * 1000) + 90_000 : 100_000;
        Thread watchdog = new Thread(() -> {
            try { Thread.sleep(bound); } catch (InterruptedException e) { return; }
            out("FAIL " + mode + ": whole run exceeded " + bound + " ms");
            Runtime.getRuntime().halt(3);
        });
        watchdog.setDaemon(true);
        watchdog.start();
        Properties ap = new Properties();
        ap.put("bootstrap.servers", ShareCheck.bs);
        ShareCheck.admin = Admin.create(ap);
        int rc = 0;
        try {
            long t = System.currentTimeMillis();
            switch (mode) {
                case "limit": deliveryLimit(args[2]); break;
                case "hold": hold(args[2], args[3], Integer.parseInt(args[4]), Integer.parseInt(args[5])); break;
                case "recover": recover(args[2], args[3], Integer.parseInt(args[4])); break;
                case "load": load(args[2], Double.parseDouble(args[3]), Integer.parseInt(args[4]),
                        Integer.parseInt(args[5]), Integer.parseInt(args[6])); break;
                default: throw new ShareCheck.Failed("unknown mode " + mode);
            }
            out("  (" + mode + " took " + (System.currentTimeMillis() - t) + " ms)");
        } catch (ShareCheck.Failed f) {
            out("FAIL " + mode + ": " + f.getMessage());
            rc = 1;
        } catch (Throwable t) {
            synchronized (System.out) {
                System.out.println("FAIL " + mode + ": unexpected " + t);
                t.printStackTrace(System.out);
                System.out.flush();
            }
            rc = 2;
        }
        try { ShareCheck.admin.close(Duration.ofSeconds(5)); } catch (Throwable ignored) { }
        Runtime.getRuntime().halt(rc);  // don't wait for lingering client threads
    }

    // ------------------------------------------------------------------ delivery count limit

    static void deliveryLimit(String topic) throws Exception {
        String group = "share-limit-" + topic;
        ShareCheck.setGroupConfig(group, ShareCheck.earliest("share.delivery.count.limit", "2"));
        try (KafkaProducer<String, String> prod = ShareCheck.producer(null)) {
            ShareCheck.produceEach(prod, topic, List.of("doomed"));
        }
        List<String> got = new ArrayList<>();
        try (KafkaShareConsumer<String, String> k = ShareCheck.consumer(group, "limit", true, topic);
             KafkaProducer<String, String> prod = ShareCheck.producer(null)) {
            // RELEASE "doomed" on every delivery, ACCEPT anything else
            long deadline = System.currentTimeMillis() + ShareCheck.CHECK_TIMEOUT_MS;
            boolean producedAfter = false;
            long quietUntil = Long.MAX_VALUE;
            while (System.currentTimeMillis() < Math.min(deadline, quietUntil)) {
                ConsumerRecords<String, String> rs = k.poll(Duration.ofMillis(200));
                for (ConsumerRecord<String, String> r : rs) {
                    got.add(r.value() + "#" + ShareCheck.dc(r));
                    k.acknowledge(r, r.value().equals("doomed") ? AcknowledgeType.RELEASE : AcknowledgeType.ACCEPT);
                }
                if (!rs.isEmpty()) ShareCheck.commitOk(k, topic, "limit");
                if (!producedAfter && got.size() >= 2) {
                    // the second RELEASE hit the limit: "doomed" is archived; a later record still flows
                    ShareCheck.produceEach(prod, topic, List.of("after"));
                    producedAfter = true;
                }
                if (got.contains("after#1") && quietUntil == Long.MAX_VALUE)
                    quietUntil = System.currentTimeMillis() + 3000;  // "doomed" must not come back
                require(got.size() <= 3, "deliveries: " + got);
            }
        }
        require(got.equals(List.of("doomed#1", "doomed#2", "after#1")),
                "expected deliveries [doomed#1, doomed#2, after#1] (value#deliveryCount), got " + got);
        out("OK limit: share.delivery.count.limit=2 delivered a record released every time exactly twice "
                + "(deliveryCount 1, 2), then never again; a later record arrived: " + got);
    }

    // ------------------------------------------------------------------ broker kill -9, phase 1

    static void hold(String topic, String group, int nAccept, int nHold) throws Exception {
        ShareCheck.setGroupConfig(group, ShareCheck.earliest());
        List<String> accepts = ShareCheck.values("accept-", nAccept);
        int chunk = Math.max(1, nAccept / 5);
        for (int i = 0; i < nAccept; i += chunk)
            ShareCheck.produceOneBatch(topic, accepts.subList(i, Math.min(nAccept, i + chunk)));
        try (KafkaShareConsumer<String, String> k = ShareCheck.consumer(group, "hold", true, topic)) {
            Set<String> done = new TreeSet<>();
            long deadline = System.currentTimeMillis() + ShareCheck.CHECK_TIMEOUT_MS;
            while (done.size() < nAccept && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> rs = k.poll(Duration.ofMillis(200));
                if (rs.isEmpty()) continue;
                List<String> batch = new ArrayList<>();
                for (ConsumerRecord<String, String> r : rs) {
                    require(r.value().startsWith("accept-"), "unexpected record " + r.value());
                    require(ShareCheck.dc(r) == 1, "first delivery of " + r.value() + " has deliveryCount " + ShareCheck.dc(r));
                    k.acknowledge(r, AcknowledgeType.ACCEPT);
                    batch.add(r.value());
                }
                ShareCheck.commitOk(k, topic, "hold: accept");  // confirmed by the broker
                for (String v : batch) {
                    require(done.add(v), "accepted " + v + " delivered twice");
                    out("ACCEPTED " + v);
                }
            }
            require(done.size() == nAccept, "accepted only " + done.size() + " of " + nAccept + " within "
                    + ShareCheck.CHECK_TIMEOUT_MS + " ms");
            ShareCheck.produceOneBatch(topic, ShareCheck.values("hold-", nHold));
            List<ConsumerRecord<String, String>> held = ShareCheck.pollBatch(k, nHold, "hold: held batch");
            for (ConsumerRecord<String, String> r : held) out("HOLDING " + r.value() + " " + ShareCheck.dc(r));
            out("READY");
            Thread.sleep(115_000);  // killed by the test long before this
        }
    }

    // ------------------------------------------------------------------ broker kill -9, phase 2

    static void recover(String topic, String group, int nHold) throws Exception {
        long start = System.currentTimeMillis();
        Set<String> holds = new HashSet<>();
        int n = 0;
        try (KafkaShareConsumer<String, String> k = ShareCheck.consumer(group, "recover", true, topic)) {
            long deadline = start + 60_000, quietUntil = Long.MAX_VALUE;
            while (System.currentTimeMillis() < Math.min(deadline, quietUntil)) {
                ConsumerRecords<String, String> rs = k.poll(Duration.ofMillis(200));
                long at = System.currentTimeMillis() - start;
                for (ConsumerRecord<String, String> r : rs) {
                    out("GOT " + r.value() + " " + ShareCheck.dc(r) + " " + at);
                    if (r.value().startsWith("hold-")) holds.add(r.value());
                    k.acknowledge(r, AcknowledgeType.ACCEPT);
                    n++;
                }
                if (!rs.isEmpty()) ShareCheck.commitOk(k, topic, "recover");
                if (holds.size() >= nHold && quietUntil == Long.MAX_VALUE)
                    quietUntil = System.currentTimeMillis() + 3000;  // duplicates / accepted ones would show up
            }
        }
        out("OK recover: " + n + " deliveries, " + holds.size() + " distinct held records of " + nHold);
    }

    // ------------------------------------------------------------------ load

    static void load(String topic, double seconds, int nConsumers, int nProducers, int rate) throws Exception {
        String group = "share-load-" + topic;
        ShareCheck.setGroupConfig(group, ShareCheck.earliest());
        AtomicBoolean stopConsumers = new AtomicBoolean();
        AtomicReference<Throwable> err = new AtomicReference<>();
        ConcurrentHashMap<String, AtomicInteger> seen = new ConcurrentHashMap<>();
        ConcurrentHashMap<String, AtomicInteger> acked = new ConcurrentHashMap<>();  // "p:offset" -> times
        AtomicInteger received = new AtomicInteger(), badDc = new AtomicInteger();
        List<String> ackErrors = Collections.synchronizedList(new ArrayList<>());
        int[] perConsumer = new int[nConsumers];
        List<Thread> consumers = new ArrayList<>();
        for (int i = 0; i < nConsumers; i++) {
            final int idx = i;
            Thread t = new Thread(() -> {
                try (KafkaShareConsumer<String, String> k = ShareCheck.consumer(group, "load-" + idx, false, topic)) {
                    k.setAcknowledgementCommitCallback((offsets, e) -> {
                        for (Map.Entry<TopicIdPartition, Set<Long>> en : offsets.entrySet()) {
                            if (e != null) {
                                ackErrors.add("load-" + idx + " " + en.getKey() + " " + en.getValue().size()
                                        + " offsets: " + e);
                                continue;
                            }
                            for (long o : en.getValue())
                                acked.computeIfAbsent(en.getKey().partition() + ":" + o, x -> new AtomicInteger())
                                        .incrementAndGet();
                        }
                    });
                    while (!stopConsumers.get()) {
                        ConsumerRecords<String, String> rs = k.poll(Duration.ofMillis(100));
                        for (ConsumerRecord<String, String> r : rs) {
                            seen.computeIfAbsent(r.value(), x -> new AtomicInteger()).incrementAndGet();
                            if (ShareCheck.dc(r) != 1) badDc.incrementAndGet();
                            perConsumer[idx]++;
                            received.incrementAndGet();
                        }
                        if (!rs.isEmpty() && idx % 2 == 0) commitAllOk(k, "load-" + idx);
                    }
                    commitAllOk(k, "load-" + idx + " final");  // implicit: ACCEPTs the last poll's records
                } catch (Throwable e) {
                    err.compareAndSet(null, new RuntimeException("consumer load-" + idx + ": " + e, e));
                }
            }, "load-" + idx);
            t.start();
            consumers.add(t);
        }
        Set<String> produced = ConcurrentHashMap.newKeySet();
        List<String> produceErrors = Collections.synchronizedList(new ArrayList<>());
        long stopAt = System.currentTimeMillis() + (long) (seconds * 1000);
        List<Thread> producers = new ArrayList<>();
        for (int i = 0; i < nProducers; i++) {
            final int pid = i;
            Thread t = new Thread(() -> {
                try (KafkaProducer<String, String> prod = ShareCheck.producer(null, 5)) {
                    long begin = System.currentTimeMillis();
                    int seq = 0;
                    while (System.currentTimeMillis() < stopAt) {
                        long due = (System.currentTimeMillis() - begin) * rate / 1000;
                        for (; seq < due; seq++) {
                            String v = "p" + pid + "-" + seq;
                            prod.send(new ProducerRecord<>(topic, seq % 2, null, v), (md, e) -> {
                                if (e == null) produced.add(v); else produceErrors.add(v + ": " + e);
                            });
                        }
                        Thread.sleep(10);
                    }
                    prod.flush();
                } catch (Throwable e) {
                    err.compareAndSet(null, new RuntimeException("producer " + pid + ": " + e, e));
                }
            }, "producer-" + i);
            t.start();
            producers.add(t);
        }
        for (Thread t : producers) t.join((long) (seconds * 1000) + 30_000);
        for (Thread t : producers) require(!t.isAlive(), "producer " + t.getName() + " hung");
        require(produceErrors.isEmpty(), produceErrors.size() + " produce errors, e.g. " + first(produceErrors));
        int n = produced.size();
        long drainStart = System.currentTimeMillis();
        long deadline = drainStart + 30_000;
        while (err.get() == null && seen.size() < n && System.currentTimeMillis() < deadline) Thread.sleep(50);
        long drain = System.currentTimeMillis() - drainStart;
        Thread.sleep(2000);  // any duplicate delivery would show up here
        stopConsumers.set(true);
        for (Thread t : consumers) t.join(45_000);
        for (Thread t : consumers) require(!t.isAlive(), "consumer " + t.getName() + " did not stop");
        if (err.get() != null) throw new ShareCheck.Failed("exception: " + err.get());
        require(ackErrors.isEmpty(), ackErrors.size() + " acknowledgement commit callback errors, e.g. "
                + first(ackErrors));
        List<String> dups = new ArrayList<>();
        seen.forEach((v, c) -> { if (c.get() > 1) dups.add(v + "x" + c.get()); });
        Set<String> missing = new TreeSet<>(produced);
        missing.removeAll(seen.keySet());
        Set<String> extra = new TreeSet<>(seen.keySet());
        extra.removeAll(produced);
        require(missing.isEmpty(), missing.size() + " of " + n + " produced records never consumed (drain waited "
                + drain + " ms), e.g. " + first(missing));
        require(extra.isEmpty(), "consumed records that were not produced: " + first(extra));
        require(dups.isEmpty(), dups.size() + " records delivered more than once, e.g. " + first(dups));
        require(received.get() == n, "received " + received.get() + " deliveries of " + n + " records");
        require(badDc.get() == 0, badDc.get() + " deliveries with deliveryCount != 1");
        List<String> ackDups = new ArrayList<>();
        acked.forEach((o, c) -> { if (c.get() > 1) ackDups.add(o + "x" + c.get()); });
        require(ackDups.isEmpty(), "offsets acknowledged more than once (callback): " + first(ackDups));
        require(acked.size() == n, "acknowledgement commit callback confirmed " + acked.size() + " offsets, "
                + n + " records consumed");
        int min = Arrays.stream(perConsumer).min().getAsInt();
        require(min > 0, "a consumer got nothing: " + Arrays.toString(perConsumer));
        out("OK load: " + nConsumers + " consumers x " + nProducers + " producers for " + seconds + " s: " + n
                + " records, each consumed and acknowledged exactly once, drained " + drain
                + " ms after the producers stopped, per consumer " + Arrays.toString(perConsumer));
    }

    static String first(Collection<String> c) {
        List<String> l;
        synchronized (c) { l = new ArrayList<>(c); }
        return l.subList(0, Math.min(10, l.size())).toString();
    }

    /** commitSync must not report an error for any partition. */
    static void commitAllOk(KafkaShareConsumer<String, String> k, String what) {
        Map<TopicIdPartition, Optional<KafkaException>> res = k.commitSync(Duration.ofSeconds(30));
        for (Map.Entry<TopicIdPartition, Optional<KafkaException>> e : res.entrySet())
            require(e.getValue().isEmpty(), what + ": commitSync error on " + e.getKey() + ": " + e.getValue().orElse(null));
    }
}
