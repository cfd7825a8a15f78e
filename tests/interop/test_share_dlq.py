"""Share-group dead-letter queues (KIP-1191) with confluent-kafka's ShareConsumer, validated
against Apache Kafka 4.4.0 (INTEROP_TARGET=kafka) first.

A group with ``errors.deadletterqueue.topic.name`` writes one record per rejected record, and
per record that reached ``share.delivery.count.limit``, to partition ``source partition %
partitions`` of that topic, with the ``__dlq.errors.*`` headers (topic, partition, offset,
group, delivery count, message) and, with ``errors.deadletterqueue.copy.record.enable``, the
original key and value (Kafka 4.4 does not copy the original headers). The topic must exist with
``errors.deadletterqueue.group.enable=true`` (or be auto-created when the broker's
``errors.deadletterqueue.auto.create.topics.enable`` is true) and its name start with the
broker's ``errors.deadletterqueue.topic.name.prefix`` (``dlq.``); otherwise the records are
archived without a dead letter. A broker kill -9 right after the rejections leaves each
dead letter written exactly once.
"""

import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from iutil import OP_TIMEOUT, create_topic, uniq
from test_share import (ACCEPT, REJECT, RELEASE, BROKER_CONFIG, earliest_group, poll_quiet,
                        poll_until, set_group_configs, share_consumer, values)

DLQ_HEADERS = ["__dlq.errors.topic", "__dlq.errors.partition", "__dlq.errors.offset",
               "__dlq.errors.group", "__dlq.errors.delivery.count", "__dlq.errors.message"]
REJECTED = "Offset rejected by client."
EXCEEDED = "Offset delivery count exceeded the threshold."


def produce_to(broker, topic, items):
    """items: (partition, key, value, headers)."""
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    errors = []
    for part, key, val, headers in items:
        p.produce(topic, value=val.encode(), key=key, partition=part, headers=headers,
                  on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert p.flush(OP_TIMEOUT) == 0
    assert not errors, errors


def read_all(broker, topic, partitions, expected, timeout=OP_TIMEOUT, quiet=3.0):
    """Every record of `topic` (read_committed), waiting for `expected` then `quiet` s."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": uniq("dlq-reader"),
                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out = []
    deadline = time.monotonic() + timeout
    quiet_until = None
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.3)
            if m is None:
                if len(out) >= expected:
                    quiet_until = quiet_until or time.monotonic() + quiet
                    if time.monotonic() >= quiet_until:
                        break
                continue
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF
                    continue
                raise KafkaException(m.error())
            out.append({"partition": m.partition(), "key": m.key(), "value": m.value(),
                        "headers": [(k, v) for k, v in (m.headers() or [])]})
    finally:
        c.close()
    return out


def dlq_fields(rec):
    return {k: v.decode() for k, v in rec["headers"] if k.startswith("__dlq.errors.")}


def dlq_topic(broker, partitions=1, enabled=True):
    config = {"errors.deadletterqueue.group.enable": "true"} if enabled else {}
    return create_topic(broker, uniq("dlq.share"), partitions, config)


def test_rejected_records_dead_lettered_with_headers_and_copies(broker):
    topic = create_topic(broker, uniq("dlq-src"), 3)
    dlq = dlq_topic(broker, partitions=2)
    group = earliest_group(broker, "dlq-rej", {
        "errors.deadletterqueue.topic.name": dlq,
        "errors.deadletterqueue.copy.record.enable": "true"})
    items = [(p, f"k{p}-{i}".encode(), f"{'rej' if i % 2 else 'acc'}-{p}-{i}",
              [("h", f"v{i}".encode())]) for p in range(3) for i in range(4)]
    produce_to(broker, topic, items)
    c = share_consumer(broker, group, [topic], explicit=True)
    try:
        recs = poll_until(c, lambda rs: len(rs) >= len(items), OP_TIMEOUT,
                          ack=lambda r: REJECT if r.value.startswith("rej") else ACCEPT)
        recs += poll_quiet(c, ack=lambda r: ACCEPT)
    finally:
        c.close()
    assert sorted(values(recs)) == sorted(v for _p, _k, v, _h in items), "each delivered once"
    rejected = {(r.partition, r.offset): r for r in recs if r.value.startswith("rej")}
    got = read_all(broker, dlq, 2, len(rejected))
    assert len(got) == len(rejected), got
    seen = set()
    for d in got:
        f = dlq_fields(d)
        # Kafka 4.4 copies the key and value, not the original headers.
        assert [k for k, _v in d["headers"]] == DLQ_HEADERS, d
        src = (int(f["__dlq.errors.partition"]), int(f["__dlq.errors.offset"]))
        assert src in rejected, (f, sorted(rejected))
        seen.add(src)
        orig = rejected[src]
        assert d["partition"] == src[0] % 2, "dead letter on source partition % partitions"
        assert f["__dlq.errors.topic"] == topic
        assert f["__dlq.errors.group"] == group
        assert f["__dlq.errors.delivery.count"] == "1"
        assert f["__dlq.errors.message"] == REJECTED
        assert d["value"].decode() == orig.value, "copied value"
        _p, key, _v, _h = next(i for i in items if i[2] == orig.value)
        assert d["key"] == key, "copied key"
    assert seen == set(rejected), "every rejected record dead-lettered once"


def test_delivery_limit_dead_letters_without_copy(broker):
    topic = create_topic(broker, uniq("dlq-limit"), 1)
    dlq = dlq_topic(broker)
    group = earliest_group(broker, "dlq-limit", {
        "share.delivery.count.limit": 2, "errors.deadletterqueue.topic.name": dlq})
    produce_to(broker, topic, [(0, b"k", "doomed", None), (0, None, "fine", None)])
    c = share_consumer(broker, group, [topic], explicit=True)
    try:
        ack = lambda r: RELEASE if r.value == "doomed" else ACCEPT  # noqa: E731
        recs = poll_until(c, lambda rs: len(rs) >= 3, OP_TIMEOUT, ack=ack)
        recs += poll_quiet(c, ack=ack)
    finally:
        c.close()
    assert sorted((r.value, r.dc) for r in recs) == [("doomed", 1), ("doomed", 2), ("fine", 1)]
    got = read_all(broker, dlq, 1, 1)
    assert len(got) == 1, got
    d = got[0]
    assert d["key"] is None and d["value"] is None, "no copy: headers only"
    assert [k for k, _v in d["headers"]] == DLQ_HEADERS
    f = dlq_fields(d)
    assert f["__dlq.errors.offset"] == "0" and f["__dlq.errors.partition"] == "0"
    assert f["__dlq.errors.delivery.count"] == "2"
    assert f["__dlq.errors.message"] == EXCEEDED


@pytest.mark.parametrize("case", ["not-enabled", "missing", "prefix"])
def test_unusable_dead_letter_topic_archives_without_dead_letter(broker, case):
    topic = create_topic(broker, uniq("dlq-bad"), 1)
    if case == "not-enabled":
        dlq = dlq_topic(broker, enabled=False)
    elif case == "missing":
        dlq = uniq("dlq.missing")
    else:
        dlq = create_topic(broker, uniq("nodlqprefix"), 1,
                           {"errors.deadletterqueue.group.enable": "true"})
    group = earliest_group(broker, "dlq-bad", {"errors.deadletterqueue.topic.name": dlq})
    produce_to(broker, topic, [(0, None, "rej", None), (0, None, "after", None)])
    c = share_consumer(broker, group, [topic], explicit=True)
    try:
        ack = lambda r: REJECT if r.value == "rej" else ACCEPT  # noqa: E731
        recs = poll_until(c, lambda rs: len(rs) >= 2, OP_TIMEOUT, ack=ack)
        recs += poll_quiet(c, ack=ack)
    finally:
        c.close()
    assert sorted(values(recs)) == ["after", "rej"], "archived, not redelivered"
    if case == "missing":
        md = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": uniq("md")})
        try:
            t = md.list_topics(timeout=10).topics.get(dlq)
            assert t is None or t.error is not None, "not auto-created (disabled by default)"
        finally:
            md.close()
    else:
        assert read_all(broker, dlq, 1, 0, quiet=2.0) == []


def test_dead_letter_topic_auto_created(make_broker):
    b = make_broker({**BROKER_CONFIG, "errors.deadletterqueue.auto.create.topics.enable": "true"})
    topic = create_topic(b, uniq("dlq-auto"), 1)
    dlq = uniq("dlq.auto")
    group = earliest_group(b, "dlq-auto", {"errors.deadletterqueue.topic.name": dlq})
    produce_to(b, topic, [(0, None, "rej", None)])
    c = share_consumer(b, group, [topic], explicit=True)
    try:
        poll_until(c, lambda rs: len(rs) >= 1, OP_TIMEOUT, ack=lambda r: REJECT)
    finally:
        c.close()
    got = []
    deadline = time.monotonic() + OP_TIMEOUT
    while not got and time.monotonic() < deadline:
        try:
            got = read_all(b, dlq, 1, 1, timeout=10, quiet=0.5)
        except KafkaException:
            time.sleep(0.5)
    assert len(got) == 1, got
    assert dlq_fields(got[0])["__dlq.errors.message"] == REJECTED


def test_group_config_refuses_internal_topic_name(broker):
    with pytest.raises(KafkaException) as e:
        set_group_configs(broker, uniq("dlq-cfg"),
                          {"errors.deadletterqueue.topic.name": "__dlq.internal"})
    assert "must not start with '__'" in str(e.value), str(e.value)


@pytest.mark.kill
def test_dead_letters_exactly_once_across_broker_kill9(make_broker):
    """Reject a large batch, kill -9 the broker as soon as the rejections are committed
    (while dead letters are being written), restart, let the share partition load again,
    and check the dead-letter topic holds each rejected record once."""
    b = make_broker(BROKER_CONFIG)
    topic = create_topic(b, uniq("dlq-kill"), 1)
    dlq = dlq_topic(b)
    group = earliest_group(b, "dlq-kill", {"errors.deadletterqueue.topic.name": dlq})
    n = 2000
    produce_to(b, topic, [(0, None, f"r-{i}", None) for i in range(n)])
    c = share_consumer(b, group, [topic], explicit=True)
    try:
        poll_until(c, lambda rs: len(rs) >= n, OP_TIMEOUT, ack=lambda r: REJECT)
    finally:
        b.kill9()
        c.close()
    b.restart()
    # A member loads the share partition again (and finds nothing to deliver).
    c = share_consumer(b, group, [topic], explicit=True)
    try:
        assert poll_quiet(c, seconds=8.0, ack=lambda r: ACCEPT) == []
    finally:
        c.close()
    got = read_all(b, dlq, 1, n, quiet=3.0)
    offsets = sorted(int(dlq_fields(d)["__dlq.errors.offset"]) for d in got)
    assert offsets == list(range(n)), (len(offsets), len(set(offsets)))
