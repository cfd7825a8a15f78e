"""Exactly-once queues (KIP-1289) from Python: a transaction's output and its inputs'
acknowledgements commit together or not at all; the example pipeline commits each
input's output once and acknowledges every input."""

import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import confluent_kafka
import pytest
import shoal
from conftest import LOCK_MS, create_topics, earliest_group, poll_all

pytestmark = pytest.mark.shoal_only  # KIP-1289: Apache Kafka lacks it (test_kafka.py)
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "exactly_once_pipeline.py"
QUIET = LOCK_MS / 1000 + 3.0  # longer than a lock: unacknowledged records would be back


def produce_inputs(broker, topic, n):
    with shoal.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5}) as p:
        for i in range(n):
            p.produce(topic, value=f"in-{i}", key=str(i))
        assert p.flush(30) == 0


def committed_values(broker, topic, expect, timeout=60.0):
    """The values of `topic` a read_committed confluent-kafka consumer sees: until `expect`
    arrived and nothing more came for a second, or `timeout`."""
    c = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap,
                                  "group.id": f"check-{time.monotonic_ns()}",
                                  "auto.offset.reset": "earliest",
                                  "isolation.level": "read_committed"})
    c.subscribe([topic])
    got, deadline, idle_since = [], time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is None or m.error() is not None:
            idle_since = idle_since or time.monotonic()
            if len(got) >= expect and time.monotonic() - idle_since > 1.0:
                break
            continue
        idle_since = None
        got.append(m.value().decode())
    c.close()
    return got


def redelivered(broker, group, topic):
    """What a new member of `group` receives in QUIET seconds (it accepts it)."""
    with shoal.ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group}) as c:
        c.subscribe([topic])
        got, deadline = [], time.monotonic() + QUIET
        while time.monotonic() < deadline:
            got += c.poll(0.5)
        c.commit_sync()
    return got


def explicit(broker, group):
    return shoal.ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                                "share.acknowledgement.mode": "explicit",
                                "share.acquire.mode": "record_limit"})


def run_example(broker, names, n, *extra):
    inp, out, group = names("in"), names("out"), names("g")
    create_topics(broker, inp, out)
    earliest_group(broker, group)  # the example keeps the short lock; adds nothing else
    produce_inputs(broker, inp, n)
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLE), "--bootstrap", broker.bootstrap, "--input", inp,
         "--output", out, "--group", group, "--transactional-id", names("tid"),
         "--records-per-txn", "40", *extra],
        stderr=subprocess.PIPE, text=True)
    try:
        outputs = committed_values(broker, out, n)
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=30)
    return inp, group, outputs, stderr


def test_pipeline_example_commits_every_output_once_and_acknowledges_every_input(
        broker, names):
    n = 200
    inp, group, outputs, stderr = run_example(broker, names, n)
    assert Counter(outputs) == Counter(f"processed:in-{i}" for i in range(n)), stderr
    lines = [line for line in stderr.splitlines() if line.startswith("committed ")]
    assert lines and all(" records in transaction " in line for line in lines), stderr
    assert lines[-1].split(" (total ")[1].startswith(f"{n})"), lines[-1]
    assert redelivered(broker, group, inp) == []


def test_a_pipeline_that_skips_acknowledgements_is_caught(broker, names):
    """The check above would see unacknowledged inputs: this broken pipeline's come back."""
    n = 20
    inp, group, outputs, stderr = run_example(broker, names, n,
                                              "--broken-skip-acknowledgements")
    assert len(outputs) >= n, stderr
    assert {m.value().decode() for m in redelivered(broker, group, inp)} == {
        f"in-{i}" for i in range(n)}


def test_aborted_transaction_writes_nothing_and_gives_the_records_back(broker, names):
    inp, out, group = names("in"), names("out"), names("g")
    create_topics(broker, inp, out)
    earliest_group(broker, group)
    produce_inputs(broker, inp, 10)
    producer = shoal.Producer({"bootstrap.servers": broker.bootstrap,
                               "transactional.id": names("tid")})
    producer.init_transactions()
    with explicit(broker, group) as c:
        c.subscribe([inp])
        for attempt, end in ((1, producer.abort_transaction), (2, producer.commit_transaction)):
            got = poll_all(c, 10, ack=lambda m: shoal.AcknowledgeType.ACCEPT)
            assert sorted(m.offset() for m in got) == list(range(10))
            assert {m.delivery_count() for m in got} == {attempt}
            producer.begin_transaction()
            for m in got:
                producer.produce(out, value=b"processed:" + m.value())
            acks = c.acknowledgements_for_transaction()
            assert len(acks) == 10
            producer.send_share_acknowledgements_to_transaction(acks, c.share_group_metadata())
            end()
    producer.close()
    assert sorted(committed_values(broker, out, 10)) == sorted(
        f"processed:in-{i}" for i in range(10))
    assert redelivered(broker, group, inp) == []


def test_transactional_share_acknowledger_commits_acknowledgements_alone(broker, names):
    inp, group = names("in"), names("g")
    create_topics(broker, inp)
    earliest_group(broker, group)
    produce_inputs(broker, inp, 10)
    with shoal.TransactionalShareAcknowledger({"bootstrap.servers": broker.bootstrap,
                                               "transactional.id": names("tid")}) as acker:
        acker.init_transactions()
        with explicit(broker, group) as c:
            c.subscribe([inp])
            got = poll_all(c, 10, ack=lambda m: shoal.AcknowledgeType.ACCEPT)
            assert len(got) == 10
            acker.commit_acknowledgements(c.acknowledgements_for_transaction(),
                                          c.share_group_metadata())
            acker.abort_acknowledgements()  # none open: nothing
    assert redelivered(broker, group, inp) == []


def start_worker(broker, inp, out, group, tid):
    """The example as a worker; its stderr lines collect in the returned list."""
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLE), "--bootstrap", broker.bootstrap, "--input", inp,
         "--output", out, "--group", group, "--transactional-id", tid,
         "--records-per-txn", "50"], stderr=subprocess.PIPE, text=True)
    lines = []
    threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True).start()
    return proc, lines


def test_a_worker_killed_mid_work_leaves_nothing_duplicated(broker, names):
    """SIGKILL a worker once it has committed some transactions (it is working on the next);
    its successor with the same transactional id fences it, its open transaction is aborted
    and its records come back: every output once in the end, every input acknowledged."""
    n = 3000
    inp, out, group, tid = names("in"), names("out"), names("g"), names("tid")
    create_topics(broker, inp, out)
    earliest_group(broker, group)
    produce_inputs(broker, inp, n)
    first, lines = start_worker(broker, inp, out, group, tid)
    deadline = time.monotonic() + 60
    while sum(line.startswith("committed ") for line in lines) < 3:
        assert time.monotonic() < deadline and first.poll() is None, lines
        time.sleep(0.01)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    before = [int(line.split("(total ")[1].split(")")[0]) for line in list(lines)
              if line.startswith("committed ")]
    assert before[-1] < n, "the first worker finished before it was killed"
    second, lines = start_worker(broker, inp, out, group, tid)
    try:
        outputs = committed_values(broker, out, n, timeout=90)
    finally:
        second.terminate()
        second.wait(timeout=30)
    assert Counter(outputs) == Counter(f"processed:in-{i}" for i in range(n)), (
        f"{len(outputs)} outputs, duplicated: "
        f"{[v for v, k in Counter(outputs).items() if k > 1][:5]}")
    assert redelivered(broker, group, inp) == []


# A worker that stops in the middle of a transaction: its outputs are written (flushed, not
# committed) and its inputs' ACCEPTs staged (TX_PENDING on the broker), then it says so on
# stdout and waits to be killed.
HOLD_OPEN = """
import sys, time, shoal
bootstrap, inp, out, group, tid, n = sys.argv[1:]
producer = shoal.Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
producer.init_transactions()
consumer = shoal.ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                                "share.acknowledgement.mode": "explicit",
                                "share.acquire.mode": "record_limit"})
consumer.subscribe([inp])
acks, got = shoal.ShareAcknowledgements(), 0
producer.begin_transaction()
while got < int(n):
    for m in consumer.poll(0.5):
        producer.produce(out, value=b"processed:" + m.value())
        consumer.acknowledge(m, shoal.AcknowledgeType.ACCEPT)
        got += 1
    acks.extend(consumer.acknowledgements_for_transaction())
assert producer.flush(30) == 0
producer.send_share_acknowledgements_to_transaction(acks, consumer.share_group_metadata())
print("open", len(acks), flush=True)
time.sleep(600)
"""


def uncommitted_count(broker, topic, expect, timeout=30.0):
    """How many records a read_uncommitted consumer finds in `topic` (until `expect`)."""
    c = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap,
                                  "group.id": f"peek-{time.monotonic_ns()}",
                                  "auto.offset.reset": "earliest",
                                  "isolation.level": "read_uncommitted"})
    c.subscribe([topic])
    got, deadline = 0, time.monotonic() + timeout
    while got < expect and time.monotonic() < deadline:
        m = c.poll(0.2)
        got += m is not None and m.error() is None
    c.close()
    return got


def test_a_worker_killed_mid_transaction_leaves_nothing_duplicated(broker, names):
    """SIGKILL a worker whose transaction holds written outputs and staged ACCEPTs; the
    example restarted with its transactional id fences it and aborts that transaction: the
    written outputs never become visible, the inputs come back, and every output is
    committed once."""
    n, held = 300, 100
    inp, out, group, tid = names("in"), names("out"), names("g"), names("tid")
    create_topics(broker, inp, out)
    earliest_group(broker, group)
    produce_inputs(broker, inp, n)
    worker = subprocess.Popen(
        [sys.executable, "-c", HOLD_OPEN, broker.bootstrap, inp, out, group, tid, str(held)],
        stdout=subprocess.PIPE, text=True)
    try:
        line = worker.stdout.readline()  # bounded by the suite's per-test timeout
        assert line.startswith("open "), line
        staged = int(line.split()[1])
        assert staged >= held
        # Mid-transaction: its outputs are in the log, uncommitted.
        assert uncommitted_count(broker, out, staged) == staged
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=10)
    assert worker.returncode == -signal.SIGKILL
    second, lines = start_worker(broker, inp, out, group, tid)
    try:
        outputs = committed_values(broker, out, n, timeout=90)
    finally:
        second.terminate()
        second.wait(timeout=30)
    assert Counter(outputs) == Counter(f"processed:in-{i}" for i in range(n)), (
        f"{len(outputs)} outputs, duplicated: "
        f"{[v for v, k in Counter(outputs).items() if k > 1][:5]}")
    assert uncommitted_count(broker, out, n + staged) == n + staged  # the aborted ones too
    assert redelivered(broker, group, inp) == []
