"""Produce with confluent-kafka and kafka-python, for every compression codec,
and consume with both clients; the consumed sequence must equal the produced one
exactly (per-partition order, offsets, keys, values, headers, timestamps)."""

import random
import time

import pytest
from confluent_kafka import KafkaError, Producer

from iutil import (MiB, OP_TIMEOUT, by_partition, consume_confluent, consume_kafka_python,
                   create_topic, end_offsets, uniq)

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PARTITIONS = 2
BIG_TOPIC_CONFIG = {"max.message.bytes": str(4 * MiB)}


def make_records(null_header_values):
    """Deterministic record set. Every record carries an explicit partition;
    `ts` is an explicit CreateTime or None (= let the client stamp it)."""
    rnd = random.Random(1234)
    base_ts = 1_700_000_000_000
    recs = [
        dict(key=b"key-0", value=b"hello",
             headers=[("h", b"1"), ("h", b"2"), ("other", b"")], ts=base_ts),
        dict(key=None, value=b"no-key", headers=[], ts=None),
        dict(key=b"tombstone", value=None, headers=[], ts=base_ts + 1),
        dict(key=b"", value=b"", headers=[], ts=None),
        dict(key=b"utf8", value="h\u00e9llo \u2603".encode(),
             headers=[("\u043a\u043b\u044e\u0447", "\u2603".encode())], ts=base_ts + 2),
        dict(key=b"big-1", value=rnd.randbytes(MiB), headers=[("big", b"1")], ts=None),
    ]
    if null_header_values:
        recs.append(dict(key=b"null-hdr", value=b"x",
                         headers=[("n", None), ("n", b"v"), ("n", None)], ts=base_ts + 3))
    for i in range(300):
        recs.append(dict(key=f"k{i % 17}".encode(),
                         value=(f"value-{i}-" + "abc" * (i % 50)).encode(),
                         headers=[("seq", str(i).encode())] if i % 3 == 0 else [],
                         ts=base_ts + 1000 + i if i % 2 == 0 else None))
    recs.append(dict(key=b"big-2", value=b"compressible" * (MiB // 12), headers=[], ts=None))
    recs.append(dict(key=b"last", value=b"end", headers=[], ts=None))
    for i, r in enumerate(recs):
        r["partition"] = i % PARTITIONS
    return recs


def produce_confluent(broker, topic, recs, codec, idempotent=False):
    p = Producer({
        "bootstrap.servers": broker.bootstrap,
        "compression.type": codec,
        "acks": "all",
        "enable.idempotence": idempotent,
        "message.max.bytes": 4 * MiB,
        "linger.ms": 5,
        "message.timeout.ms": int(OP_TIMEOUT * 1000),
    })
    results = [None] * len(recs)

    def cb(i):
        def _cb(err, msg):
            results[i] = (err, msg.partition(), msg.offset())  # msg is never None here
        return _cb

    t0 = int(time.time() * 1000)
    for i, r in enumerate(recs):
        kw = dict(value=r["value"], key=r["key"], partition=r["partition"], on_delivery=cb(i))
        if r["headers"]:
            kw["headers"] = r["headers"]
        if r["ts"] is not None:
            kw["timestamp"] = r["ts"]
        p.produce(topic, **kw)
        p.poll(0)
    remaining = p.flush(OP_TIMEOUT)
    t1 = int(time.time() * 1000)
    assert remaining == 0, f"{remaining} messages not delivered within {OP_TIMEOUT}s"
    errs = [(i, e) for i, (e, _, _) in enumerate(results) if e is not None]
    assert not errs, f"delivery errors: {errs[:5]}"
    return [(part, off) for _, part, off in results], (t0, t1)


def produce_kafka_python(broker, topic, recs, codec, idempotent=False):
    from kafka import KafkaProducer
    p = KafkaProducer(
        bootstrap_servers=broker.bootstrap,
        compression_type=None if codec == "none" else codec,
        acks="all",
        enable_idempotence=idempotent,
        max_request_size=4 * MiB,
        linger_ms=5,
        request_timeout_ms=int(OP_TIMEOUT * 1000),
    )
    try:
        t0 = int(time.time() * 1000)
        futs = [p.send(topic, value=r["value"], key=r["key"], headers=list(r["headers"]),
                       partition=r["partition"], timestamp_ms=r["ts"]) for r in recs]
        p.flush(timeout=OP_TIMEOUT)
        metas = [f.get(timeout=OP_TIMEOUT) for f in futs]
        t1 = int(time.time() * 1000)
    finally:
        p.close(timeout=10)
    return [(m.partition, m.offset) for m in metas], (t0, t1)


PRODUCERS = {"confluent": produce_confluent, "kafka-python": produce_kafka_python}
CONSUMERS = {"confluent": consume_confluent, "kafka-python": consume_kafka_python}


def check_roundtrip(broker, topic, recs, positions, window, consumer_name):
    # offsets assigned by the broker: contiguous from 0 per partition, in produce order
    per_part = {}
    for r, (part, off) in zip(recs, positions):
        assert part == r["partition"]
        per_part.setdefault(part, []).append(off)
    for part, offs in per_part.items():
        assert offs == list(range(len(offs))), f"partition {part} offsets {offs[:10]}..."
    assert end_offsets(broker, topic, PARTITIONS) == {p: len(o) for p, o in per_part.items()}

    got = CONSUMERS[consumer_name](broker, topic, PARTITIONS, len(recs))
    assert len(got) == len(recs), f"{consumer_name} consumed {len(got)} of {len(recs)}"
    got_pp = by_partition(got)
    want_pp = {}
    for r in recs:
        want_pp.setdefault(r["partition"], []).append(r)
    assert sorted(got_pp) == sorted(want_pp)
    t0, t1 = window
    for part, want in want_pp.items():
        have = got_pp[part]
        assert [h["offset"] for h in have] == list(range(len(want)))
        for w, h in zip(want, have):
            ctx = f"{consumer_name} p{part} off {h['offset']}"
            assert h["key"] == w["key"], ctx
            assert h["value"] == w["value"], ctx  # None stays None, b"" stays b""
            assert h["headers"] == w["headers"], ctx
            assert h["ts_type"] == "create", ctx
            if w["ts"] is not None:
                assert h["ts"] == w["ts"], ctx
            else:
                assert t0 - 5000 <= h["ts"] <= t1 + 5000, ctx


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("producer", list(PRODUCERS))
def test_roundtrip(broker, producer, codec):
    topic = create_topic(broker, uniq(f"pc-{producer}-{codec}"), PARTITIONS, BIG_TOPIC_CONFIG)
    # kafka-python's producer only accepts bytes header values
    recs = make_records(null_header_values=(producer == "confluent"))
    positions, window = PRODUCERS[producer](broker, topic, recs, codec)
    for consumer_name in CONSUMERS:
        check_roundtrip(broker, topic, recs, positions, window, consumer_name)


@pytest.mark.parametrize("producer", list(PRODUCERS))
def test_roundtrip_idempotent_producer(broker, producer):
    """Same round trip with the idempotent producer (kafka-python's default and
    the modern Java client's default): needs InitProducerId + sequence checks."""
    topic = create_topic(broker, uniq(f"pc-idem-{producer}"), PARTITIONS, BIG_TOPIC_CONFIG)
    recs = make_records(null_header_values=(producer == "confluent"))
    positions, window = PRODUCERS[producer](broker, topic, recs, "lz4", idempotent=True)
    for consumer_name in CONSUMERS:
        check_roundtrip(broker, topic, recs, positions, window, consumer_name)


# Kafka checks the *batch* size (61-byte v2 batch header included) against the
# topic's max.message.bytes (default 1048588 = 1 MiB + 12). A single-record,
# uncompressed batch with null key, no headers and a V-byte value occupies
# V + 72 bytes (61 header + 11 record framing for 3-byte varint lengths), so
# V = 1048516 is the largest value that fits and a 1 MiB value does NOT fit.
LIMIT_FIT = 1048588 - 72


@pytest.mark.parametrize("size,ok", [(LIMIT_FIT, True), (LIMIT_FIT + 1, False), (MiB, False)])
def test_default_max_message_bytes_boundary(broker, size, ok):
    topic = create_topic(broker, uniq("maxmsg"), 1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                  "compression.type": "none", "message.max.bytes": 4 * MiB,
                  "enable.idempotence": False, "message.timeout.ms": int(OP_TIMEOUT * 1000),
                  "retries": 0})
    res = []
    p.produce(topic, value=random.Random(size).randbytes(size), partition=0,
              on_delivery=lambda err, msg: res.append((err, msg.offset())))
    assert p.flush(OP_TIMEOUT) == 0
    assert len(res) == 1
    err, off = res[0]
    if ok:
        assert err is None and off == 0
        got = consume_confluent(broker, topic, 1, 1)
        assert len(got) == 1 and len(got[0]["value"]) == size
    else:
        assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE, err
        assert end_offsets(broker, topic, 1) == {0: 0}


def test_kafka_python_message_too_large(broker):
    """kafka-python sees the broker's MESSAGE_TOO_LARGE (error code 10) too."""
    from kafka import KafkaProducer
    from kafka.errors import MessageSizeTooLargeError
    topic = create_topic(broker, uniq("maxmsg-kp"), 1)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", enable_idempotence=False,
                      max_request_size=4 * MiB, retries=0,
                      request_timeout_ms=int(OP_TIMEOUT * 1000))
    try:
        fut = p.send(topic, value=random.Random(7).randbytes(MiB), partition=0)
        with pytest.raises(MessageSizeTooLargeError):
            fut.get(timeout=OP_TIMEOUT)
        ok = p.send(topic, value=b"small", partition=0).get(timeout=OP_TIMEOUT)
        assert ok.offset == 0
    finally:
        p.close(timeout=10)
