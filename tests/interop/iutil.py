"""Shared helpers for the interop tests (client construction, topic setup,
bounded consume loops, record normalisation)."""

import time
import uuid

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

MiB = 1024 * 1024
OP_TIMEOUT = 30.0  # seconds, for any single admin/produce/consume wait


def uniq(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def admin(broker, **extra):
    conf = {"bootstrap.servers": broker.bootstrap}
    conf.update(extra)
    return AdminClient(conf)


def wait_topic_ready(broker, topic, partitions, timeout=OP_TIMEOUT):
    """Wait until metadata shows `partitions` partitions of `topic`, each with a leader."""
    a = admin(broker)
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        md = a.list_topics(topic=topic, timeout=5)
        t = md.topics.get(topic)
        last = t
        if (t is not None and t.error is None and len(t.partitions) == partitions
                and all(p.leader >= 0 for p in t.partitions.values())):
            return
        time.sleep(0.1)
    raise AssertionError(f"topic {topic} not ready with {partitions} partitions: {last}")


def create_topic(broker, name, partitions=1, config=None, timeout=OP_TIMEOUT):
    a = admin(broker)  # keep a reference: a collected client fails its futures
    fut = a.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1,
                  config=dict(config or {}))],
        operation_timeout=timeout, request_timeout=timeout)
    fut[name].result(timeout=timeout)
    wait_topic_ready(broker, name, partitions, timeout)
    return name


def norm_headers(h):
    """Both clients: list of (str, bytes|None); confluent gives None for 'no headers'."""
    return [(k, v) for k, v in (h or [])]


# ----------------------------------------------------------------- consuming
# A consumed record is normalised to a dict:
#   partition, offset, key, value, headers, ts_type ('create'|'append'), ts


def consume_confluent(broker, topic, partitions, expected, timeout=OP_TIMEOUT, extra=None):
    """Assign all `partitions` from offset 0 (no group) and read until `expected`
    records arrived or `timeout` elapsed. Returns the records in arrival order."""
    from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, OFFSET_BEGINNING
    conf = {
        "bootstrap.servers": broker.bootstrap,
        "group.id": uniq("assign-only"),  # required by librdkafka, never joined
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "max.partition.fetch.bytes": 8 * MiB,
        "fetch.max.bytes": 16 * MiB,
        "receive.message.max.bytes": 32 * MiB,
    }
    conf.update(extra or {})
    c = Consumer(conf)
    out = []
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        deadline = time.monotonic() + timeout
        while len(out) < expected and time.monotonic() < deadline:
            for m in c.consume(num_messages=500, timeout=0.5):
                if m.error():
                    raise KafkaException(m.error())
                ts_type, ts = m.timestamp()
                out.append({
                    "partition": m.partition(), "offset": m.offset(),
                    "key": m.key(), "value": m.value(),
                    "headers": norm_headers(m.headers()),
                    "ts_type": {TIMESTAMP_CREATE_TIME: "create",
                                TIMESTAMP_LOG_APPEND_TIME: "append"}.get(ts_type, ts_type),
                    "ts": ts,
                })
    finally:
        c.close()
    return out


def kp_consumer(broker, **extra):
    from kafka import KafkaConsumer
    conf = dict(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                auto_offset_reset="earliest", max_partition_fetch_bytes=8 * MiB,
                fetch_max_bytes=16 * MiB, request_timeout_ms=30000)
    conf.update(extra)
    return KafkaConsumer(**conf)


def consume_kafka_python(broker, topic, partitions, expected, timeout=OP_TIMEOUT):
    from kafka import TopicPartition as KTP
    c = kp_consumer(broker)
    out = []
    try:
        tps = [KTP(topic, p) for p in range(partitions)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        deadline = time.monotonic() + timeout
        while len(out) < expected and time.monotonic() < deadline:
            batch = c.poll(timeout_ms=500, max_records=500)
            for tp in sorted(batch, key=lambda t: t.partition):
                for r in batch[tp]:
                    out.append({
                        "partition": r.partition, "offset": r.offset,
                        "key": r.key, "value": r.value,
                        "headers": norm_headers(r.headers),
                        "ts_type": {0: "create", 1: "append"}.get(r.timestamp_type,
                                                                   r.timestamp_type),
                        "ts": r.timestamp,
                    })
    finally:
        c.close()
    return out


def by_partition(records):
    res = {}
    for r in records:
        res.setdefault(r["partition"], []).append(r)
    return res


def end_offsets(broker, topic, partitions):
    """High watermarks via confluent get_watermark_offsets."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": uniq("wm")})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)}
    finally:
        c.close()
