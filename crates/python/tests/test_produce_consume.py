"""Records through shoal's Producer and ShareConsumer, and across to confluent-kafka
(librdkafka) both ways."""

import time

import confluent_kafka
import shoal
from conftest import create_topics, earliest_group, poll_all

N = 50


def produce(broker, topic, n=N):
    """n records with keys and headers; their delivery reports."""
    reports = []
    with shoal.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5}) as p:
        for i in range(n):
            p.produce(topic, value=f"v{i}", key=f"k{i}".encode(), headers=[("i", str(i))],
                      on_delivery=lambda err, m: reports.append((err, m)))
        assert p.flush(30) == 0
    return reports


def test_round_trip_with_keys_headers_and_delivery_reports(broker, names):
    topic, group = names("t"), names("g")
    create_topics(broker, topic)
    reports = produce(broker, topic)
    assert [err for err, _ in reports] == [None] * N
    assert [m.offset() for _, m in reports] == list(range(N))
    assert {m.topic() for _, m in reports} == {topic}
    earliest_group(broker, group)
    with shoal.ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group}) as c:
        c.subscribe([topic])
        got = poll_all(c, N)
        c.commit_sync()
    assert sorted(m.offset() for m in got) == list(range(N))
    by_offset = {m.offset(): m for m in got}
    for i in range(N):
        m = by_offset[i]
        assert (m.value(), m.key(), m.headers()) == (f"v{i}".encode(), f"k{i}".encode(),
                                                     [("i", str(i).encode())])
        assert m.delivery_count() == 1
        assert m.timestamp()[1] > 0


def test_shoal_records_read_by_confluent_kafka(broker, names):
    topic = names("t")
    create_topics(broker, topic)
    produce(broker, topic)
    c = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap,
                                  "group.id": names("classic"),
                                  "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got, deadline = [], time.monotonic() + 30
    while len(got) < N and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None:
            assert m.error() is None, m.error()
            got.append(m)
    c.close()
    assert [(m.key(), m.value(), m.headers()) for m in got] == [
        (f"k{i}".encode(), f"v{i}".encode(), [("i", str(i).encode())]) for i in range(N)]


def test_confluent_kafka_records_read_by_shoal(broker, names):
    topic, group = names("t"), names("g")
    create_topics(broker, topic)
    p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap,
                                  "compression.type": "zstd"})
    for i in range(N):
        p.produce(topic, value=f"c{i}".encode(), key=b"same", headers={"h": b"x"})
    assert p.flush(30) == 0
    earliest_group(broker, group)
    with shoal.ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit"}) as c:
        c.subscribe([topic])
        got = poll_all(c, N, ack=lambda m: shoal.AcknowledgeType.ACCEPT)
        c.commit_sync()
    assert sorted((m.offset(), m.value(), m.key(), m.headers()) for m in got) == [
        (i, f"c{i}".encode(), b"same", [("h", b"x")]) for i in range(N)]


def test_poll_releases_the_gil(broker, names):
    """Another Python thread runs while poll waits on an empty topic."""
    import threading
    topic, group = names("t"), names("g")
    create_topics(broker, topic)
    ticks, stop = [0], threading.Event()

    def spin():
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.001)

    with shoal.ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group}) as c:
        c.subscribe([topic])
        t = threading.Thread(target=spin)
        t.start()
        before = ticks[0]
        assert c.poll(1.0) == []
        during = ticks[0] - before
        stop.set()
        t.join()
    assert during > 100, during


def test_offsets_committed_in_a_transaction_are_read_by_confluent_kafka(broker, names):
    topic, group = names("t"), names("classic")
    create_topics(broker, topic)
    produce(broker, topic, n=5)
    c = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})

    def committed():
        (tp,) = c.committed([confluent_kafka.TopicPartition(topic, 0)], timeout=30)
        return tp.offset

    with shoal.Producer({"bootstrap.servers": broker.bootstrap,
                         "transactional.id": names("tid")}) as p:
        p.init_transactions()
        p.begin_transaction()
        p.send_offsets_to_transaction([shoal.TopicPartition(topic, 0, 3)], group)
        p.abort_transaction()
        assert committed() == confluent_kafka.OFFSET_INVALID  # aborted: nothing committed
        p.begin_transaction()
        p.send_offsets_to_transaction([confluent_kafka.TopicPartition(topic, 0, 4)], group)
        p.commit_transaction()
    assert committed() == 4
    c.close()
