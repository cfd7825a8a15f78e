"""A new share group's first ShareFetches, raw (ShareGroupHeartbeat v1 and ShareFetch v1 as
librdkafka 2.16 sends them: MaxWaitMs 500, MinBytes 1, MaxBytes 52428800, MaxRecords 500),
validated against Apache Kafka 4.4 (INTEROP_TARGET=kafka).

What Kafka 4.4 does (observed; the assertions pin these): a share partition is initialised on
its group's first fetch of it (a read from the share coordinator), asynchronously, while the
fetch waits; the fetch completes as soon as the partitions that are ready hold MinBytes. With
MinBytes 1 the first partition to finish initialising completes it alone: two new partitions
of 50 records each come 50 (partition 0), then 50 (partition 1), on consecutive fetches, and
partitions that carry nothing are left out of the answer. Once initialised, both come in one
answer. With a MinBytes that one partition does not fill, the fetch waits out MaxWaitMs, by
when both are initialised, and answers both. (With MaxWaitMs 0 Kafka answers whatever is ready
at once, nothing or partition 0 depending on timing: not pinned. The very first share-state
read of a fresh broker can be slow enough for both partitions to finish together, so the
module warms the share coordinator up first.)

Shoal lists every partition of the session in a ShareFetch answer, those without records too;
the tests look at the partitions that carry records."""

import time
import uuid

import pytest

from iutil import OP_TIMEOUT, create_topic, uniq
from kafka.protocol.producer.produce import ProduceRequest
from rawproto import RawConn, record_batch
from sharewire import ShareConn, acquired_count
from test_parity import wait_coordinator
from test_share import set_group_configs

BROKER_CONFIG = {
    "num.partitions": "1",
    # faster assignment (the coordinator hands out partitions on heartbeats)
    "group.share.min.heartbeat.interval.ms": "1000",
    "group.share.heartbeat.interval.ms": "1000",
}

RECORDS = 50  # per partition, one batch each
COORDINATOR_LOADING = (14, 15, 16)  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR


def produce_batch(broker, topic, partition, n):
    batch = record_batch([(None, f"{partition}-{i}".encode(), None) for i in range(n)])
    with RawConn(broker) as c:
        resp = c.send(ProduceRequest, 9, transactional_id=None, acks=-1,
                      timeout_ms=int(OP_TIMEOUT * 1000),
                      topic_data=[{"name": topic, "partition_data": [
                          {"index": partition, "records": batch}]}])
    assert resp.responses[0].partition_responses[0].error_code == 0, resp


def topic_with_records(broker, partitions):
    topic = create_topic(broker, uniq("first-fetch"), partitions=partitions)
    for p in range(partitions):
        produce_batch(broker, topic, p, RECORDS)
    return topic


def new_group(broker):
    """A share group reading from the earliest offset, its coordinator found."""
    group = uniq("first-fetch")
    set_group_configs(broker, group, {"share.auto.offset.reset": "earliest"})
    with RawConn(broker) as c:
        wait_coordinator(c, group)
    return group


def join(conn, group, member_id, topic, partitions):
    """Heartbeats until the member is assigned `partitions` partitions of `topic` (Kafka
    assigns them once their share state exists); returns {topic id: [partitions]}."""
    deadline = time.monotonic() + OP_TIMEOUT
    epoch = 0
    current = {}
    while True:
        error, new_epoch, assignment = conn.heartbeat(group, member_id, epoch, [topic])
        assert error in (0,) + COORDINATOR_LOADING, error
        if error == 0:
            epoch = new_epoch
        if assignment is not None:  # sent only when it changes
            current = assignment
        if sum(len(p) for p in current.values()) == partitions:
            return current
        assert time.monotonic() < deadline, f"not assigned {partitions} partitions: {current}"
        time.sleep(1.0)


def fetch_counts(conn, group, member, epoch, partitions, **kw):
    """One ShareFetch acknowledging nothing: {partition: records acquired} of the partitions
    that carry records; every partition answered must be error-free."""
    error, parts = conn.share_fetch(group, member, epoch, partitions, **kw)
    assert error == 0, error
    assert all(code == 0 for code, _ in parts.values()), parts
    return {p: acquired_count(a) for (_, p), (_, a) in parts.items() if a}


@pytest.fixture(scope="module")
def warm(broker):
    """Has one share group read one record, so the share coordinator's state is loaded."""
    topic = topic_with_records(broker, 1)
    group = new_group(broker)
    member = str(uuid.uuid4())
    with ShareConn(broker) as conn:
        assignment = join(conn, group, member, topic, 1)
        deadline = time.monotonic() + OP_TIMEOUT
        epoch = 0
        while not fetch_counts(conn, group, member, epoch, assignment if epoch == 0 else {}):
            assert time.monotonic() < deadline, "the warm-up group got no records"
            epoch += 1
    return broker


def test_new_group_gets_one_initialising_partition_per_fetch(warm):
    broker = warm
    topic = topic_with_records(broker, 2)
    group = new_group(broker)
    member = str(uuid.uuid4())
    with ShareConn(broker) as conn:
        assignment = join(conn, group, member, topic, 2)
        # Epoch 0 adds both partitions to the session; later fetches are incremental.
        answers = [fetch_counts(conn, group, member, epoch, assignment if epoch == 0 else {})
                   for epoch in range(3)]
        assert answers == [{0: RECORDS}, {1: RECORDS}, {}]
        # Initialised: new records of both partitions come in one answer.
        for p in (0, 1):
            produce_batch(broker, topic, p, RECORDS)
        assert fetch_counts(conn, group, member, 3, {}) == {0: RECORDS, 1: RECORDS}


def test_min_bytes_one_partition_does_not_fill_gets_both(warm):
    broker = warm
    topic = topic_with_records(broker, 2)
    group = new_group(broker)
    member = str(uuid.uuid4())
    with ShareConn(broker) as conn:
        assignment = join(conn, group, member, topic, 2)
        answer = fetch_counts(conn, group, member, 0, assignment, max_wait_ms=2000,
                              min_bytes=1 << 20)
        assert answer == {0: RECORDS, 1: RECORDS}
