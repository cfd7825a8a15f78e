"""Answers where Shoal and Kafka 4.4 used to differ, pinned with raw requests at fixed
versions (kafka-python's message classes) and with the clients that see them.

Every test here was validated against Apache Kafka 4.4 first (INTEROP_TARGET=kafka)."""

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from iutil import OP_TIMEOUT, create_topic, end_offsets, uniq
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest
from kafka.protocol.consumer.group import (HeartbeatRequest, JoinGroupRequest,
                                           LeaveGroupRequest, OffsetCommitRequest,
                                           OffsetFetchRequest, SyncGroupRequest)
from kafka.protocol.producer.produce import ProduceRequest
from kafka.protocol.producer.transaction import (AddOffsetsToTxnRequest, EndTxnRequest,
                                                 InitProducerIdRequest,
                                                 TxnOffsetCommitRequest)
from rawproto import RawConn, record_batch

BROKER_CONFIG = {"num.partitions": "1"}

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
    """librdkafka fails the delivery of the refused batch with INVALID_RECORD /
    INVALID_TIMESTAMP; records in other batches are delivered."""
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
