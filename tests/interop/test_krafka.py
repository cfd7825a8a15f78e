"""krafka 0.28 (pure-Rust client, crates.io) against the broker, through the small driver crate
in ``krafka/`` (one run of its binary per step; it prints one fact per line, checked here).

What is checked, every assertion validated against Apache Kafka 4.4 (INTEROP_TARGET=kafka):

* produce: keyed records on 3 partitions with each codec (none/gzip/snappy/lz4/zstd), placed by
  the Java client's murmur2 partitioning, at the partitions and contiguous offsets the broker
  acknowledged, keys/values/headers intact as confluent-kafka reads them; read back by krafka's
  own consumer as well.
* consumer group: a krafka group member commits, closes; a new member of the same group resumes
  exactly at the committed offsets (no record skipped or repeated); the committed offsets agree
  with what confluent-kafka and krafka's admin client report.
* transactions: krafka's transactional producer commits, aborts, commits; read_committed
  consumers (krafka and confluent-kafka) see exactly the committed records, read_uncommitted sees
  the aborted ones too; and krafka's read_committed consumer reads a confluent-kafka
  transaction the same way.
* admin: describe cluster, create topics (and again -> TOPIC_ALREADY_EXISTS, unknown config ->
  INVALID_CONFIG), list, describe, describe/incremental-alter topic configs with their sources,
  a broker config, create partitions, delete (and again -> UNKNOWN_TOPIC_OR_PARTITION); groups:
  list, describe, committed offsets, lag, delete (and again -> GROUP_ID_NOT_FOUND); ListOffsets
  (earliest, latest, max timestamp) and DeleteRecords; an open and a committed transaction
  through ListTransactions, DescribeTransactions and DescribeProducers.
* exactly once: consume-transform-produce with a read_committed krafka consumer and krafka's
  transactional producer (send_offsets), one transaction aborted and its batch re-read.
* share group: krafka's share consumer in explicit mode (accept, release, redelivery with
  delivery count 2, acknowledgement commits), the group set to earliest and its offsets
  described through krafka's admin.

The driver is built with cargo on first use (``KRAFKA_DRIVER`` names a prebuilt binary instead);
scripts/test.sh builds it before the suite runs so the build time does not count against a test.
"""

import os
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from iutil import OP_TIMEOUT, by_partition, consume_confluent, create_topic, uniq

HERE = Path(__file__).resolve().parent
CRATE = HERE / "krafka"
BROKER_CONFIG = {"num.partitions": "1"}
STEP_TIMEOUT = 90  # seconds for one driver run (the driver bounds itself at 60)
# The first test may build the driver (a cold cargo build takes minutes on a small machine);
# every step after that is bounded by STEP_TIMEOUT, so the tests stay bounded.
pytestmark = pytest.mark.timeout(900)

TOPIC_ALREADY_EXISTS = 36
INVALID_CONFIG = 40
UNKNOWN_TOPIC_OR_PARTITION = 3
GROUP_ID_NOT_FOUND = 69

_BIN = []


def driver():
    if not _BIN:
        path = os.environ.get("KRAFKA_DRIVER")
        if not path:
            build = subprocess.run(
                ["cargo", "build", "--locked", "--quiet", "--manifest-path",
                 str(CRATE / "Cargo.toml")],
                capture_output=True, text=True, timeout=900)
            assert build.returncode == 0, f"building the krafka driver failed:\n{build.stderr}"
            path = str(CRATE / "target" / "debug" / "shoal-krafka-interop")
        _BIN.append(path)
    return _BIN[0]


def krafka(broker, *args):
    """Run one driver step; its stdout lines split into tokens. Fails the test on error."""
    cmd = [driver(), broker.bootstrap, *map(str, args)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=STEP_TIMEOUT,
                         env={**os.environ, "KRAFKA_LOG": os.environ.get("KRAFKA_LOG", "warn")})
    assert out.returncode == 0, (f"krafka {' '.join(map(str, args))} failed "
                                 f"({out.returncode}):\n{out.stdout}\n{out.stderr[-6000:]}")
    return [line.split() for line in out.stdout.splitlines()]


def lines(out, kind):
    return [l[1:] for l in out if l[0] == kind]


def records(out):
    """rec lines -> [(partition, offset, key, value, header)]"""
    return [(int(p), int(o), k, v, h) for p, o, k, v, h in lines(out, "rec")]


def positions(out):
    return {int(p): int(o) for p, o in lines(out, "position")}


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produce_keyed_compressed(broker, codec):
    """krafka's producer: 60 keyed records over 3 partitions, compressed; confluent-kafka and
    krafka read back the same records at the acknowledged partitions and offsets."""
    n = 60
    topic = create_topic(broker, uniq(f"kr-produce-{codec}"), 3)
    acks = [(int(p), int(o), k) for p, o, k in lines(krafka(broker, "produce", topic, n, codec),
                                                       "ack")]
    assert sorted(k for _, _, k in acks) == sorted(f"k{i}" for i in range(n))
    # the Java client's default partitioner (murmur2), as kafka-python implements it
    from kafka.partitioner.default import murmur2
    assert all(p == (murmur2(k.encode()) & 0x7FFFFFFF) % 3 for p, _, k in acks), acks
    parts = by_partition([{"partition": p, "offset": o, "key": k} for p, o, k in acks])
    assert len(parts) == 3, "the keys should spread over all 3 partitions"
    for p, recs in parts.items():
        assert sorted(r["offset"] for r in recs) == list(range(len(recs))), (p, recs)

    got = consume_confluent(broker, topic, 3, n)
    assert len(got) == n
    placed = {(r["partition"], r["offset"]): r for r in got}
    for p, o, k in acks:
        r = placed[(p, o)]
        i = k[1:]
        assert (r["key"], r["value"]) == (k.encode(), f"v{i}".encode())
        assert r["headers"] == [("i", i.encode())]

    out = krafka(broker, "consume", topic, uniq("kr-readback"), n)
    mine = records(out)
    assert sorted((p, o, k) for p, o, k, _, _ in mine) == sorted(acks)
    assert all(v == f"v{k[1:]}" and h == f"i={k[1:]}" for _, _, k, v, h in mine)


def test_group_resumes_at_committed_offsets(broker):
    """A krafka group member reads part of the topic, commits and leaves; the next member of the
    group starts exactly at the committed offsets. The commits are what confluent-kafka's
    committed() and krafka's admin (offsets, lag) report."""
    n = 90
    topic = create_topic(broker, uniq("kr-group"), 3)
    acks = lines(krafka(broker, "produce", topic, n, "lz4"), "ack")
    assert len(acks) == n
    group = uniq("kr-group")

    first = krafka(broker, "consume", topic, group, 10, "--max-poll", 4)
    got1 = records(first)
    assert 10 <= len(got1) < n
    pos1 = positions(first)
    for p, recs in by_partition([{"partition": p, "offset": o} for p, o, *_ in got1]).items():
        offs = [r["offset"] for r in recs]
        assert offs == list(range(len(offs))), (p, offs)
        assert pos1[p] == len(offs)

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        committed = c.committed([TopicPartition(topic, p) for p in range(3)], timeout=OP_TIMEOUT)
    finally:
        c.close()
    assert {tp.partition: max(tp.offset, 0) for tp in committed} == \
        {p: pos1.get(p, 0) for p in range(3)}

    second = krafka(broker, "consume", topic, group, n - len(got1))
    got2 = records(second)
    assert len(got2) == n - len(got1)
    keys = [k for _, _, k, _, _ in got1 + got2]
    assert sorted(keys) == sorted(f"k{i}" for i in range(n)), "a record skipped or repeated"
    for p, recs in by_partition([{"partition": p, "offset": o} for p, o, *_ in got2]).items():
        assert recs[0]["offset"] == pos1.get(p, 0), (p, recs[0], pos1)
    ends = {p: sum(1 for a in acks if int(a[0]) == p) for p in range(3)}
    assert positions(second) == ends

    adm = krafka(broker, "admin-groups", group, topic)
    assert lines(adm, "listed")[0][0] == group
    assert ["protocol=consumer"] == [t for t in lines(adm, "listed")[0] if t.startswith("protocol")]
    (desc,) = lines(adm, "describe")
    assert desc[0] == group and "state=Empty" in desc and "members=0" in desc, desc
    assert {int(p): int(o) for p, o in lines(adm, "offset")} == ends
    for p, committed_, end, lag in lines(adm, "lag"):
        assert committed_ == f"committed={ends[int(p)]}" and end == f"end={ends[int(p)]}"
        assert lag == "lag=0"
    assert lines(adm, "delete") == [[group, "ok"]]
    assert lines(adm, "delete-again") == [[group, "err", str(GROUP_ID_NOT_FOUND)]]


def test_transactions_read_committed(broker):
    """krafka's transactional producer: commit c0-c4, abort a0-a4, commit c5-c9. read_committed
    (krafka and confluent-kafka) sees c0-c9 only; read_uncommitted (krafka) sees the a's too."""
    topic = create_topic(broker, uniq("kr-txn"), 1)
    out = krafka(broker, "txn", topic, uniq("kr-tid"))
    assert [l[0] for l in out] == ["commit", "abort", "commit"]
    committed = [f"c{i}" for i in range(10)]
    aborted = [f"a{i}" for i in range(5)]

    rc = records(krafka(broker, "consume", topic, uniq("kr-rc"), 10, "--isolation", "committed"))
    assert [k for _, _, k, _, _ in rc] == committed
    assert all(v == f"value-{k}" for _, _, k, v, _ in rc)

    ru = records(krafka(broker, "consume", topic, uniq("kr-ru"), 15, "--isolation",
                        "uncommitted"))
    assert [k for _, _, k, _, _ in ru] == committed[:5] + aborted + committed[5:]

    conf = consume_confluent(broker, topic, 1, 10, extra={"isolation.level": "read_committed"})
    assert [r["key"].decode() for r in conf] == committed
    assert [r["offset"] for r in conf] == [o for _, o, _, _, _ in rc]


def test_read_committed_reads_confluent_transactions(broker):
    """A confluent-kafka transaction committed, one aborted, one committed: krafka's
    read_committed consumer gets exactly the committed records, in order."""
    topic = create_topic(broker, uniq("kr-txn-in"), 1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": uniq("cf-tid"),
                  "linger.ms": 5})
    p.init_transactions(OP_TIMEOUT)
    want = []
    for round_, commit in enumerate([True, False, True]):
        p.begin_transaction()
        for i in range(5):
            key = f"r{round_}-{i}"
            p.produce(topic, key=key, value=b"x")
            if commit:
                want.append(key)
        assert p.flush(OP_TIMEOUT) == 0
        if commit:
            p.commit_transaction(OP_TIMEOUT)
        else:
            p.abort_transaction(OP_TIMEOUT)
    got = records(krafka(broker, "consume", topic, uniq("kr-rc-in"), len(want), "--isolation",
                         "committed"))
    assert [k for _, _, k, _, _ in got] == want


def test_admin_topics_and_configs(broker):
    """krafka's admin client on topics and configs, with the error codes Kafka gives."""
    topic = uniq("kr-admin")
    out = krafka(broker, "admin-topics", topic)
    (cluster,) = lines(out, "cluster")
    assert cluster[0] == "brokers=1"
    assert lines(out, "create-first") == [[topic, "ok"]]
    assert lines(out, "create-again") == [[topic, "err", str(TOPIC_ALREADY_EXISTS)]]
    assert lines(out, "create-badconf") == [[f"{topic}-badconf", "err", str(INVALID_CONFIG)]]
    assert lines(out, "listed") == [["true"]]
    (desc,) = lines(out, "describe")
    assert desc == [topic, "partitions=3", "internal=false", "leaders=0:1,1:1,2:1"], desc

    after = out.index(["after-alter"])
    # [value, source]: the wire's is_default exists only in DescribeConfigs v0
    before = {l[1]: l[2:4] for l in out[:after] if l[0] == "config"}
    assert before["retention.ms"] == ["3600000", "source=1"]
    assert before["cleanup.policy"] == ["delete", "source=5"]
    assert before["max.message.bytes"] == ["1048588", "source=5"]
    assert lines(out, "alter") == [[topic, "ok"]]
    altered = {l[1]: l[2:4] for l in out[after:] if l[0] == "config"}
    assert altered["cleanup.policy"] == ["compact", "source=1"]
    assert altered["retention.ms"] == ["604800000", "source=5"]
    assert lines(out, "alter-badkey") == [[topic, "err", str(INVALID_CONFIG)]]

    assert lines(out, "broker-config") == [["num.partitions", BROKER_CONFIG["num.partitions"]]]
    assert lines(out, "create-partitions") == [[topic, "ok"]]
    assert lines(out, "describe-after-grow") == [[topic, "partitions=5"]]
    assert lines(out, "delete") == [[topic, "ok"]]
    assert lines(out, "delete-again") == [[topic, "err", str(UNKNOWN_TOPIC_OR_PARTITION)]]


def test_share_group_explicit_acks(broker):
    """krafka's share consumer (KIP-932, explicit mode) in a group set to earliest through krafka's
    admin: 10 records delivered once each (delivery count 1), the 5 released ones delivered again
    with count 2, every acknowledgement commit succeeds, and the group's share-partition lag is
    then 0 (DescribeShareGroupOffsets)."""
    n = 10
    topic = create_topic(broker, uniq("kr-share"), 1)
    assert len(lines(krafka(broker, "produce", topic, n, "none"), "ack")) == n
    out = krafka(broker, "share", topic, uniq("kr-share"), n)
    recs = [(int(p), int(o), k, int(dc)) for p, o, k, dc in lines(out, "rec")]
    firsts = sorted(o for _, o, _, dc in recs if dc == 1)
    again = sorted(o for _, o, _, dc in recs if dc == 2)
    assert firsts == list(range(n)), recs
    assert again == list(range(1, n, 2)), recs
    assert len(recs) == n + n // 2, recs
    commits = lines(out, "commit")
    assert commits and all(c == ["0", "ok"] for c in commits), commits
    # Kafka 4.4 reports the persisted start offset, which may trail the last acknowledgements
    # (seen 1 and 3 here), but the lag is 0 once every record is acknowledged.
    (offset,) = lines(out, "share-offset")
    assert offset[0] == "0" and offset[2] == "lag=0", offset
    assert 0 < int(offset[1].split("=")[1]) <= n, offset


def test_admin_offsets_and_delete_records(broker):
    """krafka's admin ListOffsets (earliest, latest, max timestamp) and DeleteRecords on 3
    partitions: the log start moves to 2 everywhere, the end stays at the produced count."""
    topic = create_topic(broker, uniq("kr-offsets"), 3)
    acks = lines(krafka(broker, "produce", topic, 30, "none"), "ack")
    ends = {p: sum(1 for a in acks if int(a[0]) == p) for p in range(3)}
    assert all(e >= 2 for e in ends.values()), ends
    out = krafka(broker, "admin-offsets", topic, 3)
    assert {int(p): int(o) for p, o, _ in lines(out, "earliest")} == {0: 0, 1: 0, 2: 0}
    assert {int(p): int(o) for p, o, _ in lines(out, "latest")} == ends
    maxts = {int(l[0]): l[1:] for l in lines(out, "max-timestamp")}
    assert sorted(maxts) == [0, 1, 2] and all(v[0] != "err" and 0 <= int(v[0]) < ends[p]
                                             for p, v in maxts.items()), maxts
    assert lines(out, "delete-records") == [[str(p), "low=2"] for p in range(3)]
    assert {int(p): int(o) for p, o, _ in lines(out, "earliest-after-delete")} == \
        {0: 2, 1: 2, 2: 2}


def test_admin_transactions(broker):
    """An open krafka transaction through krafka's admin: ListTransactions and
    DescribeTransactions say Ongoing with the partition, DescribeProducers gives the
    transaction's first offset; after the commit: CompleteCommit, no partition, no open
    transaction."""
    topic = create_topic(broker, uniq("kr-admin-txn"), 1)
    tid = uniq("kr-admin-tid")
    out = krafka(broker, "admin-txn", topic, tid)
    (sent,) = lines(out, "sent")
    assert lines(out, "open-listed") == [[tid, "Ongoing"]]
    assert lines(out, "open-described") == [[tid, "Ongoing", f"partitions={topic}-0"]]
    assert lines(out, "open-producer") == [["0", f"start={sent[1]}"]]
    assert lines(out, "committed-listed") == [[tid, "CompleteCommit"]]
    assert lines(out, "committed-described") == [[tid, "CompleteCommit", "partitions=-"]]
    assert lines(out, "committed-producer") == [["0", "start=-1"]]


def test_consume_transform_produce_exactly_once(broker):
    """krafka read_committed consumer + transactional producer with send_offsets: 30 records over
    2 partitions copied upper-cased, the first batch's transaction aborted and re-read. The
    output read_committed holds each record once; read_uncommitted also shows the aborted
    copies; the group's committed offsets are the input's end offsets."""
    n = 30
    src = create_topic(broker, uniq("kr-eos-in"), 2)
    dst = create_topic(broker, uniq("kr-eos-out"), 2)
    acks = lines(krafka(broker, "produce", src, n, "none"), "ack")
    ends = {p: sum(1 for a in acks if int(a[0]) == p) for p in range(2)}
    group = uniq("kr-eos")
    out = krafka(broker, "copy", src, dst, group, uniq("kr-eos-tid"), n)
    (aborted,) = lines(out, "aborted")
    assert sum(int(c) for (c,) in lines(out, "committed")) == n

    got = consume_confluent(broker, dst, 2, n, extra={"isolation.level": "read_committed"})
    assert sorted(r["key"].decode() for r in got) == sorted(f"k{i}" for i in range(n))
    assert all(r["value"] == f"V{r['key'].decode()[1:]}".encode() for r in got)
    everything = consume_confluent(broker, dst, 2, n + int(aborted[0]),
                                   extra={"isolation.level": "read_uncommitted"})
    assert len(everything) == n + int(aborted[0])

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        committed = c.committed([TopicPartition(src, p) for p in range(2)], timeout=OP_TIMEOUT)
    finally:
        c.close()
    assert {tp.partition: tp.offset for tp in committed} == ends
