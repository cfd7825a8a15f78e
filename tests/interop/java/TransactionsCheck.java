// Java client check run by test_java_client.py: a transactional KafkaProducer (kafka-clients 4.x,
// which uses transaction version 2 when the broker finalizes it) commits two transactions and
// aborts two; a read_committed KafkaConsumer in a group must see exactly the committed records.
// Usage: TransactionsCheck <bootstrap> <topic>; exits 1 on a mismatch.
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.*;

public class TransactionsCheck {
    public static void main(String[] args) throws Exception {
        String bs = args[0], topic = args[1];
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
        Properties c = new Properties();
        c.put("bootstrap.servers", bs);
        c.put("group.id", "java-reader-" + topic);
        c.put("isolation.level", "read_committed");
        c.put("auto.offset.reset", "earliest");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
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
}
