"""Transactions with stock clients: commits and aborts seen correctly by read_committed and
read_uncommitted consumers, a consume-transform-produce copier using
send_offsets_to_transaction, and fencing of a zombie producer. Validated against Apache Kafka
(INTEROP_TARGET=kafka)."""

import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from iutil import OP_TIMEOUT, consume_confluent, create_topic, uniq

BROKER_CONFIG = {"num.partitions": "1"}


def txn_producer(broker, txn_id, **extra):
    conf = {"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id,
            "transaction.timeout.ms": 60000, "linger.ms": 5}
    conf.update(extra)
    p = Producer(conf)
    p.init_transactions(OP_TIMEOUT)
    return p


def values(records):
    return [r["value"] for r in records]


def test_commits_and_aborts_by_isolation_level(broker):
    topic = create_topic(broker, uniq("txn"), 2)
    p = txn_producer(broker, uniq("tid"))
    expected_committed = []
    for round_, commit in enumerate([True, False, True, False, True]):
        p.begin_transaction()
        for i in range(20):
            v = f"r{round_}-{i}".encode()
            p.produce(topic, value=v, partition=i % 2)
            if commit:
                expected_committed.append(v)
        # Make sure the records reach the broker: abort_transaction purges what is still queued.
        p.flush(OP_TIMEOUT)
        if commit:
            p.commit_transaction(OP_TIMEOUT)
        else:
            p.abort_transaction(OP_TIMEOUT)
    committed = consume_confluent(broker, topic, 2, len(expected_committed),
                                  extra={"isolation.level": "read_committed"})
    assert sorted(values(committed)) == sorted(expected_committed)
    everything = consume_confluent(broker, topic, 2, 100,
                                   extra={"isolation.level": "read_uncommitted"})
    assert len(everything) == 100
    # Nothing more arrives for read_committed (the aborted records stay invisible).
    again = consume_confluent(broker, topic, 2, len(expected_committed) + 1, timeout=3,
                              extra={"isolation.level": "read_committed"})
    assert len(again) == len(expected_committed)


def test_open_transaction_blocks_read_committed_until_commit(broker):
    topic = create_topic(broker, uniq("lso"), 1)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(topic, value=b"before")
    plain.flush(OP_TIMEOUT)
    p = txn_producer(broker, uniq("tid"))
    p.begin_transaction()
    p.produce(topic, value=b"in-txn")
    p.flush(OP_TIMEOUT)
    plain.produce(topic, value=b"after")
    plain.flush(OP_TIMEOUT)
    # The open transaction holds the last stable offset: only "before" is readable.
    seen = consume_confluent(broker, topic, 1, 2, timeout=4,
                             extra={"isolation.level": "read_committed"})
    assert values(seen) == [b"before"]
    p.commit_transaction(OP_TIMEOUT)
    seen = consume_confluent(broker, topic, 1, 3, extra={"isolation.level": "read_committed"})
    assert values(seen) == [b"before", b"in-txn", b"after"]


def test_consume_transform_produce_with_offsets_in_the_transaction(broker):
    src = create_topic(broker, uniq("src"), 1)
    dst = create_topic(broker, uniq("dst"), 1)
    group = uniq("copier")
    feeder = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(200):
        feeder.produce(src, value=str(i).encode())
    feeder.flush(OP_TIMEOUT)

    def copy_some(limit, commit):
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                      "enable.auto.commit": False, "auto.offset.reset": "earliest",
                      "isolation.level": "read_committed"})
        c.subscribe([src])
        p = txn_producer(broker, f"{group}-tid")
        copied = 0
        deadline = time.monotonic() + OP_TIMEOUT
        try:
            while copied < limit and time.monotonic() < deadline:
                msgs = [m for m in c.consume(num_messages=min(50, limit - copied), timeout=1)
                        if not m.error()]
                if not msgs:
                    continue
                p.begin_transaction()
                for m in msgs:
                    p.produce(dst, value=b"copy-" + m.value())
                p.send_offsets_to_transaction(c.position(c.assignment()),
                                              c.consumer_group_metadata(), OP_TIMEOUT)
                if commit:
                    p.commit_transaction(OP_TIMEOUT)
                    copied += len(msgs)
                else:
                    p.abort_transaction(OP_TIMEOUT)
                    return
        finally:
            c.close()
        return copied

    assert copy_some(120, commit=True) == 120
    copy_some(50, commit=False)           # aborted: output invisible, offsets not committed
    assert copy_some(80, commit=True) == 80
    out = consume_confluent(broker, dst, 1, 200, extra={"isolation.level": "read_committed"})
    assert sorted(values(out), key=lambda v: int(v[5:])) == \
        [f"copy-{i}".encode() for i in range(200)]
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    committed = c.committed([TopicPartition(src, 0)], timeout=OP_TIMEOUT)
    c.close()
    assert committed[0].offset == 200


def test_a_new_instance_fences_the_zombie(broker):
    topic = create_topic(broker, uniq("fence"), 1)
    tid = uniq("tid")
    zombie = txn_producer(broker, tid)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie")
    zombie.flush(OP_TIMEOUT)
    successor = txn_producer(broker, tid)    # aborts the zombie's open transaction
    successor.begin_transaction()
    successor.produce(topic, value=b"successor")
    successor.commit_transaction(OP_TIMEOUT)
    with pytest.raises(KafkaException) as e:
        zombie.commit_transaction(10)
    assert e.value.args[0].fatal() or "fenced" in str(e.value).lower()
    seen = consume_confluent(broker, topic, 1, 1, extra={"isolation.level": "read_committed"})
    assert values(seen) == [b"successor"]


def test_kafka_python_transactional_producer(broker):
    from kafka import KafkaProducer
    topic = create_topic(broker, uniq("kp-txn"), 1)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=uniq("kp-tid"))
    p.init_transactions()
    p.begin_transaction()
    for i in range(10):
        p.send(topic, value=f"c{i}".encode())
    p.commit_transaction()
    p.begin_transaction()
    for i in range(10):
        p.send(topic, value=f"a{i}".encode())
    p.abort_transaction()
    p.close()
    seen = consume_confluent(broker, topic, 1, 10, extra={"isolation.level": "read_committed"})
    assert values(seen) == [f"c{i}".encode() for i in range(10)]
