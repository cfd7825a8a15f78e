"""Our own Rust client (shoal-client: Producer, ShareConsumer, Admin) against real third-party
clients, through the example ``crates/client/examples/client_driver.rs`` (one run per step; it
prints one JSON object per line, checked here). Every assertion was validated against Apache
Kafka 4.4 (INTEROP_TARGET=kafka) first, so a failure against Shoal is Shoal's bug.

* Records written by confluent-kafka (``partitioner: murmur2_random``, Java's), kafka-python
  (murmur2 by default) and the Java client (``java/KeyedProduce.java``) with keys, binary
  values, repeated headers and explicit timestamps are read by our share consumer (explicit
  ACCEPT) with every field intact, each delivered once with delivery count 1; the same keys
  land on the same partition from all four producers.
* confluent-kafka's batches with every codec are inflated by our share consumer, intact.
* Our producer writes keyed records with every codec; confluent-kafka's classic consumer reads
  them back at the acknowledged partitions and offsets, null header value included.
* Our transactional producer commits, aborts, commits: read_committed (confluent-kafka) sees
  exactly the committed records, read_uncommitted all of them.
* Zombie fencing: a second instance of our producer with the same transactional.id fences the
  first; the first's commit fails with a fatal error and its open transaction never becomes
  visible to read_committed.
* Our share consumer in a group with share.isolation.level read_committed gets only our
  committed transactions' records (markers and aborted records settled as GAPs), with
  read_uncommitted all of them.
* Our share consumer and librdkafka's ShareConsumer in one share group: every record accepted
  exactly once across both, each got some.
* RELEASE comes back with delivery count 2 (to a librdkafka consumer), REJECT never, RENEW keeps
  a record held past several lock durations until it is accepted; DescribeShareGroupOffsets
  through our admin then shows lag 0.
* Our share consumer SIGKILLed holding records: another consumer gets them with count 2 (Kafka
  drops the share session with the connection and releases at once; at the latest, the
  acquisition lock expires). Alive and holding them unacknowledged: they come back to another
  consumer with count 2 once the lock duration has passed, not before.
* Our producer with a header key repeated (d=1, x=null, d=2): read back in order.

The driver is built with ``cargo build --example client_driver -p shoal-client`` on first use
into the workspace's target dir (``CARGO_TARGET_DIR`` honoured; ``CLIENT_DRIVER=/path`` uses a
prebuilt one).
"""

import json
import os
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import AcknowledgeType, KafkaException, Producer, ShareConsumer

from iutil import OP_TIMEOUT, admin, consume_confluent, create_topic, uniq

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
BROKER_CONFIG = {
    "num.partitions": "1",
    # lets a group use a short share.record.lock.duration.ms (Kafka's default minimum is
    # 15000; a group value below the broker's minimum is INVALID_CONFIG)
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.min.heartbeat.interval.ms": "1000",
    "group.share.heartbeat.interval.ms": "1000",
}
STEP_TIMEOUT = 90  # seconds for one driver run (the driver bounds itself at 60)
# The first test may build the driver; every step after that is bounded by STEP_TIMEOUT.
pytestmark = pytest.mark.timeout(900)

# Explicit record timestamps, 10 minutes ago and on: far older ones would let Kafka delete the
# segment at once (retention.ms, 7 days, counts from the largest timestamp in it).
TS0 = (int(time.time()) - 600) * 1000  # the driver's first record timestamp
TS_CONFLUENT = TS0 + 100_000
TS_KP = TS0 + 200_000
TS_JAVA = TS0 + 300_000
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
LOCK_MS = 3000                   # share.record.lock.duration.ms where a test needs it
QUIET = 3.0

_BIN = []


def driver():
    if not _BIN:
        path = os.environ.get("CLIENT_DRIVER")
        if not path:
            build = subprocess.run(
                ["nice", "cargo", "build", "--locked", "--quiet", "--example", "client_driver",
                 "-p", "shoal-client"],
                cwd=REPO, capture_output=True, text=True, timeout=900)
            assert build.returncode == 0, f"building client_driver failed:\n{build.stderr}"
            target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
            path = str(target / "debug" / "examples" / "client_driver")
        _BIN.append(path)
    return _BIN[0]


def run(broker, cmd, *args):
    """One driver step to its end; its lines as dicts. Fails the test on a non-zero exit."""
    argv = [driver(), cmd, broker.bootstrap, *map(str, args)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=STEP_TIMEOUT)
    assert out.returncode == 0, (f"client_driver {cmd} {' '.join(map(str, args))} failed "
                                 f"({out.returncode}):\n{out.stdout}\n{out.stderr[-6000:]}")
    return [json.loads(line) for line in out.stdout.splitlines()]


def _die_with_parent():
    """preexec_fn: SIGKILL the driver if the pytest process dies (Linux)."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort only
        pass


class Live:
    """A driver step running beside the test: its lines arrive on a queue as they come."""

    def __init__(self, broker, cmd, *args):
        self.proc = subprocess.Popen(
            [driver(), cmd, broker.bootstrap, *map(str, args)], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
            preexec_fn=_die_with_parent)
        self.events = queue.Queue()
        self.lines = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            ev = json.loads(line)
            self.lines.append(ev)
            self.events.put(ev)
        self.events.put({"kind": "exit"})

    def expect(self, kind, timeout=OP_TIMEOUT):
        deadline = time.monotonic() + timeout
        while True:
            try:
                ev = self.events.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"driver: no {kind!r} within {timeout}s: "
                                     f"{self.lines[-5:]}") from None
            if ev["kind"] == "exit":
                raise AssertionError(f"driver exited before {kind!r}: {self.finish()}")
            if ev["kind"] == kind:
                return ev

    def finish(self, timeout=STEP_TIMEOUT):
        """Waits for the exit; the exit code and stderr's tail."""
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
            rc = "killed after timeout"
        return rc, self.proc.stderr.read()[-6000:]

    def kill9(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)


def of(lines, kind):
    return [line for line in lines if line["kind"] == kind]


def unhex(v):
    return None if v is None else bytes.fromhex(v)


def rec_tuple(r):
    """A driver rec line -> (partition, offset, key, value, headers, timestamp)."""
    return (r["partition"], r["offset"], unhex(r["key"]), unhex(r["value"]),
            [(k, unhex(v)) for k, v in r["headers"]], r["timestamp"])


def accepted(lines, kinds=("accept",)):
    """(partition, offset) of every acknowledgement of `kinds` the broker confirmed."""
    out = []
    for c in of(lines, "commit"):
        assert c["error"] is None, c
        out += [(p, o) for p, o, t in c["acks"] if t in kinds]
    return out


def murmur2_partition(key, partitions):
    from kafka.partitioner.default import murmur2
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def java_produce(broker, topic, n, ts0, tmp_path):
    """java/KeyedProduce.java (kafka-clients from the reference jars): its ack lines."""
    libs = os.environ.get("KAFKA_LIBS") or subprocess.run(
        [str(HERE / "kafka_ref" / "fetch.sh")], check=True, capture_output=True, text=True,
        timeout=600).stdout.strip().splitlines()[-1]
    classes = tmp_path / "classes"
    classes.mkdir()
    subprocess.run(["javac", "-d", str(classes), "-cp", f"{libs}/*",
                    str(HERE / "java" / "KeyedProduce.java")], check=True, timeout=120)
    out = subprocess.run(["java", "-cp", f"{libs}/*:{classes}", "KeyedProduce",
                          broker.bootstrap, topic, str(n), str(ts0)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    return [line for line in out.stdout.splitlines() if line.startswith("ack ")]


def set_group_configs(broker, group, configs):
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
    a = admin(broker)
    entries = [ConfigEntry(k, str(v), incremental_operation=AlterConfigOpType.SET)
               for k, v in configs.items()]
    (fut,) = a.incremental_alter_configs(
        [ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)],
        request_timeout=OP_TIMEOUT).values()
    fut.result(timeout=OP_TIMEOUT)


def produce_values(broker, topic, values, **extra):
    """confluent-kafka: one record per value; [(partition, offset)] in order."""
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, **extra})
    acks = [None] * len(values)

    def dr(i):
        def cb(err, msg):
            assert err is None, err
            acks[i] = (msg.partition(), msg.offset())
        return cb

    for i, v in enumerate(values):
        p.produce(topic, value=v.encode(), on_delivery=dr(i))
    assert p.flush(OP_TIMEOUT) == 0
    assert None not in acks
    return acks


def check_commit(result):
    bad = {f"{tp.topic}[{tp.partition}]": str(e) for tp, e in result.items() if e is not None}
    assert not bad, f"acknowledgement commit failed: {bad}"


def share_consumer(broker, group, topic):
    c = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    return c


def poll_accept(c, seconds, into, stop=lambda _r: False):
    """Polls for `seconds` (or until stop(into)), accepting and committing every record;
    appends (partition, offset, value, delivery_count) to `into`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not stop(into):
        msgs = c.poll(0.3)
        for m in msgs:
            if m.error():
                raise KafkaException(m.error())
            into.append((m.partition(), m.offset(), m.value().decode(), m.delivery_count()))
            c.acknowledge(m, AcknowledgeType.ACCEPT)
        if msgs:
            check_commit(c.commit_sync(OP_TIMEOUT))
    return into


# -------------------------------------------------------------------- 1. records
def test_third_party_records_read_by_share_consumer(broker, tmp_path):
    """confluent-kafka (murmur2_random), kafka-python and the Java client write keyed records
    with binary values, headers (repeated, empty and null values) and timestamps; our producer
    writes the same keys. Every key is on the same partition from all four (Java's murmur2), and
    our share consumer reads every record once, intact, with delivery count 1."""
    from kafka import KafkaProducer
    n = 30
    topic = create_topic(broker, uniq("rc-third-party"), 3)
    expected = {}  # (partition, offset) -> (key, value, headers, timestamp)
    placed = {"confluent": {}, "kafka-python": {}, "java": {}, "shoal": {}}

    p = Producer({"bootstrap.servers": broker.bootstrap, "partitioner": "murmur2_random",
                  "linger.ms": 5})
    pending = {}

    def dr(err, msg):
        assert err is None, err
        pending[msg.key()] = (msg.partition(), msg.offset())

    cf_headers = {}
    for i in range(n):
        key = f"key-{i}".encode()
        headers = [("src", b"confluent"), ("i", str(i).encode()), ("dup", b"1"),
                   ("dup", b"2"), ("empty", b""), ("nil", None)]
        cf_headers[key] = headers
        p.produce(topic, key=key, value=f"cf-{i}".encode() + b"\x00\xff", headers=headers,
                  timestamp=TS_CONFLUENT + i, on_delivery=dr)
    assert p.flush(OP_TIMEOUT) == 0
    for key, (part, off) in pending.items():
        i = int(key[4:])
        placed["confluent"][key] = part
        expected[(part, off)] = (key, f"cf-{i}".encode() + b"\x00\xff", cf_headers[key],
                                 TS_CONFLUENT + i)

    kp = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)
    try:
        futs = []
        for i in range(n):
            key = f"key-{i}".encode()
            headers = [("src", b"kafka-python"), ("i", str(i).encode()), ("dup", b"x"),
                       ("dup", b"y")]
            futs.append((i, key, headers, kp.send(topic, key=key, value=f"kp-{i}".encode(),
                                                  headers=headers, timestamp_ms=TS_KP + i)))
        for i, key, headers, f in futs:
            md = f.get(timeout=OP_TIMEOUT)
            placed["kafka-python"][key] = md.partition
            expected[(md.partition, md.offset)] = (key, f"kp-{i}".encode(), headers, TS_KP + i)
    finally:
        kp.close()

    for line in java_produce(broker, topic, n, TS_JAVA, tmp_path):
        _, key, part, off = line.split()
        i = int(key[4:])
        placed["java"][key.encode()] = int(part)
        expected[(int(part), int(off))] = (key.encode(), f"java-{i}".encode(),
                                           [("src", b"java")], TS_JAVA + i)

    for a in of(run(broker, "produce", topic, n, "lz4", TS0), "ack"):
        key = a["key"].encode()
        i = int(a["key"][4:])
        placed["shoal"][key] = a["partition"]
        assert a["timestamp"] in (TS0 + i, -1), a
        expected[(a["partition"], a["offset"])] = (
            key, f"rs-lz4-{i}".encode() + b"\x00\xff",
            [("i", str(i).encode()), ("n", None)], TS0 + i)

    assert len(expected) == 4 * n
    java = {f"key-{i}".encode(): murmur2_partition(f"key-{i}".encode(), 3) for i in range(n)}
    assert len(set(java.values())) == 3, "the keys should spread over all 3 partitions"
    for client, parts in placed.items():
        assert parts == java, client

    group = uniq("rc-read")
    out = run(broker, "share", topic, group, "--config", "share.auto.offset.reset=earliest",
              "--max", 4 * n)
    recs = [rec_tuple(r) for r in of(out, "rec")]
    assert all(r["dc"] == 1 for r in of(out, "rec"))
    got = {(p_, o): (k, v, h, ts) for p_, o, k, v, h, ts in recs}
    assert len(got) == len(recs) == 4 * n, "a record delivered twice"
    assert got == expected
    assert sorted(accepted(out)) == sorted(expected)
    assert of(out, "done") == [{"kind": "done", "acked": 4 * n}]


@pytest.mark.parametrize("codec", CODECS)
def test_compressed_third_party_read_by_share_consumer(broker, codec):
    """confluent-kafka's producer with each codec (one batch of 50 keyed records with headers):
    our share consumer inflates it and reads every record intact."""
    n = 50
    topic = create_topic(broker, uniq(f"rc-codec-{codec}"), 1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec,
                  "linger.ms": 100})
    acks = {}

    def dr(err, msg):
        assert err is None, err
        acks[msg.offset()] = msg.key()

    for i in range(n):
        p.produce(topic, key=f"key-{i}".encode(), value=f"{codec}-{i}".encode() * 20,
                  headers=[("i", str(i).encode())], timestamp=TS_CONFLUENT + i, on_delivery=dr)
    assert p.flush(OP_TIMEOUT) == 0
    assert sorted(acks) == list(range(n))
    out = run(broker, "share", topic, uniq("rc-codec"), "--config",
              "share.auto.offset.reset=earliest", "--max", n)
    got = sorted(rec_tuple(r) for r in of(out, "rec"))
    assert got == [(0, o, acks[o], f"{codec}-{int(acks[o][4:])}".encode() * 20,
                    [("i", acks[o][4:])], TS_CONFLUENT + int(acks[o][4:])) for o in range(n)]
    assert sorted(accepted(out)) == [(0, o) for o in range(n)]


@pytest.mark.parametrize("codec", CODECS)
def test_our_producer_read_by_confluent(broker, codec):
    """Our producer, each codec: 40 keyed records over 3 partitions at murmur2's partitions,
    contiguous offsets; confluent-kafka's consumer reads each intact at its acknowledged place."""
    n = 40
    topic = create_topic(broker, uniq(f"rc-produce-{codec}"), 3)
    acks = of(run(broker, "produce", topic, n, codec, TS0), "ack")
    assert sorted(a["key"] for a in acks) == sorted(f"key-{i}" for i in range(n))
    for a in acks:
        assert a["partition"] == murmur2_partition(a["key"].encode(), 3), a
    for part in range(3):
        offs = sorted(a["offset"] for a in acks if a["partition"] == part)
        assert offs == list(range(len(offs))), (part, offs)

    got = consume_confluent(broker, topic, 3, n)
    assert len(got) == n
    at = {(r["partition"], r["offset"]): r for r in got}
    for a in acks:
        r = at[(a["partition"], a["offset"])]
        i = int(a["key"][4:])
        assert r["key"] == a["key"].encode()
        assert r["value"] == f"rs-{codec}-{i}".encode() + b"\x00\xff"
        assert r["headers"] == [("i", str(i).encode()), ("n", None)]
        assert (r["ts_type"], r["ts"]) == ("create", TS0 + i)


def test_our_producer_repeated_header_keys(broker):
    """A record with headers d=1, x=null, d=2 (a key repeated, as Kafka allows) is read back by
    confluent-kafka with every header in order."""
    topic = create_topic(broker, uniq("rc-headers"), 1)
    (a,) = of(run(broker, "produce-headers", topic), "ack")
    (r,) = consume_confluent(broker, topic, 1, 1)
    assert (r["offset"], r["key"]) == (a["offset"], b"h")
    assert r["headers"] == [("d", b"1"), ("x", None), ("d", b"2")]


# ------------------------------------------------------------------ 2. transactions
def test_transactions_read_committed(broker):
    """Our transactional producer commits c0-c4, aborts a0-a4, commits c5-c9: read_committed
    sees c0-c9, read_uncommitted all 15 in the order written."""
    topic = create_topic(broker, uniq("rc-txn"), 1)
    out = run(broker, "txn", topic, uniq("rc-tid"))
    assert [line["kind"] for line in out] == ["commit", "abort", "commit"]
    committed = [f"c{i}" for i in range(10)]
    aborted = [f"a{i}" for i in range(5)]

    rc = consume_confluent(broker, topic, 1, 100, timeout=5,
                           extra={"isolation.level": "read_committed"})
    assert [r["key"].decode() for r in rc] == committed
    assert all(r["value"] == b"value-" + r["key"] for r in rc)
    ru = consume_confluent(broker, topic, 1, 15, extra={"isolation.level": "read_uncommitted"})
    assert [r["key"].decode() for r in ru] == committed[:5] + aborted + committed[5:]


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_share_consumer_isolation(broker, isolation):
    """Our transactions (c0-c4 committed, a0-a4 aborted, c5-c9 committed) read by our share
    consumer in a group with share.isolation.level: read_committed delivers c0-c9 only (the
    markers and the aborted records are acquired without a record, and acknowledged as GAP by
    the client), read_uncommitted all 15; a librdkafka consumer of the group then gets
    nothing, so every offset was settled."""
    topic = create_topic(broker, uniq("rc-iso"), 1)
    run(broker, "txn", topic, uniq("rc-tid"))
    want = [f"c{i}" for i in range(10)]
    if isolation == "read_uncommitted":
        want = want[:5] + [f"a{i}" for i in range(5)] + want[5:]
    group = uniq("rc-iso")
    out = run(broker, "share", topic, group, "--config", "share.auto.offset.reset=earliest",
              "--config", f"share.isolation.level={isolation}", "--max", len(want))
    recs = of(out, "rec")
    assert [unhex(r["key"]).decode() for r in recs] == want
    assert all(r["dc"] == 1 for r in recs)
    c = share_consumer(broker, group, topic)
    try:
        assert poll_accept(c, QUIET + 2, []) == []
    finally:
        c.close()


# ---------------------------------------------------------------- 3. zombie fencing
def test_zombie_fenced(broker):
    """Two instances of our transactional producer with one transactional.id: the second's
    InitProducerId fences the first, whose commit then fails with a fatal error (and so does
    anything after it); the first's open transaction (z0-z4) is aborted and never visible to
    read_committed, the second's (n0-n4) is."""
    topic = create_topic(broker, uniq("rc-fence"), 1)
    out = run(broker, "fence", topic, uniq("rc-tid"))
    kinds = [line["kind"] for line in out]
    assert kinds == ["open", "init", "fenced", "fenced", "commit"], out
    (pid_a, epoch_a), (pid_b, epoch_b) = out[0]["epoch"], out[1]["epoch"]
    assert pid_b == pid_a and epoch_b > epoch_a, out
    commit, begin = of(out, "fenced")
    assert commit["step"] == "commit" and commit["fatal"] is True, commit
    assert commit["code"] == PRODUCER_FENCED, commit
    assert begin["step"] == "begin" and begin["fatal"] is True, begin
    assert of(out, "commit")[0]["keys"] == [f"n{i}" for i in range(5)]

    rc = consume_confluent(broker, topic, 1, 100, timeout=5,
                           extra={"isolation.level": "read_committed"})
    assert [r["key"].decode() for r in rc] == [f"n{i}" for i in range(5)]
    ru = consume_confluent(broker, topic, 1, 10, extra={"isolation.level": "read_uncommitted"})
    assert [r["key"].decode() for r in ru] == [f"z{i}" for i in range(5)] + \
        [f"n{i}" for i in range(5)]


PRODUCER_FENCED = 90


# --------------------------------------------------- 4. beside librdkafka's consumer
def test_share_group_with_librdkafka(broker):
    """Our share consumer and confluent-kafka's ShareConsumer in one group on 2 partitions,
    records produced in small batches until both got some: every record is accepted exactly
    once across the two (none twice, none missing)."""
    topic = create_topic(broker, uniq("rc-mixed"), 2)
    group = uniq("rc-mixed")
    set_group_configs(broker, group, {"share.auto.offset.reset": "earliest"})
    ours = Live(broker, "share", topic, group, "--idle", 5, "--timeout", 80)
    theirs, errors, halt = [], [], threading.Event()

    def librdkafka():
        c = share_consumer(broker, group, topic)
        try:
            while not halt.is_set():
                poll_accept(c, 0.5, theirs)
        except Exception as e:  # noqa: BLE001 - reported by the test
            errors.append(e)
        finally:
            c.close()

    t = threading.Thread(target=librdkafka, daemon=True)
    t.start()
    try:
        produced = []
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            both = theirs and of(ours.lines, "rec")
            if both and len(produced) >= 400:
                break
            for _ in range(10):
                v = f"q-{len(produced)}"
                p.produce(topic, value=v.encode(), partition=len(produced) % 2)
                produced.append(v)
            p.flush(OP_TIMEOUT)
            time.sleep(0.05)
        assert p.flush(OP_TIMEOUT) == 0

        def seen():
            return len(theirs) + len(of(ours.lines, "rec"))
        deadline = time.monotonic() + OP_TIMEOUT
        while seen() < len(produced) and time.monotonic() < deadline:
            time.sleep(0.2)
        rc, err = ours.finish()
        assert rc == 0, (rc, err)
    finally:
        halt.set()
        t.join(OP_TIMEOUT + 10)
        if ours.proc.poll() is None:
            ours.kill9()
    assert not errors, errors
    mine = [(r["partition"], r["offset"], unhex(r["value"]).decode())
            for r in of(ours.lines, "rec")]
    assert mine and theirs, ("each consumer should get some", len(mine), len(theirs))
    values = [v for _, _, v in mine] + [v for _, _, v, _ in theirs]
    assert len(values) == len(set(values)), "a record delivered to both"
    assert sorted(values) == sorted(produced)
    ours_acked = accepted(ours.lines)
    assert sorted(ours_acked) == sorted((p_, o) for p_, o, _ in mine)
    assert all(dc == 1 for *_, dc in theirs) and all(r["dc"] == 1 for r in of(ours.lines, "rec"))


# ------------------------------------------------------------- 5. release/reject/renew
def test_release_reject_renew(broker):
    """One batch r0-r5 acquired by our consumer: r1 RELEASEd comes back to a librdkafka
    consumer of the group with delivery count 2; r2 REJECTed is never redelivered; r3 RENEWed
    every second for 3 lock durations stays with us, then is ACCEPTed; the rest ACCEPTed.
    DescribeShareGroupOffsets (our admin) then shows every record done."""
    topic = create_topic(broker, uniq("rc-acks"), 1)
    produce_values(broker, topic, [f"r{i}" for i in range(6)], **{"linger.ms": 200})
    group = uniq("rc-acks")
    renew_s = 3 * LOCK_MS / 1000
    ours = Live(broker, "share", topic, group, "--config", "share.auto.offset.reset=earliest",
                "--config", f"share.record.lock.duration.ms={LOCK_MS}", "--release", "r1",
                "--reject", "r2", "--renew", "r3", "--renew-for", renew_s, "--max", 5)
    first = ours.expect("commit")
    assert sorted(first["acks"]) == sorted(
        [[0, 0, "accept"], [0, 1, "release"], [0, 2, "reject"], [0, 3, "renew"],
         [0, 4, "accept"], [0, 5, "accept"]]), first
    assert first["error"] is None
    theirs = []
    c = share_consumer(broker, group, topic)
    try:
        poll_accept(c, renew_s, theirs)
        rc, err = ours.finish()
        assert rc == 0, (rc, err)
        poll_accept(c, QUIET, theirs)
    finally:
        c.close()
    assert theirs == [(0, 1, "r1", 2)]
    recs = of(ours.lines, "rec")
    assert [(r["offset"], unhex(r["value"]).decode(), r["dc"]) for r in recs] == \
        [(i, f"r{i}", 1) for i in range(6)]
    assert all(r["lock_ms"] == LOCK_MS for r in recs), recs
    renewed = of(ours.lines, "renewed")
    assert len(renewed) >= 2 and all(r["error"] is None and r["offset"] == 3 for r in renewed)
    assert sorted(accepted(ours.lines)) == [(0, 0), (0, 3), (0, 4), (0, 5)]
    assert accepted(ours.lines, ("reject",)) == [(0, 2)]

    # Kafka reports the persisted start offset, which may trail the acknowledgements (3 seen
    # here on 4.4); the lag is 0 once every record is done.
    deadline = time.monotonic() + 15
    while True:
        (offset,) = of(run(broker, "share-offsets", group, topic, 1), "offset")
        if offset["lag"] == 0:
            break
        assert time.monotonic() < deadline, offset
        time.sleep(0.5)
    assert offset["partition"] == 0 and 0 <= offset["start"] <= 6, offset


# ------------------------------------------------------------- 6. killed while holding
def test_killed_consumer_records_redelivered(broker):
    """Our consumer acquires records and is SIGKILLed without acknowledging; a librdkafka
    consumer of the group then gets every one of them with delivery count 2, within the lock
    duration (Kafka releases a dead connection's records at once)."""
    topic = create_topic(broker, uniq("rc-kill"), 1)
    produce_values(broker, topic, [f"h{i}" for i in range(10)], **{"linger.ms": 200})
    group = uniq("rc-kill")
    lock_ms = 5000
    ours = Live(broker, "share", topic, group, "--config", "share.auto.offset.reset=earliest",
                "--config", f"share.record.lock.duration.ms={lock_ms}", "--hold")
    ours.expect("held")
    held = sorted(r["offset"] for r in of(ours.lines, "rec"))
    assert held == list(range(10)), held
    ours.kill9()
    killed = time.monotonic()
    theirs = []
    c = share_consumer(broker, group, topic)
    try:
        poll_accept(c, lock_ms / 1000 + 20, theirs, stop=lambda r: len(r) >= 10)
        took = time.monotonic() - killed
        poll_accept(c, QUIET, theirs)
    finally:
        c.close()
    assert sorted(theirs) == [(0, i, f"h{i}", 2) for i in range(10)]
    assert took < lock_ms / 1000 + 20


def test_held_records_redelivered_after_lock_expiry(broker):
    """Our consumer acquires records and stays alive (heartbeating) without acknowledging
    them: once the group's share.record.lock.duration.ms has passed, a librdkafka consumer of
    the group gets every one with delivery count 2, not before."""
    topic = create_topic(broker, uniq("rc-expiry"), 1)
    produce_values(broker, topic, [f"e{i}" for i in range(5)], **{"linger.ms": 200})
    group = uniq("rc-expiry")
    ours = Live(broker, "share", topic, group, "--config", "share.auto.offset.reset=earliest",
                "--config", f"share.record.lock.duration.ms={LOCK_MS}", "--hold")
    theirs = []
    try:
        ours.expect("held")
        acquired = time.monotonic()
        recs = of(ours.lines, "rec")
        assert [(r["offset"], r["dc"], r["lock_ms"]) for r in recs] == \
            [(i, 1, LOCK_MS) for i in range(5)]
        c = share_consumer(broker, group, topic)
        try:
            poll_accept(c, LOCK_MS / 1000 + 20, theirs, stop=lambda r: len(r) >= 5)
            took = time.monotonic() - acquired
            poll_accept(c, QUIET, theirs)
        finally:
            c.close()
        assert ours.proc.poll() is None, "our consumer should still be running"
    finally:
        ours.kill9()
    assert sorted(theirs) == [(0, i, f"e{i}", 2) for i in range(5)]
    assert LOCK_MS / 1000 - 0.5 <= took < LOCK_MS / 1000 + 20, took
