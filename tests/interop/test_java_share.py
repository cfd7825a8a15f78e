"""Share groups (KIP-932) through the Java client's KafkaShareConsumer (kafka-clients from the
reference Kafka jars, 4.x), records produced with a plain / transactional KafkaProducer.
java/ShareCheck.java does the work and prints one line per check:

* implicit: two implicit-mode consumers in one group on one partition receive every record
  exactly once between them (each gets some); commitSync returns no errors;
* explicit: RELEASE -> redelivered with deliveryCount 2; REJECT and ACCEPT -> never again;
  commitSync returns a per-partition result without error; acquisitionLockTimeoutMs() reports
  the broker's group.share.record.lock.duration.ms;
* close: records held unacknowledged by a consumer that closes go to another consumer
  (deliveryCount 2, as Kafka >= 4.2 counts the delivery to the closed member);
* lock-expiry: with the group config share.record.lock.duration.ms=2000, records a live consumer
  holds without acknowledging go to another consumer after ~2 s (deliveryCount 2); the first
  consumer's late ACCEPT fails with InvalidRecordStateException (partition error 121);
* read_committed: group config share.isolation.level=read_committed hides an aborted transaction,
  read_uncommitted shows it; implicit acknowledgements piggybacked on ShareFetch (control records
  acknowledged as gaps) stick: a later consumer of the same group gets nothing.

java/ShareMoreCheck.java (compiled with ShareCheck.java, reusing its helpers) mirrors the rest of
test_share.py, one JVM per test:

* delivery limit: group config share.delivery.count.limit=2 (read back before use): a record
  RELEASEd on every delivery is delivered exactly twice (deliveryCount 1, 2), then archived; a
  later record still arrives;
* broker kill -9 (marker ``kill``, own broker from ``make_broker``): phase 1 JVM ACCEPTs 100
  records (commitSync confirmed) and holds a 50-record batch unacknowledged; the test kill -9s
  the broker, then the JVM, restarts the broker; a phase 2 JVM in the same group never gets an
  accepted record and gets each held one exactly once, with deliveryCount 1 (Kafka does not
  persist acquisitions);
* load (marker ``load``): 8 implicit share consumers + 4 producers (threads, 150 records/s
  each) on a 2-partition topic for JAVA_SHARE_LOAD_SECONDS (default 10), then drain: every
  produced record consumed exactly once with deliveryCount 1, every offset confirmed once by
  the acknowledgement commit callback, no errors or exceptions, every consumer got some.

Every group gets share.auto.offset.reset=earliest through Admin incrementalAlterConfigs on
ConfigResource GROUP before its first consumer joins. Validated against Apache Kafka 4.4
(INTEROP_TARGET=kafka: ~24 s for ShareCheck, ~6 s limit, ~21 s kill -9 incl. a ~6 s restart,
~14 s load).
"""

import os
import queue
import signal
import subprocess
import threading
import time
from collections import Counter

import pytest

from iutil import create_topic, uniq

HERE = os.path.dirname(os.path.abspath(__file__))

LOCK_MS = 15000
# Kafka property names; Shoal ignores keys it does not know (and finalizes share.version=3 by
# default; Kafka 4.4 finalizes share.version=2 on format, so nothing to enable there).
BROKER_CONFIG = {
    # single node: the share-state topic must fit on one broker
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "share.coordinator.state.topic.num.partitions": "3",
    # lets the lock-expiry check set the group's share.record.lock.duration.ms to 2000
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.record.lock.duration.ms": str(LOCK_MS),
    # faster joins (assignments arrive on heartbeats)
    "group.share.min.heartbeat.interval.ms": "500",
    "group.share.heartbeat.interval.ms": "1000",
}

EXPECTED = [
    "OK implicit: two consumers received all records exactly once, duplicates=0",
    "OK explicit: RELEASE redelivered with deliveryCount=2, REJECT/ACCEPT not redelivered, "
    "commitSync without errors",
    "OK close: records of a consumer closed without acknowledging went to another consumer "
    "with deliveryCount=2",
    "OK lock-expiry: unacknowledged records redelivered to another consumer with deliveryCount=2 "
    "after the lock expired; late ACCEPT -> InvalidRecordStateException",
    "OK read_committed: share.isolation.level=read_committed delivered only the 10 committed "
    "records, read_uncommitted all 15",
    "ALL OK",
]


def java_libs():
    libs = os.environ.get("KAFKA_LIBS")
    if not libs:
        libs = subprocess.run([os.path.join(HERE, "kafka_ref", "fetch.sh")], check=True,
                              capture_output=True, text=True, timeout=600).stdout.strip()
    return libs


@pytest.fixture(scope="module")
def java_cp(tmp_path_factory):
    """ShareCheck + ShareMoreCheck compiled once; returns the java -cp value."""
    libs = java_libs()
    classes = tmp_path_factory.mktemp("classes")
    subprocess.run(["javac", "-d", str(classes), "-cp", f"{libs}/*",
                    os.path.join(HERE, "java", "ShareCheck.java"),
                    os.path.join(HERE, "java", "ShareMoreCheck.java")],
                   check=True, timeout=120)
    return f"{libs}/*:{classes}"


def test_java_share_consumer(broker, java_cp):
    topics = [create_topic(broker, uniq(f"share-{name}"), 1)
              for name in ("implicit", "explicit", "close", "lock", "txn")]
    run = subprocess.run(["java", "-cp", java_cp, "ShareCheck",
                          broker.bootstrap, str(LOCK_MS), *topics],
                         capture_output=True, text=True, timeout=150)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    lines = run.stdout.splitlines()
    for want in EXPECTED:
        assert any(line.startswith(want) for line in lines), f"missing {want!r} in:\n{out[-4000:]}"


# ------------------------------------------------ java/ShareMoreCheck.java (mirrors test_share.py)
def run_more(java_cp, *args, timeout=150):
    """Runs ShareMoreCheck to completion; returns its stdout lines (asserts exit code 0)."""
    run = subprocess.run(["java", "-cp", java_cp, "ShareMoreCheck", *map(str, args)],
                         capture_output=True, text=True, timeout=timeout)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    return run.stdout.splitlines()


def ok_line(lines, mode):
    found = [line for line in lines if line.startswith(f"OK {mode}:")]
    assert found, "\n".join(lines[-60:])
    print(found[0])
    return found[0]


def test_java_share_delivery_count_limit(broker, java_cp):
    """share.delivery.count.limit=2 (group config through Admin, read back before use): a record
    RELEASEd on every delivery comes with deliveryCount 1, then 2, then never again (archived);
    a record produced afterwards still arrives (deliveryCount 1)."""
    topic = create_topic(broker, uniq("jshare-limit"), 1)
    ok_line(run_more(java_cp, "limit", broker.bootstrap, topic, timeout=120), "limit")


def _die_with_parent():
    """preexec_fn: SIGKILL the JVM if the pytest process dies (Linux)."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort only
        pass


class JavaHolder:
    """`ShareMoreCheck hold` in its own JVM, its stdout lines pumped into a queue."""

    def __init__(self, java_cp, *args):
        self.proc = subprocess.Popen(["java", "-cp", java_cp, "ShareMoreCheck", "hold",
                                      *map(str, args)],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, text=True,
                                     preexec_fn=_die_with_parent)
        self.lines = []
        self._q = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            self._q.put(line.rstrip("\n"))
        self._q.put(None)

    def wait_ready(self, timeout):
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._q.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"java holder not READY within {timeout}s:\n"
                                     + "\n".join(self.lines[-60:])) from None
            if line is None or line.startswith("FAIL"):
                if line:
                    self.lines.append(line)
                raise AssertionError("java holder failed:\n" + "\n".join(self.lines[-60:]))
            self.lines.append(line)
            if line == "READY":
                return

    def kill9(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)


@pytest.mark.kill
def test_java_share_broker_kill9(make_broker, java_cp):
    """Phase 1 (one JVM): a consumer ACCEPTs 100 records (commitSync confirmed) and holds a batch
    of 50 more without acknowledging. The test kill -9s the broker, then the JVM, and restarts the
    broker. Phase 2 (a new JVM, same group): never gets an accepted record, gets every held record
    exactly once, as a first delivery (Kafka keeps acquisitions in memory only)."""
    n_accept, n_hold = 100, 50
    b = make_broker(BROKER_CONFIG)
    topic = create_topic(b, uniq("jshare-crash"), 1)
    group = uniq("jshare-crash")
    holder = JavaHolder(java_cp, b.bootstrap, topic, group, n_accept, n_hold)
    try:
        holder.wait_ready(90)
        b.kill9()
    finally:
        holder.kill9()
    accepted = [line.split()[1] for line in holder.lines if line.startswith("ACCEPTED ")]
    held = [line.split()[1:] for line in holder.lines if line.startswith("HOLDING ")]
    assert sorted(accepted) == sorted(f"accept-{i}" for i in range(n_accept)), holder.lines[-60:]
    assert sorted(v for v, _ in held) == sorted(f"hold-{i}" for i in range(n_hold)), held
    assert all(dc == "1" for _, dc in held), held
    t0 = time.monotonic()
    b.restart()
    restart_s = time.monotonic() - t0
    lines = run_more(java_cp, "recover", b.bootstrap, topic, group, n_hold, timeout=120)
    ok_line(lines, "recover")
    got = [line.split()[1:] for line in lines if line.startswith("GOT ")]
    vals = [v for v, _, _ in got]
    print(f"broker restart {restart_s:.1f}s; phase 2 got {len(got)} deliveries, the last "
          f"{max((int(ms) for _, _, ms in got), default=-1)} ms after the consumer started")
    assert not [v for v in vals if v.startswith("accept-")], f"accepted records redelivered: {got}"
    assert not sorted(v for v, c in Counter(vals).items() if c > 1), f"duplicates: {got}"
    assert sorted(vals) == sorted(f"hold-{i}" for i in range(n_hold)), got
    # records held (acquired, unacknowledged) at the crash are not persisted by Kafka: they come
    # back as first deliveries
    assert all(dc == "1" for _, dc, _ in got), Counter(dc for _, dc, _ in got)


LOAD_SECONDS = float(os.environ.get("JAVA_SHARE_LOAD_SECONDS", "10"))


@pytest.mark.load
def test_java_share_load_8_consumers_4_producers(broker, java_cp):
    """8 implicit share consumers (threads) and 4 producers (threads, 150 records/s each) at once
    on a 2-partition topic for LOAD_SECONDS, then drain: every produced record consumed and
    acknowledged exactly once (deliveryCount 1), no exceptions, every consumer got some."""
    topic = create_topic(broker, uniq("jshare-load"), 2)
    ok_line(run_more(java_cp, "load", broker.bootstrap, topic, LOAD_SECONDS, 8, 4, 150,
                     timeout=LOAD_SECONDS + 120), "load")
