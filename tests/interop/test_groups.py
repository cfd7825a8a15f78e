"""Consumer groups: partition assignment across members, rebalances on leave and
join, exactly-once consumption with synchronous manual commits, and resuming at
the committed offset (confluent-kafka and kafka-python, and across the two)."""

import time
from collections import Counter

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from iutil import OP_TIMEOUT, create_topic, uniq

# Rebalances must not depend on group.initial.rebalance.delay.ms (Kafka's default
# is 3000 ms; the reference Kafka here runs with 0), hence the generous bound.
REBALANCE_TIMEOUT = 60.0


def produce(broker, topic, partitions, start, count):
    """Produce values b'seq-<n>' for n in [start, start+count), round-robin over
    partitions by explicit partition number. Returns {n: (partition, offset)}."""
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                  "enable.idempotence": False, "linger.ms": 2,
                  "message.timeout.ms": int(OP_TIMEOUT * 1000)})
    res = {}

    def cb(err, msg):
        assert err is None, err
        res[int(msg.value().split(b"-")[1])] = (msg.partition(), msg.offset())

    for n in range(start, start + count):
        p.produce(topic, value=f"seq-{n}".encode(), key=f"k{n}".encode(),
                  partition=n % partitions, on_delivery=cb)
    assert p.flush(OP_TIMEOUT) == 0
    assert len(res) == count
    return res


def group_consumer(broker, group, **extra):
    conf = {"bootstrap.servers": broker.bootstrap, "group.id": group,
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "range",
            "session.timeout.ms": 10000, "heartbeat.interval.ms": 1000}
    conf.update(extra)
    return Consumer(conf)


class Member:
    """One group member driven from the test thread. A record counts as
    consumed only once its offset commit succeeded; on a failed commit the
    consumer seeks back so the record is delivered again (to it, or to the next
    owner after a rebalance)."""

    def __init__(self, broker, group, topic, name):
        self.name = name
        self.c = group_consumer(broker, group, **{"client.id": name})
        self.c.subscribe([topic])
        self.consumed = []  # (partition, offset, value)
        self.commit_failures = 0

    def assigned(self):
        return sorted(tp.partition for tp in self.c.assignment())

    def step(self, timeout=0.05):
        m = self.c.poll(timeout)
        if m is None:
            return
        if m.error():
            raise KafkaException(m.error())
        try:
            self.c.commit(message=m, asynchronous=False)
        except KafkaException:
            self.commit_failures += 1
            try:
                self.c.seek(TopicPartition(m.topic(), m.partition(), m.offset()))
            except KafkaException:
                pass  # partition was revoked: the new owner resumes from the commit
            return
        self.consumed.append((m.partition(), m.offset(), m.value()))

    def close(self):
        self.c.close()


def drive(members, until, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in members:
            m.step()
        if until():
            return
    raise AssertionError(f"timed out after {timeout}s waiting for {what}: "
                         + ", ".join(f"{m.name}={m.assigned()}" for m in members))


def test_group_rebalance_exactly_once(broker):
    topic = create_topic(broker, uniq("grp"), 3)
    group = uniq("g")
    produced = produce(broker, topic, 3, 0, 300)

    members = [Member(broker, group, topic, f"m{i}") for i in range(3)]
    try:
        def one_each(ms):
            return lambda: all(len(m.assigned()) == 1 for m in ms) and \
                sorted(p for m in ms for p in m.assigned()) == [0, 1, 2]

        def total():
            return sum(len(m.consumed) for m in all_members)

        all_members = list(members)
        drive(members, one_each(members), REBALANCE_TIMEOUT, "3 members x 1 partition")
        drive(members, lambda: total() >= 300, OP_TIMEOUT, "first 300 records")

        # one member leaves: the other two must cover all three partitions
        gone = members.pop()
        gone.close()
        covered = lambda: sorted(p for m in members for p in m.assigned()) == [0, 1, 2]  # noqa
        drive(members, covered, REBALANCE_TIMEOUT, "2 members covering 3 partitions")
        produced.update(produce(broker, topic, 3, 300, 300))
        drive(members, lambda: total() >= 600 and covered(), OP_TIMEOUT, "records 300..599")

        # a new member joins: back to one partition each
        newbie = Member(broker, group, topic, "m3")
        members.append(newbie)
        all_members.append(newbie)
        drive(members, one_each(members), REBALANCE_TIMEOUT, "rejoin: 3 x 1 partition")
        produced.update(produce(broker, topic, 3, 600, 300))
        drive(members, lambda: total() >= 900, OP_TIMEOUT, "records 600..899")
        # a little longer: nothing may be delivered (and committed) twice
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            for m in members:
                m.step()

        consumed = [c for m in all_members for c in m.consumed]
        dup = [k for k, v in Counter((p, o) for p, o, _ in consumed).items() if v > 1]
        assert not dup, f"records consumed+committed more than once: {dup[:10]}"
        assert sorted((p, o) for p, o, _ in consumed) == sorted(produced.values())
        for p, o, v in consumed:
            assert produced[int(v.split(b"-")[1])] == (p, o)
        assert newbie.consumed, "the member that joined last got no records"
    finally:
        for m in members:
            m.close()


# --------------------------------------------------------------- resume


def consume_some_confluent(broker, group, topic, n):
    """Subscribe, process exactly n records, commit next offsets per partition
    synchronously, close. Returns {partition: next_offset}, processed values."""
    c = group_consumer(broker, group)
    c.subscribe([topic])
    nxt, seen = {}, []
    try:
        deadline = time.monotonic() + REBALANCE_TIMEOUT
        while len(seen) < n and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                raise KafkaException(m.error())
            assert nxt.get(m.partition(), m.offset()) == m.offset(), "gap/duplicate"
            nxt[m.partition()] = m.offset() + 1
            seen.append(m.value())
        assert len(seen) == n
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in nxt.items()],
                 asynchronous=False)
        got = c.committed([TopicPartition(topic, p) for p in nxt], timeout=OP_TIMEOUT)
        assert {tp.partition: tp.offset for tp in got} == nxt
    finally:
        c.close()
    return nxt, seen


def consume_some_kafka_python(broker, group, topic, n):
    from kafka import KafkaConsumer, TopicPartition as KTP
    from kafka.structs import OffsetAndMetadata
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group,
                      enable_auto_commit=False, auto_offset_reset="earliest",
                      session_timeout_ms=10000, heartbeat_interval_ms=1000,
                      max_poll_records=1)
    c.subscribe([topic])
    nxt, seen = {}, []
    try:
        deadline = time.monotonic() + REBALANCE_TIMEOUT
        while len(seen) < n and time.monotonic() < deadline:
            for tp, recs in c.poll(timeout_ms=200, max_records=1).items():
                for r in recs:
                    assert nxt.get(r.partition, r.offset) == r.offset, "gap/duplicate"
                    nxt[r.partition] = r.offset + 1
                    seen.append(r.value)
        assert len(seen) == n
        c.commit({KTP(topic, p): OffsetAndMetadata(o, "", -1) for p, o in nxt.items()})
        for p, o in nxt.items():
            assert c.committed(KTP(topic, p)) == o
    finally:
        c.close(autocommit=False)
    return nxt, seen


def consume_rest_confluent(broker, group, topic, expected):
    c = group_consumer(broker, group)
    c.subscribe([topic])
    out = []
    try:
        deadline = time.monotonic() + REBALANCE_TIMEOUT
        while len(out) < expected and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                raise KafkaException(m.error())
            out.append((m.partition(), m.offset(), m.value()))
        end = time.monotonic() + 1.0  # anything extra would be a re-delivery
        while time.monotonic() < end:
            m = c.poll(0.2)
            if m is not None and not m.error():
                out.append((m.partition(), m.offset(), m.value()))
    finally:
        c.close()
    return out


def consume_rest_kafka_python(broker, group, topic, expected):
    from kafka import KafkaConsumer
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group,
                      enable_auto_commit=False, auto_offset_reset="earliest",
                      session_timeout_ms=10000, heartbeat_interval_ms=1000)
    c.subscribe([topic])
    out = []
    try:
        deadline = time.monotonic() + REBALANCE_TIMEOUT
        extra_until = None
        while time.monotonic() < deadline:
            for tp, recs in c.poll(timeout_ms=200).items():
                out.extend((r.partition, r.offset, r.value) for r in recs)
            if len(out) >= expected:
                extra_until = extra_until or time.monotonic() + 1.0
                if time.monotonic() >= extra_until:
                    break
    finally:
        c.close(autocommit=False)
    return out


FIRST = {"confluent": consume_some_confluent, "kafka-python": consume_some_kafka_python}
REST = {"confluent": consume_rest_confluent, "kafka-python": consume_rest_kafka_python}


@pytest.mark.parametrize("committer,resumer", [("confluent", "confluent"),
                                               ("kafka-python", "kafka-python"),
                                               ("confluent", "kafka-python"),
                                               ("kafka-python", "confluent")])
def test_resume_at_committed_offset(broker, committer, resumer):
    topic = create_topic(broker, uniq("resume"), 2)
    group = uniq("g")
    produced = produce(broker, topic, 2, 0, 200)
    nxt, first = FIRST[committer](broker, group, topic, 70)
    rest = REST[resumer](broker, group, topic, 130)
    assert len(rest) == 130, f"resumed consumer got {len(rest)} records, want 130"
    per = {}
    for p, o, _ in rest:
        per.setdefault(p, []).append(o)
    ends = {0: 100, 1: 100}
    for p, offs in per.items():
        start = nxt.get(p, 0)
        assert offs == list(range(start, ends[p])), f"partition {p}: resumed at {offs[:3]}"
    values = first + [v for _, _, v in rest]
    assert sorted(values) == sorted(f"seq-{n}".encode() for n in produced)


def test_many_async_commits_then_a_sync_one(broker):
    """librdkafka sends every asynchronous OffsetCommit at once on the coordinator
    connection: 200 of them, then a synchronous commit, must all be answered (each
    callback called without error) and the last offset must be the committed one.
    Shoal used to stop reading frames it already held once more requests than it
    keeps in flight per connection had arrived, and the commits timed out."""
    topic = create_topic(broker, uniq("acommit"), 1)
    group = uniq("g")
    results = []

    def on_commit(err, partitions):
        results.append(err)

    c = group_consumer(broker, group, on_commit=on_commit)
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        for offset in range(200):
            c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=True)
        started = time.monotonic()
        c.commit(offsets=[TopicPartition(topic, 0, 500)], asynchronous=False)
        while len(results) < 200 and time.monotonic() - started < OP_TIMEOUT:
            c.poll(0.1)  # serves the commit callbacks
        assert len(results) >= 200 and all(err is None for err in results), results[:5]
        [committed] = c.committed([TopicPartition(topic, 0)], timeout=OP_TIMEOUT)
        assert committed.offset == 500
    finally:
        c.close()
