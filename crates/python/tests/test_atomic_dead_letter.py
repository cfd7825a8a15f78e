"""The atomic dead-letter example (examples/atomic_dead_letter.py) against Shoal: every
decimal integer doubled once in OUTPUT (key and headers kept), every other value once in
DEAD_LETTER as the broker writes it in the rejection's transaction (the original key and
value, Kafka's `__dlq.errors.*` headers), read read_committed; every input acknowledged
(nothing comes back to the group); and a worker SIGKILLed mid-run, then restarted with its
transactional id, leaves nothing duplicated. DEAD_LETTER exists before the example starts,
not enabled for dead letters: the example enables it."""

import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

import confluent_kafka
import pytest
import shoal
from conftest import REPO, create_topics, earliest_group
from test_exactly_once import redelivered

pytestmark = pytest.mark.shoal_only  # KIP-1289: Apache Kafka lacks it (test_kafka.py)
EXAMPLE = REPO / "crates" / "python" / "examples" / "atomic_dead_letter.py"
REJECTED = b"Offset rejected by client."
# Values the Rust example reads as it does: str::parse::<i64> of the trimmed UTF-8 text,
# doubled with an overflow check.
SPECIAL = {b"+7": b"14", b" -21\n": b"-42", b"007": b"14", b"4611686018427387903":
           b"9223372036854775806", b"4611686018427387904": None, b"1_000": None, b"": None,
           b"\xff1": None, b"12a": None, b"1.5": None, None: None}


def inputs(n):
    """[(key, value, headers, doubled or None)]: integers and other values mixed, some
    with headers, then the special cases."""
    out = []
    for i in range(n):
        headers = [("trace", f"t{i}".encode())] if i % 4 == 0 else None
        if i % 3 == 0:
            out.append((str(i).encode(), f"bad-{i}".encode(), headers, None))
        else:
            out.append((str(i).encode(), str(i - 50).encode(), headers,
                        str(2 * (i - 50)).encode()))
    for j, (value, doubled) in enumerate(SPECIAL.items()):
        out.append((f"s{j}".encode(), value, None, doubled))
    return out


def produce(broker, topic, records):
    with shoal.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5}) as p:
        for key, value, headers, _ in records:
            p.produce(topic, value=value, key=key, headers=headers)
        assert p.flush(30) == 0


def expected(records, topic, group):
    """What OUTPUT and DEAD_LETTER must hold: Counters of (key, value, headers), the dead
    letters' headers without the delivery count (a record redelivered after a worker's crash
    is rejected at a higher count)."""
    good, bad = Counter(), Counter()
    for offset, (key, value, headers, doubled) in enumerate(records):
        if doubled is not None:
            good[(key, doubled, tuple(headers or ()))] += 1
        else:
            bad[(key, value, (("__dlq.errors.topic", topic.encode()),
                              ("__dlq.errors.partition", b"0"),
                              ("__dlq.errors.offset", str(offset).encode()),
                              ("__dlq.errors.group", group.encode()),
                              ("__dlq.errors.message", REJECTED)))] += 1
    return good, bad


def without_count(dead):
    """Dead letters with the delivery-count header checked (a positive decimal) and
    dropped."""
    out = Counter()
    for (key, value, headers), n in dead.items():
        counts = [v for k, v in headers if k == "__dlq.errors.delivery.count"]
        assert len(counts) == 1 and int(counts[0]) >= 1, headers
        rest = tuple((k, v) for k, v in headers if k != "__dlq.errors.delivery.count")
        out[(key, value, rest)] += n
    return out


def committed(broker, topics, expect, timeout=60.0):
    """{topic: Counter of (key, value, headers)} of what a read_committed confluent-kafka
    consumer sees in `topics` (one consumer for all: one group join): until `expect`
    arrived in all and nothing more came for a second, or `timeout`."""
    c = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap,
                                  "group.id": f"check-{time.monotonic_ns()}",
                                  "auto.offset.reset": "earliest",
                                  "isolation.level": "read_committed"})
    c.subscribe(list(topics))
    got, deadline, idle_since = {t: Counter() for t in topics}, time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is None or m.error() is not None:
            idle_since = idle_since or time.monotonic()
            count = sum(sum(g.values()) for g in got.values())
            if count >= expect and time.monotonic() - idle_since > 1.0:
                break
            continue
        idle_since = None
        got[m.topic()][(m.key(), m.value(), tuple(m.headers() or ()))] += 1
    c.close()
    return got


def start(broker, inp, out, dlq, group, tid, per_txn):
    """The example as a worker; its stderr lines collect in the returned list."""
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLE), "--bootstrap", broker.bootstrap, "--input", inp,
         "--output", out, "--dead-letter", dlq, "--group", group, "--transactional-id", tid,
         "--records-per-txn", str(per_txn)], stderr=subprocess.PIPE, text=True)
    lines = []
    threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True).start()
    return proc, lines


def stop(proc):
    proc.terminate()
    proc.wait(timeout=30)


COMMITTED = re.compile(
    r"committed (\d+) records \((\d+) accepted, (\d+) dead-lettered\) in transaction (\d+)")


def commits(lines):
    """(records, accepted, dead-lettered, transaction) of each `committed ...` line."""
    out = []
    for line in list(lines):
        if line.startswith("committed "):
            match = COMMITTED.fullmatch(line.rstrip("\n"))
            assert match, line
            out.append(tuple(int(g) for g in match.groups()))
    return out


def topics(broker, names):
    inp, out, dlq, group = names("in"), names("out"), "dlq." + names("dlq"), names("g")
    create_topics(broker, inp, out, dlq)
    earliest_group(broker, group)  # the example keeps the short lock; adds nothing else
    return inp, out, dlq, group


def test_good_values_doubled_bad_ones_dead_lettered_each_once(broker, names):
    inp, out, dlq, group = topics(broker, names)
    records = inputs(300)
    good, bad = expected(records, inp, group)
    produce(broker, inp, records)
    proc, lines = start(broker, inp, out, dlq, group, names("tid"), 40)
    try:
        got = committed(broker, (out, dlq), len(records))
    finally:
        stop(proc)
    outputs, dead = got[out], without_count(got[dlq])
    assert outputs == good, (outputs - good, good - outputs, lines)
    assert dead == bad, (dead - bad, bad - dead, lines)
    done = commits(lines)
    assert all(n == a + d and n <= 40 for n, a, d, _ in done), lines
    assert [t for _, _, _, t in done] == list(range(1, len(done) + 1)), lines
    assert sum(a for _, a, _, _ in done) == sum(good.values()), lines
    assert sum(d for _, _, d, _ in done) == sum(bad.values()), lines
    assert redelivered(broker, group, inp) == []  # ACCEPTed and REJECTed: none comes back


def test_a_worker_killed_mid_run_leaves_nothing_duplicated(broker, names):
    """SIGKILL the worker once it has committed some transactions; restarted with its
    transactional id, it fences the old one (its open transaction is aborted, its records
    come back): every output and every dead letter once in the end."""
    inp, out, dlq, group = topics(broker, names)
    tid = names("tid")
    records = inputs(1500)
    good, bad = expected(records, inp, group)
    produce(broker, inp, records)
    first, lines = start(broker, inp, out, dlq, group, tid, 50)
    deadline = time.monotonic() + 60
    while len(commits(lines)) < 3:
        assert time.monotonic() < deadline and first.poll() is None, lines
        time.sleep(0.01)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    assert sum(c[0] for c in commits(lines)) < len(records), "done before it was killed"
    second, lines = start(broker, inp, out, dlq, group, tid, 50)
    try:
        got = committed(broker, (out, dlq), len(records), timeout=90)
    finally:
        stop(second)
    outputs, dead = got[out], without_count(got[dlq])
    assert outputs == good, (f"{sum(outputs.values())} outputs; duplicated or wrong: "
                             f"{list((outputs - good).items())[:5]}")
    assert dead == bad, (f"{sum(dead.values())} dead letters; duplicated or wrong: "
                         f"{list((dead - bad).items())[:5]}")
    assert redelivered(broker, group, inp) == []
