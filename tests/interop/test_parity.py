"""Answers where Shoal and Kafka 4.4 used to differ, pinned with raw requests at fixed
versions (kafka-python's message classes) and with the clients that see them.

Every test here was validated against Apache Kafka 4.4 first (INTEROP_TARGET=kafka)."""

import os
import re
import subprocess
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from iutil import OP_TIMEOUT, create_topic, end_offsets, uniq
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest
from kafka.protocol.consumer.group import (HeartbeatRequest, JoinGroupRequest,
                                           LeaveGroupRequest, OffsetCommitRequest,
                                           OffsetFetchRequest, SyncGroupRequest)
from kafka.protocol.admin.groups import DescribeGroupsRequest
from kafka.protocol.metadata.api_versions import ApiVersionsRequest
from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.consumer.offsets import ListOffsetsRequest
from kafka.protocol.producer.produce import ProduceRequest
from kafka.protocol.producer.transaction import (AddOffsetsToTxnRequest, EndTxnRequest,
                                                 InitProducerIdRequest,
                                                 TxnOffsetCommitRequest)
from rawproto import RawConn, record_batch

BROKER_CONFIG = {
    "num.partitions": "1",
    # share groups on one node (Kafka's share-state topic defaults need 3 brokers)
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "share.coordinator.state.topic.num.partitions": "3",
    "group.share.min.heartbeat.interval.ms": "500",
    "group.share.heartbeat.interval.ms": "1000",
}
HERE = os.path.dirname(os.path.abspath(__file__))

INVALID_TIMESTAMP = 32
INVALID_RECORD = 87
UNKNOWN_TOPIC_OR_PARTITION = 3
FENCED_INSTANCE_ID = 82


def produce_raw(broker, topic, batch, version=9):
    with RawConn(broker) as c:
        resp = c.send(ProduceRequest, version, transactional_id=None, acks=-1,
                      timeout_ms=int(OP_TIMEOUT * 1000),
                      topic_data=[{"name": topic, "partition_data": [
                          {"index": 0, "records": batch}]}])
    return resp.responses[0].partition_responses[0]


COORDINATOR_LOADING = (14, 15, 16)  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR


def wait_coordinator(conn, key, key_type=0):
    """FindCoordinator until the coordinator for `key` answers (Kafka creates its internal
    topic on the first FindCoordinator)."""
    deadline = time.monotonic() + OP_TIMEOUT
    while True:
        r = conn.send(FindCoordinatorRequest, 3, key=key, key_type=key_type)
        if r.error_code == 0:
            return
        assert r.error_code in COORDINATOR_LOADING, r
        assert time.monotonic() < deadline, r
        time.sleep(0.2)


def retry_loading(send):
    """Calls `send()` until no partition of its answer is COORDINATOR_LOADING."""
    deadline = time.monotonic() + OP_TIMEOUT
    while True:
        r = send()
        codes = [p.error_code for t in r.topics for p in t.partitions]
        if not any(c in COORDINATOR_LOADING for c in codes):
            return r
        assert time.monotonic() < deadline, r
        time.sleep(0.2)


def codes_by_partition(resp):
    return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


def commit_partitions(offset=5, partitions=(0,)):
    return [{"partition_index": p, "committed_offset": offset, "committed_leader_epoch": -1,
             "committed_metadata": ""} for p in partitions]


# ------------------------------------------------------------------ (a) KIP-467 record errors

def test_produce_null_key_on_compacted_topic_names_each_record(broker):
    """A batch with records lacking a key on a compacted topic is refused whole with
    INVALID_RECORD (87) and a record error (batch_index) for each keyless record;
    nothing is appended."""
    topic = create_topic(broker, uniq("compact"), 1, {"cleanup.policy": "compact"})
    p = produce_raw(broker, topic, record_batch([(b"a", b"1", None), (None, b"2", None),
                                                 (b"c", b"3", None), (None, None, None)]))
    assert p.error_code == INVALID_RECORD, p
    assert [e.batch_index for e in p.record_errors] == [1, 3], p
    assert all("key" in e.batch_index_error_message for e in p.record_errors), p
    assert p.error_message, p
    assert p.base_offset == -1
    assert end_offsets(broker, topic, 1) == {0: 0}
    # compact,delete is compacted too; delete alone takes keyless records
    both = create_topic(broker, uniq("compact-delete"), 1, {"cleanup.policy": "compact,delete"})
    p = produce_raw(broker, both, record_batch([(None, b"x", None)]))
    assert (p.error_code, [e.batch_index for e in p.record_errors]) == (INVALID_RECORD, [0]), p
    plain = create_topic(broker, uniq("delete"), 1)
    assert produce_raw(broker, plain, record_batch([(None, b"x", None)])).error_code == 0


def test_produce_timestamp_outside_window_is_invalid_timestamp(broker):
    """CreateTime records outside [now - message.timestamp.before.max.ms, now +
    message.timestamp.after.max.ms (default 1 h)] fail the batch with INVALID_TIMESTAMP (32)
    naming each such record; LogAppendTime topics take any client timestamp."""
    topic = create_topic(broker, uniq("ts"), 1, {"message.timestamp.before.max.ms": "60000"})
    now = int(time.time() * 1000)
    p = produce_raw(broker, topic, record_batch([(b"a", b"1", now),
                                                 (b"b", b"2", now - 3_600_000),
                                                 (b"c", b"3", now + 2 * 3_600_000)]))
    assert p.error_code == INVALID_TIMESTAMP, p
    assert [e.batch_index for e in p.record_errors] == [1, 2], p
    assert end_offsets(broker, topic, 1) == {0: 0}
    # the default after.max.ms is one hour; before.max.ms is unlimited by default
    dflt = create_topic(broker, uniq("ts-default"), 1)
    p = produce_raw(broker, dflt, record_batch([(b"a", b"1", now + 2 * 3_600_000)]))
    assert (p.error_code, [e.batch_index for e in p.record_errors]) == (INVALID_TIMESTAMP, [0])
    assert produce_raw(broker, dflt, record_batch([(b"a", b"1", 1000)])).error_code == 0
    lat = create_topic(broker, uniq("ts-lat"), 1, {"message.timestamp.type": "LogAppendTime"})
    assert produce_raw(broker, lat, record_batch([(b"a", b"1", now + 9 * 3_600_000)])).error_code == 0


def test_produce_two_batches_for_one_partition_is_invalid_record(broker):
    """A client's produce carries exactly one v2 batch per partition; two are refused
    whole with INVALID_RECORD and no record errors."""
    topic = create_topic(broker, uniq("twobatch"), 1)
    p = produce_raw(broker, topic, record_batch([(b"a", b"1", None)])
                    + record_batch([(b"b", b"2", None)]))
    assert (p.error_code, list(p.record_errors)) == (INVALID_RECORD, []), p
    assert end_offsets(broker, topic, 1) == {0: 0}


def test_clients_see_the_record_errors(broker):
    """librdkafka fails the delivery of a refused batch with INVALID_RECORD /
    INVALID_TIMESTAMP (the whole batch: it does not retry the other records); a batch of
    valid records is delivered."""
    topic = create_topic(broker, uniq("compact"), 1, {"cleanup.policy": "compact"})
    prod = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0,
                     "enable.idempotence": False, "retries": 0,
                     "message.timeout.ms": int(OP_TIMEOUT * 1000)})
    results = {}

    def cb(err, msg):
        results[msg.value()] = err

    prod.produce(topic, key=None, value=b"keyless", on_delivery=cb)
    assert prod.flush(OP_TIMEOUT) == 0
    prod.produce(topic, key=b"k", value=b"keyed", on_delivery=cb)
    assert prod.flush(OP_TIMEOUT) == 0  # one batch each
    prod.produce(topic, key=b"k", value=b"future",
                 timestamp=int(time.time() * 1000) + 2 * 3_600_000, on_delivery=cb)
    assert prod.flush(OP_TIMEOUT) == 0
    assert results[b"keyless"] is not None
    assert results[b"keyless"].code() == KafkaError.INVALID_RECORD, results
    assert results[b"keyed"] is None, results
    assert results[b"future"] is not None
    assert results[b"future"].code() == KafkaError.INVALID_TIMESTAMP, results


# ------------------------------------------------------------------ (b) unknown topics

def test_offset_commit_to_unknown_topic_or_partition(broker):
    """OffsetCommit (v2, v8, v9) and TxnOffsetCommit (v3) answer
    UNKNOWN_TOPIC_OR_PARTITION for a topic that does not exist and for a partition the topic
    does not have; the known partition in the same request is committed; OffsetFetch
    answers no offset (-1) without error for them."""
    topic = create_topic(broker, uniq("commit"), 1)
    missing = uniq("missing")
    group = uniq("g")
    with RawConn(broker) as c:
        wait_coordinator(c, group)
        for v in (2, 8, 9):
            r = retry_loading(lambda: c.send(
                OffsetCommitRequest, v, group_id=group, generation_id_or_member_epoch=-1,
                member_id="", group_instance_id=None, retention_time_ms=-1,
                topics=[{"name": missing, "partitions": commit_partitions()},
                        {"name": topic, "partitions": commit_partitions(5, (7, 0))}]))
            assert codes_by_partition(r) == {(missing, 0): UNKNOWN_TOPIC_OR_PARTITION,
                                             (topic, 7): UNKNOWN_TOPIC_OR_PARTITION,
                                             (topic, 0): 0}, (v, r)
        r = c.send(OffsetFetchRequest, 8, require_stable=False, groups=[
            {"group_id": group, "topics": [{"name": missing, "partition_indexes": [0]},
                                           {"name": topic, "partition_indexes": [0, 7]}]}])
        g = r.groups[0]
        assert g.error_code == 0, r
        got = {(t.name, p.partition_index): (p.committed_offset, p.error_code)
               for t in g.topics for p in t.partitions}
        assert got == {(missing, 0): (-1, 0), (topic, 0): (5, 0), (topic, 7): (-1, 0)}, r

        txn_id = uniq("txn")
        wait_coordinator(c, txn_id, key_type=1)
        deadline = time.monotonic() + OP_TIMEOUT
        while True:
            init = c.send(InitProducerIdRequest, 3, transactional_id=txn_id,
                          transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1)
            if init.error_code == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert init.error_code == 0, init
        pid, epoch = init.producer_id, init.producer_epoch
        add = c.send(AddOffsetsToTxnRequest, 3, transactional_id=txn_id, producer_id=pid,
                     producer_epoch=epoch, group_id=group)
        assert add.error_code == 0, add
        r = retry_loading(lambda: c.send(
            TxnOffsetCommitRequest, 3, transactional_id=txn_id, group_id=group,
            producer_id=pid, producer_epoch=epoch, generation_id=-1, member_id="",
            group_instance_id=None,
            topics=[{"name": missing, "partitions": commit_partitions()},
                    {"name": topic, "partitions": commit_partitions(9, (7, 0))}]))
        assert codes_by_partition(r) == {(missing, 0): UNKNOWN_TOPIC_OR_PARTITION,
                                         (topic, 7): UNKNOWN_TOPIC_OR_PARTITION,
                                         (topic, 0): 0}, r
        end = c.send(EndTxnRequest, 3, transactional_id=txn_id, producer_id=pid,
                     producer_epoch=epoch, committed=False)
        assert end.error_code == 0, end


def test_consumer_commit_to_unknown_topic_fails(broker):
    """librdkafka's synchronous commit reports UNKNOWN_TOPIC_OR_PARTITION for an offset of
    a topic that does not exist."""
    topic = create_topic(broker, uniq("commit"), 1)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": uniq("g"),
                  "enable.auto.commit": False})
    try:
        missing = uniq("missing")
        with pytest.raises(KafkaException) as e:
            c.commit(offsets=[TopicPartition(missing, 0, 5), TopicPartition(topic, 0, 3)],
                     asynchronous=False)
        assert e.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART, e.value
        # the offset of the known topic was committed all the same
        got = c.committed([TopicPartition(topic, 0)], timeout=OP_TIMEOUT)
        assert got[0].offset == 3, got
    finally:
        c.close()


# ------------------------------------------------------------------ (c) static membership

def join_static(conn, group, instance, version, member_id="", metadata=b"\x00\x01sub"):
    deadline = time.monotonic() + OP_TIMEOUT
    while True:
        r = _join_static(conn, group, instance, version, member_id, metadata)
        if r.error_code not in COORDINATOR_LOADING or time.monotonic() > deadline:
            return r
        time.sleep(0.2)


def _join_static(conn, group, instance, version, member_id, metadata):
    return conn.send(JoinGroupRequest, version, group_id=group, session_timeout_ms=30000,
                     rebalance_timeout_ms=30000, member_id=member_id,
                     group_instance_id=instance, protocol_type="consumer",
                     protocols=[{"name": "range", "metadata": metadata}], reason=None)


def sync(conn, group, generation, member_id, instance, version, assignments):
    return conn.send(SyncGroupRequest, version, group_id=group, generation_id=generation,
                     member_id=member_id, group_instance_id=instance,
                     protocol_type="consumer", protocol_name="range",
                     assignments=[{"member_id": m, "assignment": a} for m, a in assignments])


@pytest.mark.parametrize("join_version,sync_version", [(5, 3), (9, 5)])
def test_static_leader_restart_keeps_generation_and_assignment(broker, join_version,
                                                               sync_version):
    """KIP-345: a static member (the leader here) that rejoins a stable group under its
    group.instance.id gets a new member id in the same generation, no rebalance; JoinGroup
    v9+ tells it to skip the assignment (skip_assignment, every member's metadata), v5 names
    the previous leader id and no members so the client acts as a follower; SyncGroup gives
    the standing assignment; the old member id is fenced (FENCED_INSTANCE_ID); a changed
    subscription with the same protocol still does not rebalance; LeaveGroup by instance id
    alone removes it."""
    group = uniq("static")
    with RawConn(broker) as c:
        wait_coordinator(c, group)
        j = join_static(c, group, "i1", join_version)
        assert j.error_code == 0, j
        assert j.leader == j.member_id
        s = sync(c, group, j.generation_id, j.member_id, "i1", sync_version,
                 [(j.member_id, b"A1")])
        assert (s.error_code, s.assignment) == (0, b"A1"), s

        j2 = join_static(c, group, "i1", join_version)
        assert (j2.error_code, j2.generation_id) == (0, j.generation_id), j2
        assert j2.member_id != j.member_id
        if join_version >= 9:
            assert j2.skip_assignment, j2
            assert j2.leader == j2.member_id, j2
            assert [m.group_instance_id for m in j2.members] == ["i1"], j2
        else:
            assert j2.leader == j.member_id, j2
            assert list(j2.members) == [], j2
        h = c.send(HeartbeatRequest, 3, group_id=group, generation_id=j.generation_id,
                   member_id=j.member_id, group_instance_id="i1")
        assert h.error_code == FENCED_INSTANCE_ID, h
        s2 = sync(c, group, j2.generation_id, j2.member_id, "i1", sync_version, [])
        assert (s2.error_code, s2.assignment) == (0, b"A1"), s2

        j3 = join_static(c, group, "i1", join_version, metadata=b"\x00\x01other")
        assert (j3.error_code, j3.generation_id) == (0, j.generation_id), j3
        h = c.send(HeartbeatRequest, 3, group_id=group, generation_id=j3.generation_id,
                   member_id=j3.member_id, group_instance_id="i1")
        assert h.error_code == 0, h

        left = c.send(LeaveGroupRequest, 3, group_id=group,
                      members=[{"member_id": "", "group_instance_id": "i1"}])
        assert left.error_code == 0, left
        assert [(m.group_instance_id, m.error_code) for m in left.members] == [("i1", 0)]
        h = c.send(HeartbeatRequest, 3, group_id=group, generation_id=j3.generation_id,
                   member_id=j3.member_id, group_instance_id="i1")
        assert h.error_code != 0, h


def test_static_member_restart_does_not_revoke_the_others(broker):
    """Two librdkafka consumers with group.instance.id; the first (the group leader)
    closes and a new consumer with its instance id takes its place within the session: it
    gets the same partition back and the other member sees no revoke (no rebalance)."""
    topic = create_topic(broker, uniq("static"), 2)
    group = uniq("static-group")
    events = {"a": [], "b": [], "a2": []}

    def consumer(name, instance):
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                      "group.instance.id": instance, "session.timeout.ms": 30000,
                      "heartbeat.interval.ms": 500, "partition.assignment.strategy": "range",
                      "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        c.subscribe([topic],
                    on_assign=lambda _c, ps: events[name].append(
                        ("assign", sorted(p.partition for p in ps))),
                    on_revoke=lambda _c, ps: events[name].append(
                        ("revoke", sorted(p.partition for p in ps))))
        return c

    def poll_until(consumers, done):
        deadline = time.monotonic() + 60
        while not done():
            assert time.monotonic() < deadline, events
            for c in consumers:
                c.poll(0.1)

    def assigned(name):
        got = [e[1] for e in events[name] if e[0] == "assign"]
        return got[-1] if got else None

    a = consumer("a", "inst-a")
    poll_until([a], lambda: assigned("a") == [0, 1])
    b = consumer("b", "inst-b")
    poll_until([a, b], lambda: assigned("b") and len(assigned("a") or []) == 1
               and sorted(assigned("a") + assigned("b")) == [0, 1])
    a_partitions, b_partitions = assigned("a"), assigned("b")
    b_events = len(events["b"])
    a.close()  # a static member leaves no LeaveGroup behind
    a2 = consumer("a2", "inst-a")
    try:
        poll_until([a2, b], lambda: assigned("a2") is not None)
        assert assigned("a2") == a_partitions, events
        assert events["b"][b_events:] == [], events
        assert assigned("b") == b_partitions
    finally:
        a2.close()
        b.close()


# ------------------------------------------------------------------ more: same requests, same answers

UNSUPPORTED_VERSION = 35
OFFSET_OUT_OF_RANGE = 1
GROUP_ID_NOT_FOUND = 69


def test_list_offsets_special_timestamps_need_their_version(broker):
    """ListOffsets: MAX_TIMESTAMP (-3) needs v7, EARLIEST_LOCAL (-4) v8, LATEST_TIERED (-5)
    v9; below that, and for any other negative timestamp, UNSUPPORTED_VERSION (35) for the
    partition."""
    topic = create_topic(broker, uniq("offsets"), 1)
    assert produce_raw(broker, topic, record_batch([(b"k", b"v", None)])).error_code == 0
    got = {}
    with RawConn(broker) as c:
        for version, ts in ((6, -3), (7, -3), (7, -4), (8, -4), (8, -5), (9, -5), (9, -6),
                            (10, -6), (10, -7), (1, -3), (1, -2), (1, -1)):
            r = c.send(ListOffsetsRequest, version, replica_id=-1, isolation_level=0,
                       topics=[{"name": topic, "partitions": [
                           {"partition_index": 0, "current_leader_epoch": -1, "timestamp": ts}]}])
            got[(version, ts)] = r.topics[0].partitions[0].error_code
    unsupported = {(6, -3), (7, -4), (8, -5), (9, -6), (10, -6), (10, -7), (1, -3)}
    assert got == {k: UNSUPPORTED_VERSION if k in unsupported else 0 for k in got}, got


def test_describe_unknown_group_errs_from_v6_only(broker):
    """DescribeGroups of a group that does not exist: state Dead with no error up to v5,
    GROUP_ID_NOT_FOUND (69) from v6."""
    group = uniq("nobody")
    with RawConn(broker) as c:
        wait_coordinator(c, group)
        deadline = time.monotonic() + OP_TIMEOUT
        for version, code in ((5, 0), (6, GROUP_ID_NOT_FOUND)):
            while True:
                g = c.send(DescribeGroupsRequest, version, groups=[group],
                           include_authorized_operations=False).groups[0]
                if g.error_code not in COORDINATOR_LOADING or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert (g.error_code, g.group_state) == (code, "Dead"), (version, g)


def test_out_of_range_fetch_carries_no_offsets(broker):
    """Fetch (v12) beyond the high watermark or below the log start: OFFSET_OUT_OF_RANGE
    with high watermark, last stable offset and log start offset all -1."""
    topic = create_topic(broker, uniq("range"), 1)
    assert produce_raw(broker, topic, record_batch([(b"k", b"v", None)])).error_code == 0
    with RawConn(broker) as c:
        for offset in (1000, -5):
            r = c.send(FetchRequest, 12, replica_id=-1, max_wait_ms=0, min_bytes=0,
                       max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                       topics=[{"topic": topic, "partitions": [
                           {"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
                            "last_fetched_epoch": -1, "log_start_offset": -1,
                            "partition_max_bytes": 1 << 20}]}],
                       forgotten_topics_data=[], rack_id="")
            p = r.responses[0].partitions[0]
            assert (p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset) \
                == (OFFSET_OUT_OF_RANGE, -1, -1, -1), (offset, p)


def test_failed_produce_with_acks_zero_closes_the_connection(broker):
    """A Produce with acks=0 gets no answer; when it fails (a partition the topic lacks, a
    keyless record on a compacted topic) the broker closes the connection so the producer
    notices; a successful one leaves the connection open."""
    topic = create_topic(broker, uniq("acks0"), 1, {"cleanup.policy": "compact"})
    got = {}
    for name, partition, key in (("ok", 0, b"k"), ("bad_partition", 5, b"k"),
                                 ("keyless", 0, None)):
        with RawConn(broker, timeout=OP_TIMEOUT) as c:
            c.send(ProduceRequest, 9, transactional_id=None, acks=0, timeout_ms=5000,
                   topic_data=[{"name": topic, "partition_data": [
                       {"index": partition, "records": record_batch([(key, b"v", None)])}]}])
            try:
                c.send(ApiVersionsRequest, 3, client_software_name="parity",
                       client_software_version="1")
                got[name] = "open"
            except ConnectionError:
                got[name] = "closed"
    assert got == {"ok": "open", "bad_partition": "closed", "keyless": "closed"}, got


# ------------------------------------------------------------------ (d)-(f) share fetch limits

@pytest.fixture(scope="module")
def java_cp(tmp_path_factory):
    """ShareCheck + ParityShareCheck compiled once; returns the java -cp value."""
    libs = os.environ["KAFKA_LIBS"]  # run.sh fills it
    classes = tmp_path_factory.mktemp("classes")
    subprocess.run(["javac", "-d", str(classes), "-cp", f"{libs}/*",
                    os.path.join(HERE, "java", "ShareCheck.java"),
                    os.path.join(HERE, "java", "ParityShareCheck.java")],
                   check=True, timeout=120)
    return f"{libs}/*:{classes}"


def run_share_check(java_cp, mode, broker, topic):
    """Runs one ParityShareCheck mode; returns {key: int} of its RESULT lines."""
    run = subprocess.run(["java", "-cp", java_cp, "ParityShareCheck", mode, broker.bootstrap,
                          topic, uniq(f"share-{mode}")],
                         capture_output=True, text=True, timeout=150)
    out = run.stdout + run.stderr
    print(run.stdout)
    assert run.returncode == 0, out[-4000:]
    results = {}
    for line in run.stdout.splitlines():
        if line.startswith("RESULT "):
            name = line.split()[1]
            for k, v in re.findall(r"(\w+)=(\d+)", line):
                results[f"{name}.{k}"] = int(v)
    return results


def test_share_fetch_max_bytes_zero_returns_no_records(broker, java_cp):
    """A share consumer with fetch.max.bytes=0 (ShareFetch MaxBytes 0) gets no records and
    acquires none: another consumer of the group then gets all of them."""
    topic = create_topic(broker, uniq("share-maxbytes0"), 1)
    r = run_share_check(java_cp, "maxbytes0", broker, topic)
    assert (r["maxbytes0.zero"], r["maxbytes0.drained"]) == (0, 20), r


def test_share_fetch_record_limit_is_honoured_by_the_broker(broker, java_cp):
    """share.acquire.mode=record_limit with max.poll.records=10: the broker acquires only 10
    records of a 50-record batch for the consumer, so another consumer of the group gets the
    other 40 while the first holds its 10; batch_optimized returns the whole batch."""
    topic = create_topic(broker, uniq("share-limit"), 1)
    r = run_share_check(java_cp, "recordlimit", broker, topic)
    assert (r["recordlimit.first"], r["recordlimit.other"]) == (10, 40), r
    assert r["batchoptimized.first"] == 50, r


def test_share_group_feeds_explicit_and_implicit_consumers(broker, java_cp):
    """An explicit-mode and an implicit-mode consumer of one share group on one partition
    both receive records, every record exactly once between them."""
    topic = create_topic(broker, uniq("share-mixed"), 1)
    r = run_share_check(java_cp, "mixed", broker, topic)
    assert r["mixed.explicit"] > 0 and r["mixed.implicit"] > 0, r
    assert r["mixed.explicit"] + r["mixed.implicit"] == r["mixed.produced"] == r["mixed.distinct"], r
