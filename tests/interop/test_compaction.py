"""Log compaction (cleanup.policy=compact) as clients see it.

A compacted topic with segments rolled by time (segment.ms) and
min.cleanable.dirty.ratio 0.01, the broker's cleaner polling every 100 ms
(log.cleaner.backoff.ms): keyed records written in rounds, lz4-compressed,
some of the last round tombstones. Checked, while the cleaner works and after:
a consumer from the beginning (confluent-kafka, then kafka-python) sees every
record at the offset it was acknowledged at, offsets increasing, and the latest
value of every key; within a bounded wait the topic is compacted down to one
record per key plus the active segment's."""

import time

from confluent_kafka import Producer

from iutil import consume_confluent, consume_kafka_python, create_topic, end_offsets, uniq

BROKER_CONFIG = {"log.cleaner.backoff.ms": "100"}

KEYS = 20
ROUNDS = 6
SEGMENT_MS = 100
COMPACTION_TIMEOUT = 90.0  # seconds


def produce_rounds(broker, topic):
    """Writes ROUNDS rounds of KEYS keys, one segment each (rolled by segment.ms), then one
    record so that the last round is not in the active segment. Returns {offset: (key, value)}
    as acknowledged."""
    acked = {}

    def on_delivery(err, msg):
        assert err is None, err
        acked[msg.offset()] = (msg.key(), msg.value())

    p = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "lz4",
                  "linger.ms": 5, "acks": "all"})
    for r in range(ROUNDS):
        for k in range(KEYS):
            value = None if (r == ROUNDS - 1 and k % 5 == 0) else f"r{r}-k{k}".encode()
            p.produce(topic, key=f"k{k}".encode(), value=value, on_delivery=on_delivery)
        assert p.flush(30) == 0
        time.sleep(3 * SEGMENT_MS / 1000)  # the next append rolls the segment
    p.produce(topic, key=b"last", value=b"x", on_delivery=on_delivery)
    assert p.flush(30) == 0
    assert len(acked) == ROUNDS * KEYS + 1
    return acked


def latest_values(pairs):
    """{key: value} of the last occurrence of each key, keys whose last value is a tombstone
    left out."""
    latest = {}
    for k, v in pairs:
        latest[k] = v
    return {k: v for k, v in latest.items() if v is not None}


def check(records, acked):
    offsets = [r["offset"] for r in records]
    assert offsets == sorted(set(offsets)), "offsets not increasing"
    for r in records:
        assert acked[r["offset"]] == (r["key"], r["value"]), f"record changed at {r['offset']}"
    want = latest_values(acked[o] for o in sorted(acked))
    assert latest_values((r["key"], r["value"]) for r in records) == want


def read_all(broker, topic, consume=consume_confluent):
    """Every record from the beginning up to the end offset (the last record is in the active
    segment, so never removed)."""
    end = end_offsets(broker, topic, 1)[0]
    records = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        records = consume(broker, topic, 1, end, timeout=3)
        if records and records[-1]["offset"] == end - 1:
            return records
    raise AssertionError(f"could not read up to offset {end - 1}: {len(records)} records")


def test_compacted_topic_keeps_the_latest_value_of_every_key(broker):
    topic = create_topic(broker, uniq("compacted"), 1, {
        "cleanup.policy": "compact",
        "segment.ms": str(SEGMENT_MS),
        "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "100",
    })
    acked = produce_rounds(broker, topic)
    deadline = time.monotonic() + COMPACTION_TIMEOUT
    while True:
        records = read_all(broker, topic)
        check(records, acked)
        # One record per key (tombstones may be gone already) plus the active segment's one.
        if len(records) <= KEYS + 1:
            break
        assert time.monotonic() < deadline, \
            f"not compacted after {COMPACTION_TIMEOUT}s: {len(records)} of {len(acked)} records"
        time.sleep(1)
    # A second client reads the cleaned (recompressed, sparse) batches the same way.
    check(read_all(broker, topic, consume_kafka_python), acked)
