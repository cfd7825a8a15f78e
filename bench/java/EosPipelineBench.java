// What a Kafka user runs for exactly-once today (issue 12, 5b): a consumer-group pipeline with
// the Java client (kafka-clients 4.x). K worker threads in one JVM, each with a KafkaConsumer
// (group GROUP, read_committed, no auto-commit) and a transactional KafkaProducer; each reads
// topic `in`, writes every record's value to topic `out` (same partition) and commits its
// output with the input offsets (sendOffsetsToTransaction) every N records, or when a poll
// comes back empty. The shape of crates/client/examples/exactly_once_pipeline.rs, on a
// consumer group instead of a share group.
//
//   java -cp '<kafka libs>/*:<classes>' EosPipelineBench BOOTSTRAP PARTITIONS WORKERS N RECORDS SIZE ID MAX_SECONDS
//
// 1. creates `in` and `out` with PARTITIONS partitions (AdminClient), fills `in` with RECORDS
//    records of SIZE bytes (idempotent producer, acks=all), round-robin over the partitions;
// 2. starts the K workers together and times them from before their clients are created
//    (so joining the group and initTransactions are in it, as the Rust pipeline's time
//    includes its start-up) to the commit that brings the committed total to RECORDS;
// 3. reads `out` back with a read_committed consumer and counts what is there.
// Prints one JSON line: records, seconds, records_per_s, p50_ms / p99_ms of the commits
// (sendOffsetsToTransaction + commitTransaction, as the Rust pipeline times its send of
// acknowledgements + commit), commits, rebalances, output_records (must equal records).

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class EosPipelineBench {
    static final String IN = "in";
    static final String OUT = "out";
    static final String GROUP = "eos-bench";

    public static void main(String[] a) throws Exception {
        String bootstrap = a[0];
        int partitions = Integer.parseInt(a[1]);
        int workers = Integer.parseInt(a[2]);
        int perTxn = Integer.parseInt(a[3]);
        long records = Long.parseLong(a[4]);
        int size = Integer.parseInt(a[5]);
        String id = a[6];
        double maxSeconds = Double.parseDouble(a[7]);

        createTopics(bootstrap, partitions);
        long fillStart = System.nanoTime();
        fill(bootstrap, partitions, records, size);
        System.err.printf("filled %d records in %.1f s%n", records, (System.nanoTime() - fillStart) / 1e9);

        AtomicLong committed = new AtomicLong();
        AtomicLong rebalances = new AtomicLong();
        AtomicLong endNanos = new AtomicLong();
        AtomicReference<Throwable> failure = new AtomicReference<>();
        List<List<Double>> latencies = Collections.synchronizedList(new ArrayList<>());
        CyclicBarrier barrier = new CyclicBarrier(workers + 1);
        long deadline = System.nanoTime() + (long) (maxSeconds * 1e9);
        List<Thread> threads = new ArrayList<>();
        for (int w = 0; w < workers; w++) {
            Worker worker = new Worker(bootstrap, id + "-" + w, perTxn, records, deadline, committed,
                    rebalances, endNanos);
            Thread t = new Thread(() -> {
                try {
                    barrier.await();
                    worker.run();
                } catch (Throwable e) {
                    failure.compareAndSet(null, e);
                } finally {
                    latencies.add(worker.latMs);
                }
            });
            t.start();
            threads.add(t);
        }
        barrier.await();
        long start = System.nanoTime();
        for (Thread t : threads) {
            t.join();
        }
        if (failure.get() != null) {
            throw new RuntimeException("a worker failed", failure.get());
        }
        boolean truncated = committed.get() < records;
        long end = truncated ? System.nanoTime() : endNanos.get();
        List<Double> all = new ArrayList<>();
        latencies.forEach(all::addAll);
        Collections.sort(all);
        long output = countOutput(bootstrap);
        double secs = (end - start) / 1e9;
        System.out.printf("{\"records\": %d, \"seconds\": %.3f, \"records_per_s\": %.0f, \"p50_ms\": %.2f, "
                        + "\"p99_ms\": %.2f, \"commits\": %d, \"rebalances\": %d, \"output_records\": %d, "
                        + "\"truncated\": %b}%n",
                committed.get(), secs, committed.get() / secs, pct(all, 0.50), pct(all, 0.99), all.size(),
                rebalances.get(), output, truncated);
    }

    static double pct(List<Double> sorted, double p) {
        if (sorted.isEmpty()) {
            return 0;
        }
        return sorted.get(Math.min(sorted.size() - 1, (int) (sorted.size() * p)));
    }

    static void createTopics(String bootstrap, int partitions) throws Exception {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(p)) {
            for (String topic : List.of(IN, OUT)) {
                try {
                    admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get();
                } catch (ExecutionException e) {
                    if (!(e.getCause() instanceof TopicExistsException)) {
                        throw e;
                    }
                }
            }
        }
    }

    static void fill(String bootstrap, int partitions, long records, int size) throws Exception {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.BATCH_SIZE_CONFIG, "1000000");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            for (long i = 0; i < records; i++) {
                byte[] value = new byte[size];
                byte[] n = Long.toString(i).getBytes();
                System.arraycopy(n, 0, value, 0, Math.min(n.length, size));
                producer.send(new ProducerRecord<>(IN, (int) (i % partitions), null, value));
            }
            producer.flush();
        }
    }

    static long countOutput(String bootstrap) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            List<TopicPartition> tps = new ArrayList<>();
            c.partitionsFor(OUT).forEach(i -> tps.add(new TopicPartition(OUT, i.partition())));
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> end = c.endOffsets(tps); // the last stable offsets
            long count = 0;
            long idle = System.nanoTime();
            while (tps.stream().anyMatch(tp -> c.position(tp) < end.get(tp))) {
                ConsumerRecords<byte[], byte[]> got = c.poll(Duration.ofMillis(500));
                count += got.count();
                if (got.count() > 0) {
                    idle = System.nanoTime();
                } else if (System.nanoTime() - idle > 30_000_000_000L) {
                    break;
                }
            }
            return count;
        }
    }

    static final class Worker implements ConsumerRebalanceListener {
        final String bootstrap;
        final String transactionalId;
        final int perTxn;
        final long target;
        final long deadline;
        final AtomicLong committed;
        final AtomicLong rebalances;
        final AtomicLong endNanos;
        final List<Double> latMs = new ArrayList<>();
        KafkaConsumer<byte[], byte[]> consumer;
        KafkaProducer<byte[], byte[]> producer;
        final Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
        int open; // records in the open transaction

        Worker(String bootstrap, String transactionalId, int perTxn, long target, long deadline,
               AtomicLong committed, AtomicLong rebalances, AtomicLong endNanos) {
            this.bootstrap = bootstrap;
            this.transactionalId = transactionalId;
            this.perTxn = perTxn;
            this.target = target;
            this.deadline = deadline;
            this.committed = committed;
            this.rebalances = rebalances;
            this.endNanos = endNanos;
        }

        void run() {
            Properties c = new Properties();
            c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            c.put(ConsumerConfig.GROUP_ID_CONFIG, GROUP);
            c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
            c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
            c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            c.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, Integer.toString(Math.min(perTxn, 500)));
            c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
            c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
            Properties p = new Properties();
            p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
            p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
            p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
            p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
            producer = new KafkaProducer<>(p);
            consumer = new KafkaConsumer<>(c);
            try {
                producer.initTransactions();
                consumer.subscribe(List.of(IN), this);
                while (committed.get() < target && System.nanoTime() < deadline) {
                    ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(500));
                    if (records.isEmpty()) {
                        finish();
                        continue;
                    }
                    for (ConsumerRecord<byte[], byte[]> r : records) {
                        if (open >= perTxn) {
                            finish();
                        }
                        if (open == 0) {
                            producer.beginTransaction();
                        }
                        producer.send(new ProducerRecord<>(OUT, r.partition(), r.key(), r.value()));
                        offsets.put(new TopicPartition(r.topic(), r.partition()),
                                new OffsetAndMetadata(r.offset() + 1));
                        open++;
                    }
                }
            } finally {
                consumer.close();
                producer.close();
            }
        }

        /** Commits the open transaction's output with its input offsets. */
        void finish() {
            if (open == 0) {
                return;
            }
            long t = System.nanoTime();
            producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
            producer.commitTransaction();
            long now = System.nanoTime();
            latMs.add((now - t) / 1e6);
            if (committed.addAndGet(open) >= target) {
                endNanos.compareAndSet(0, now);
            }
            offsets.clear();
            open = 0;
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            // Eager rebalance: what this member read of them must be committed while it still
            // belongs to this generation (what the proposal's pipelines avoid needing).
            rebalances.incrementAndGet();
            finish();
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
        }
    }
}
