"""Crash safety: kill -9 the broker while a confluent-kafka producer (acks=all)
has records in flight, restart it on the same data dir, and check that every
acknowledged record survived exactly once, at its acknowledged offset, in
produce order per partition; unacknowledged records may be missing but nothing
is duplicated or reordered and offsets have no gaps."""

import time
from collections import Counter

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

from iutil import create_topic, end_offsets, uniq

PARTITIONS = 3
KILLS = 3
ACKS_PER_ROUND = 400      # kill after this many more acknowledged records
MAX_OUTSTANDING = 500     # produced but not yet reported
ROUND_TIMEOUT = 60.0
FLUSH_TIMEOUT = 90.0


def consume_to_end(broker, topic, hw, timeout=60.0):
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": uniq("crash-read"),
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    out = {p: [] for p in range(PARTITIONS)}
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        deadline = time.monotonic() + timeout
        while (any(len(out[p]) < hw[p] for p in out) and time.monotonic() < deadline):
            for m in c.consume(num_messages=1000, timeout=0.5):
                if m.error():
                    raise KafkaException(m.error())
                out[m.partition()].append((m.offset(), int(m.value())))
    finally:
        c.close()
    return out


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
def test_kill9_mid_stream(make_broker, idempotent):
    broker = make_broker()
    topic = create_topic(broker, uniq("crash"), PARTITIONS)
    conf = {
        "bootstrap.servers": broker.bootstrap,
        "acks": "all",
        "enable.idempotence": idempotent,
        "linger.ms": 2,
        "batch.num.messages": 50,
        "max.in.flight.requests.per.connection": 5,
        "message.timeout.ms": 60000,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
        "socket.timeout.ms": 10000,
        "log_level": 2,  # connection-refused noise while the broker is down
    }
    if not idempotent:
        # without idempotence a retry after a lost response would legitimately
        # duplicate; with no retries every record is written at most once
        conf["retries"] = 0
    p = Producer(conf)
    acked = {}            # seq -> (partition, offset)
    failed = []
    seq = 0

    def cb(err, msg):
        s = int(msg.value())
        if err is None:
            acked[s] = (msg.partition(), msg.offset())
        else:
            failed.append((s, err.code()))

    def produce_some(n):
        nonlocal seq
        for _ in range(n):
            while True:
                try:
                    p.produce(topic, value=str(seq).encode(), key=b"k%d" % seq,
                              partition=seq % PARTITIONS, on_delivery=cb)
                    break
                except BufferError:
                    p.poll(0.05)
            seq += 1
        p.poll(0)

    for rnd in range(KILLS):
        target = len(acked) + ACKS_PER_ROUND
        deadline = time.monotonic() + ROUND_TIMEOUT
        while len(acked) < target:
            assert time.monotonic() < deadline, \
                f"round {rnd}: only {len(acked)}/{target} acked; failures {failed[-5:]}"
            if seq - len(acked) - len(failed) < MAX_OUTSTANDING:
                produce_some(25)
            p.poll(0.002)
        produce_some(200)   # more in flight / queued while the broker dies
        p.poll(0)
        in_flight = seq - len(acked) - len(failed)
        assert in_flight > 0
        broker.kill9()
        p.poll(0.2)
        broker.restart()
    produce_some(100)
    assert p.flush(FLUSH_TIMEOUT) == 0, "delivery reports missing after flush"
    assert len(acked) + len(failed) == seq
    assert len(acked) >= KILLS * ACKS_PER_ROUND

    hw = end_offsets(broker, topic, PARTITIONS)
    got = consume_to_end(broker, topic, hw)
    for part in range(PARTITIONS):
        offs = [o for o, _ in got[part]]
        assert offs == list(range(hw[part])), f"p{part}: offsets not 0..{hw[part] - 1}"
        seqs = [s for _, s in got[part]]
        assert all(s % PARTITIONS == part for s in seqs)
        assert seqs == sorted(seqs), f"p{part}: records out of produce order"
    where = {}
    for part, recs in got.items():
        for o, s in recs:
            where.setdefault(s, []).append((part, o))
    dups = {s: w for s, w in where.items() if len(w) > 1}
    assert not dups, f"records stored twice: {list(dups.items())[:5]}"
    lost = [s for s in acked if s not in where]
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {lost[:10]}"
    moved = [(s, acked[s], where[s][0]) for s in acked if where[s][0] != acked[s]]
    assert not moved, f"acknowledged offsets differ from stored: {moved[:5]}"
    if idempotent:
        # idempotent producer retries until success: everything got acked
        assert not failed, f"idempotent producer failed records: {Counter(c for _, c in failed)}"
