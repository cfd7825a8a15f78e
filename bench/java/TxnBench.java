// The transactions phase of bench/kbench.py with the Java client (kafka-clients 4.x):
// K producer threads in one JVM, each with its own KafkaProducer, started together.
//
//   java -cp '<kafka libs>/*:<classes>' TxnBench BOOTSTRAP TOPIC PARTITIONS MODE RECORDS N K SIZE ID_PREFIX MAX_SECONDS
//
// MODE plain: non-transactional, idempotence off, RECORDS records round-robin to the partitions,
//             then flush(); timed from the first send to the last acknowledgement.
// MODE flush: the same, calling flush() after every N records (p50/p99 = flush()).
// MODE txn:   transactional.id ID_PREFIX-<thread>; beginTransaction, N sends, commitTransaction
//             until RECORDS (p50/p99 = commitTransaction()), stopped after MAX_SECONDS.
// Each thread does RECORDS / K records after an untimed warm-up (3 x N records; for txn, 3
// transactions). Prints one JSON line: records, seconds, records_per_s, p50_ms, p99_ms, ...
// The producers use acks=all, linger.ms=5, batch.size=1000000, like the Python harness.

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class TxnBench {
    static final class Result {
        long records;
        long txns;
        long startNanos;
        long endNanos;
        boolean truncated;
        final List<Double> latMs = new ArrayList<>();
    }

    public static void main(String[] a) throws Exception {
        String bootstrap = a[0];
        String topic = a[1];
        int partitions = Integer.parseInt(a[2]);
        String mode = a[3];
        long records = Long.parseLong(a[4]);
        int n = Integer.parseInt(a[5]);
        int k = Integer.parseInt(a[6]);
        int size = Integer.parseInt(a[7]);
        String idPrefix = a[8];
        double maxSeconds = Double.parseDouble(a[9]);
        if (!mode.equals("plain") && !mode.equals("flush") && !mode.equals("txn")) {
            throw new IllegalArgumentException("mode: plain, flush or txn");
        }
        CyclicBarrier barrier = new CyclicBarrier(k);
        long share = Math.max(n, records / k);
        List<Result> results = Collections.synchronizedList(new ArrayList<>());
        AtomicReference<Throwable> failure = new AtomicReference<>();
        List<Thread> threads = new ArrayList<>();
        for (int w = 0; w < k; w++) {
            final int worker = w;
            Thread t = new Thread(() -> {
                try {
                    results.add(run(bootstrap, topic, partitions, mode, share, n, size,
                            idPrefix + "-" + worker, maxSeconds, barrier));
                } catch (Throwable e) {
                    failure.compareAndSet(null, e);
                    barrier.reset();
                }
            });
            threads.add(t);
            t.start();
        }
        for (Thread t : threads) {
            t.join();
        }
        if (failure.get() != null) {
            failure.get().printStackTrace();
            System.exit(1);
        }
        long start = Long.MAX_VALUE, end = Long.MIN_VALUE, done = 0, txns = 0;
        boolean truncated = false;
        List<Double> lat = new ArrayList<>();
        for (Result r : results) {
            start = Math.min(start, r.startNanos);
            end = Math.max(end, r.endNanos);
            done += r.records;
            txns += r.txns;
            truncated |= r.truncated;
            lat.addAll(r.latMs);
        }
        Collections.sort(lat);
        double secs = (end - start) / 1e9;
        StringBuilder json = new StringBuilder("{");
        json.append("\"mode\": \"").append(mode).append("\"");
        json.append(", \"records\": ").append(done);
        json.append(", \"txns\": ").append(txns);
        json.append(", \"seconds\": ").append(String.format("%.3f", secs));
        json.append(", \"records_per_s\": ").append(Math.round(done / secs));
        json.append(", \"mb_per_s\": ").append(String.format("%.1f", done * (double) size / secs / 1e6));
        json.append(", \"truncated\": ").append(truncated);
        if (!lat.isEmpty()) {
            double sum = 0;
            for (double v : lat) {
                sum += v;
            }
            json.append(", \"p50_ms\": ").append(String.format("%.2f", pct(lat, 0.50)));
            json.append(", \"p99_ms\": ").append(String.format("%.2f", pct(lat, 0.99)));
            json.append(", \"max_ms\": ").append(String.format("%.2f", lat.get(lat.size() - 1)));
            json.append(", \"mean_ms\": ").append(String.format("%.2f", sum / lat.size()));
        }
        json.append("}");
        System.out.println(json);
    }

    static double pct(List<Double> sorted, double q) {
        int i = (int) Math.min(sorted.size() - 1, Math.floor(q * sorted.size()));
        return sorted.get(i);
    }

    static Result run(String bootstrap, String topic, int partitions, String mode, long records,
                      int n, int size, String txnId, double maxSeconds, CyclicBarrier barrier)
            throws Exception {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.BATCH_SIZE_CONFIG, "1000000");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        boolean txn = mode.equals("txn");
        if (txn) {
            p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
            p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "60000");
        } else {
            p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "false");
        }
        byte[] value = new byte[size];
        for (int i = 0; i < size; i++) {
            value[i] = (byte) ('a' + i % 26);
        }
        Result r = new Result();
        AtomicReference<Exception> sendError = new AtomicReference<>();
        try (Producer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            if (txn) {
                producer.initTransactions();
            }
            for (int t = 0; t < 3; t++) {  // untimed: connections, coordinator, first adds
                if (txn) {
                    producer.beginTransaction();
                }
                for (int i = 0; i < n; i++) {
                    producer.send(new ProducerRecord<>(topic, i % partitions, null, value));
                }
                if (txn) {
                    producer.commitTransaction();
                } else {
                    producer.flush();
                }
            }
            barrier.await();
            long deadline = System.nanoTime() + (long) (maxSeconds * 1e9);
            r.startNanos = System.nanoTime();
            long k = 0;
            if (txn) {
                long txns = records / n;
                for (long t = 0; t < txns; t++) {
                    producer.beginTransaction();
                    for (int i = 0; i < n; i++, k++) {
                        producer.send(new ProducerRecord<>(topic, (int) (k % partitions), null, value));
                    }
                    long c = System.nanoTime();
                    producer.commitTransaction();
                    r.latMs.add((System.nanoTime() - c) / 1e6);
                    r.txns++;
                    r.records += n;
                    if (System.nanoTime() > deadline && t + 1 < txns) {
                        r.truncated = true;
                        break;
                    }
                }
            } else {
                boolean flushEvery = mode.equals("flush");
                for (; k < records; k++) {
                    producer.send(new ProducerRecord<>(topic, (int) (k % partitions), null, value),
                            (md, e) -> {
                                if (e != null) {
                                    sendError.compareAndSet(null, e);
                                }
                            });
                    if (flushEvery && (k + 1) % n == 0) {
                        long f = System.nanoTime();
                        producer.flush();
                        r.latMs.add((System.nanoTime() - f) / 1e6);
                    }
                }
                producer.flush();
                r.records = records;
            }
            r.endNanos = System.nanoTime();
        }
        if (sendError.get() != null) {
            throw sendError.get();
        }
        return r;
    }
}
