"""The checkpointed source example (examples/checkpointed_source.py) against Shoal: its
checkpoints acknowledge every record once and print the count and the sum of the inputs;
a source SIGKILLed before a checkpoint loses nothing and counts nothing twice: the records
it read since its last checkpoint come back to the restarted instance, and only they."""

import re
import signal
import subprocess
import sys
import threading
import time

import pytest
import shoal
from conftest import REPO, create_topics, earliest_group
from test_exactly_once import redelivered

pytestmark = pytest.mark.shoal_only  # KIP-1289: Apache Kafka lacks it (test_kafka.py)
EXAMPLE = REPO / "crates" / "python" / "examples" / "checkpointed_source.py"
CHECKPOINT = re.compile(
    r"checkpoint (\d+): (\d+) records acknowledged \(total (\d+), sum (-?\d+)\)")


def values(n, start=0):
    """Integers (some negative, some padded) and values that are not, mixed; their sum as
    the example computes it (decimal integers only)."""
    out, total = [], 0
    for i in range(start, start + n):
        if i % 4 == 0:
            out.append(f"note {i}".encode())
        else:
            v = i * 7 - 300
            out.append(f" {v} ".encode() if i % 5 == 0 else str(v).encode())
            total += v
    return out, total


def produce(broker, topic, vals):
    with shoal.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5}) as p:
        for v in vals:
            p.produce(topic, value=v)
        assert p.flush(30) == 0


def start(broker, inp, group, tid, checkpoint_ms):
    """The example; its stderr lines collect in the returned list."""
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLE), "--bootstrap", broker.bootstrap, "--input", inp,
         "--group", group, "--transactional-id", tid, "--checkpoint-ms", str(checkpoint_ms)],
        stderr=subprocess.PIPE, text=True)
    lines = []
    threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True).start()
    return proc, lines


def checkpoints(lines):
    """(checkpoint, acknowledged, total, sum) of each checkpoint line (a failed one, whose
    records come back, rolls the state back and says so on a line of its own)."""
    out = []
    for line in list(lines):
        if not line.startswith("checkpoint ") or line.startswith("checkpoint failed"):
            continue
        match = CHECKPOINT.fullmatch(line.rstrip("\n"))
        assert match, line
        out.append(tuple(int(g) for g in match.groups()))
    return out


def wait_for(proc, lines, total, timeout=30.0):
    """Waits for the checkpoint whose total is `total`."""
    deadline = time.monotonic() + timeout
    while not any(c[2] == total for c in checkpoints(lines)):
        assert time.monotonic() < deadline and proc.poll() is None, lines
        time.sleep(0.01)


def test_checkpoints_acknowledge_every_record_once(broker, names):
    inp, group = names("in"), names("g")
    create_topics(broker, inp)
    earliest_group(broker, group)  # the example keeps the short lock; adds nothing else
    vals, total = values(300)
    produce(broker, inp, vals)
    proc, lines = start(broker, inp, group, names("tid"), 300)
    try:
        wait_for(proc, lines, len(vals))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    done = checkpoints(lines)
    assert done[-1][2:] == (len(vals), total), lines
    assert [c[0] for c in done] == list(range(1, len(done) + 1)), lines
    assert sum(c[1] for c in done) == len(vals), lines
    assert all(c[1] > 0 for c in done), lines  # a checkpoint only when something was read
    assert redelivered(broker, group, inp) == []


def test_records_read_since_the_last_checkpoint_come_back_after_a_kill(broker, names):
    """The first instance checkpoints a first batch, reads a second and is SIGKILLed before
    its next checkpoint; the restarted one (same transactional id) gets exactly the second
    batch back once its locks expire: its total is the second batch's size and stays so."""
    inp, group, tid = names("in"), names("g"), names("tid")
    lock_ms, checkpoint_ms = 3000, 1500  # the checkpoint well within the lock
    create_topics(broker, inp)
    earliest_group(broker, group)
    with shoal.AdminClient({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.set_group_configs(group, {"share.record.lock.duration.ms": str(lock_ms)})
    first_batch, first_sum = values(100)
    second_batch, second_sum = values(150, start=100)
    produce(broker, inp, first_batch)
    first, lines = start(broker, inp, group, tid, checkpoint_ms)
    try:
        wait_for(first, lines, len(first_batch))
        assert checkpoints(lines)[-1][2:] == (len(first_batch), first_sum), lines
        produce(broker, inp, second_batch)
        time.sleep(0.4)  # read (acquired), not yet checkpointed
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
    assert checkpoints(lines)[-1][2] == len(first_batch), (
        f"checkpointed after the second batch came, before the kill: {lines}")

    second, lines = start(broker, inp, group, tid, 300)
    try:
        wait_for(second, lines, len(second_batch), timeout=lock_ms / 1000 + 30)
        time.sleep(lock_ms / 1000 + 1)  # anything more would have come back by now
    finally:
        second.terminate()
        second.wait(timeout=30)
    done = checkpoints(lines)
    assert done[-1][2:] == (len(second_batch), second_sum), lines
    assert sum(c[1] for c in done) == len(second_batch), lines
