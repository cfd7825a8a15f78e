// Java client check run by test_java_client.py: a transactional KafkaProducer (kafka-clients 4.x,
// which uses transaction version 2 when the broker finalizes it) commits two transactions and
// aborts two; a read_committed KafkaConsumer in a group must see exactly the committed records.
// Usage: TransactionsCheck <bootstrap> <topic>; exits 1 on a mismatch.
// TransactionsCheck <bootstrap> <topic> back-to-back <txns> <records> <bytes>: two producers
// each run <txns> transactions of <records> records of about <bytes> bytes across the topic's
// partitions with no pause between them (every
// 4th aborted), so each next transaction starts while the last one's markers may still be on
// their way; then the read_committed consumer must see exactly the committed records.
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.*;

public class TransactionsCheck {
    public static void main(String[] args) throws Exception {
        String bs = args[0], topic = args[1];
        if (args.length > 2 && args[2].equals("back-to-back")) {
            backToBack(bs, topic, Integer.parseInt(args[3]), Integer.parseInt(args[4]),
                    Integer.parseInt(args[5]));
            return;
        }
        Properties p = new Properties();
        p.put("bootstrap.servers", bs);
        p.put("transactional.id", "java-" + topic);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        int committed = 0;
        try (KafkaProducer<String, String> prod = new KafkaProducer<>(p)) {
            prod.initTransactions();
            for (int round = 0; round < 4; round++) {
                prod.beginTransaction();
                for (int i = 0; i < 10; i++) prod.send(new ProducerRecord<>(topic, "r" + round + "-" + i));
                prod.flush();
                if (round % 2 == 0) { prod.commitTransaction(); committed += 10; } else prod.abortTransaction();
            }
        }
        Properties c = readCommitted(bs, "java-reader-" + topic);
        int seen = 0;
        try (KafkaConsumer<String, String> cons = new KafkaConsumer<>(c)) {
            cons.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 30000;
            while (seen < committed && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : cons.poll(Duration.ofMillis(500))) {
                    if (!r.value().startsWith("r0") && !r.value().startsWith("r2")) throw new IllegalStateException("aborted record visible: " + r.value());
                    seen++;
                }
            }
            Thread.sleep(1000);
            seen += cons.poll(Duration.ofMillis(500)).count();
        }
        System.out.println("committed=" + committed + " seen=" + seen);
        if (seen != committed) System.exit(1);
    }

    /** A read_committed group consumer's properties, reading from the earliest offset. */
    static Properties readCommitted(String bs, String group) {
        Properties c = new Properties();
        c.put("bootstrap.servers", bs);
        c.put("group.id", group);
        c.put("isolation.level", "read_committed");
        c.put("auto.offset.reset", "earliest");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        return c;
    }

    static void backToBack(String bs, String topic, int txns, int perTxn, int bytes) throws Exception {
        final String pad = "x".repeat(Math.max(0, bytes - 16));
        int[] committed = new int[2];
        Throwable[] failed = new Throwable[2];
        Thread[] threads = new Thread[2];
        for (int w = 0; w < 2; w++) {
            final int worker = w;
            threads[w] = new Thread(() -> {
                Properties p = new Properties();
                p.put("bootstrap.servers", bs);
                p.put("transactional.id", "java-b2b-" + worker + "-" + topic);
                p.put("linger.ms", "5");
                p.put("key.serializer", StringSerializer.class.getName());
                p.put("value.serializer", StringSerializer.class.getName());
                try (KafkaProducer<String, String> prod = new KafkaProducer<>(p)) {
                    prod.initTransactions();
                    for (int t = 0; t < txns; t++) {
                        boolean commit = t % 4 != 3;
                        prod.beginTransaction();
                        for (int i = 0; i < perTxn; i++) {
                            prod.send(new ProducerRecord<>(topic, (commit ? "c" : "a") + worker + "-" + t + "-" + i + "|" + pad));
                        }
                        if (commit) { prod.commitTransaction(); committed[worker] += perTxn; } else prod.abortTransaction();
                    }
                } catch (Throwable e) {
                    failed[worker] = e;
                }
            });
            threads[w].start();
        }
        for (Thread t : threads) t.join();
        for (Throwable e : failed) {
            if (e != null) {
                System.out.println("producer failed: " + e);
                System.exit(1);
            }
        }
        int want = committed[0] + committed[1];
        Properties c = readCommitted(bs, "java-b2b-reader-" + topic);
        Set<String> seen = new HashSet<>();
        int dups = 0;
        try (KafkaConsumer<String, String> cons = new KafkaConsumer<>(c)) {
            cons.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 60000;
            long quietSince = -1;
            while (System.currentTimeMillis() < deadline) {
                int got = 0;
                for (ConsumerRecord<String, String> r : cons.poll(Duration.ofMillis(500))) {
                    got++;
                    if (!r.value().startsWith("c")) throw new IllegalStateException("aborted record visible: " + r.value());
                    if (!seen.add(r.value())) dups++;
                }
                if (seen.size() >= want) {
                    if (got == 0 && quietSince < 0) quietSince = System.currentTimeMillis();
                    if (quietSince >= 0 && System.currentTimeMillis() - quietSince > 1000) break;
                }
            }
        }
        System.out.println("back-to-back committed=" + want + " seen=" + seen.size() + " duplicates=" + dups);
        if (seen.size() != want || dups != 0) System.exit(1);
    }
}
