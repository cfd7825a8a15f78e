// Java client producer run by test_rust_client.py: keys key-0 .. key-<n-1> sent with the Java
// client's default partitioner (murmur2 of the key), values java-I, header src=java and
// timestamp <ts0>+I; prints "ack <key> <partition> <offset>" per record.
// Usage: KeyedProduce <bootstrap> <topic> <n> <ts0>
import java.nio.charset.StandardCharsets;
import java.util.*;
import java.util.concurrent.Future;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.serialization.*;

public class KeyedProduce {
    public static void main(String[] args) throws Exception {
        String bs = args[0], topic = args[1];
        int n = Integer.parseInt(args[2]);
        long ts0 = Long.parseLong(args[3]);
        Properties p = new Properties();
        p.put("bootstrap.servers", bs);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("linger.ms", "5");
        try (KafkaProducer<String, String> prod = new KafkaProducer<>(p)) {
            List<Future<RecordMetadata>> acks = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                ProducerRecord<String, String> r =
                        new ProducerRecord<>(topic, null, ts0 + i, "key-" + i, "java-" + i);
                r.headers().add("src", "java".getBytes(StandardCharsets.UTF_8));
                acks.add(prod.send(r));
            }
            for (int i = 0; i < n; i++) {
                RecordMetadata m = acks.get(i).get();
                System.out.println("ack key-" + i + " " + m.partition() + " " + m.offset());
            }
        }
    }
}
