"""Exactly-once copy under failures (modelled on Apache Kafka's transactions system test).

An input topic is pre-filled with N records whose values are unique sequence numbers
(EOS_RECORDS, default 100000). A copier subprocess (eos_copier.py: read_committed group
consumer + transactional producer, offsets sent in the transaction) copies input -> output
while the test kill -9s the copier several times (each restart reuses the transactional.id
and group, so the new instance fences the dead one and aborts its open transaction) and
kill -9s / restarts the broker on the same data dir. Kill points are drawn from a seeded
RNG (EOS_SEED, printed). Finally a read_committed consumer reads the whole output up to the
last stable offset: every input value appears exactly once, and the group's committed
offsets equal the input end offsets.

Knobs (env): EOS_RECORDS, EOS_SEED, EOS_COPIER_KILLS (4), EOS_BROKER_KILLS (2),
EOS_BATCH (records per transaction, 100), EOS_DEADLINE (copy phase, s, 300),
EOS_STALL (s without committed progress before failing, 90), EOS_COPIER_STALL (s without
progress before the copier is dumped, killed and restarted, 30), EOS_COPIER_DEBUG
(librdkafka debug contexts for the copier, e.g. eos,cgrp). Run with -s to see the progress
log (seed, kills, timings); a failure report always includes the seed.
"""

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, \
    TopicPartition

from iutil import create_topic, end_offsets, uniq

HERE = Path(__file__).resolve().parent
BROKER_CONFIG = {"num.partitions": "3"}

PARTITIONS = 3
N = int(os.environ.get("EOS_RECORDS", "100000"))
SEED = int(os.environ.get("EOS_SEED") or random.SystemRandom().randrange(1 << 30))
COPIER_KILLS = int(os.environ.get("EOS_COPIER_KILLS", "4"))
BROKER_KILLS = int(os.environ.get("EOS_BROKER_KILLS", "2"))
BATCH = int(os.environ.get("EOS_BATCH", "100"))
DEADLINE = float(os.environ.get("EOS_DEADLINE", "300"))
STALL = float(os.environ.get("EOS_STALL", "90"))
# No committed progress for this long while the copier is alive: dump its stacks, kill -9
# and restart it (works around librdkafka hangs after a broker restart, see eos_copier.py).
COPIER_STALL = float(os.environ.get("EOS_COPIER_STALL", "30"))
MAX_UNEXPECTED_EXITS = 10
VERIFY_TIMEOUT = 120.0


def log(msg):
    print(f"[eos {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def tail(path, n=40):
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-n:])
    except OSError as e:
        return f"<{e}>"


def fill_input(broker, topic):
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                  "linger.ms": 50, "batch.num.messages": 10000, "batch.size": 1000000,
                  "compression.type": "lz4", "queue.buffering.max.messages": 200000,
                  "message.timeout.ms": 60000})
    failed = []

    def dr(err, _msg):
        if err is not None:
            failed.append(err)

    for i in range(N):
        while True:
            try:
                p.produce(topic, value=b"%d" % i, partition=i % PARTITIONS, on_delivery=dr)
                break
            except BufferError:
                p.poll(0.1)
        if i % 10000 == 0:
            p.poll(0)
    left = p.flush(120)
    assert left == 0 and not failed, f"input fill: {left} undelivered, errors {failed[:5]}"


class Copier:
    """The copier subprocesses, one at a time, each logging to its own file."""

    def __init__(self, broker, workdir, src, dst, group, txn_id):
        self.broker, self.workdir = broker, Path(workdir)
        self.args = [sys.executable, str(HERE / "eos_copier.py"), broker.bootstrap, src, dst,
                     group, txn_id, "--batch", str(BATCH), "--max-seconds", str(DEADLINE + 120)]
        self.proc = None
        self.instances = 0
        self.unexpected_exits = []   # (instance, returncode)
        self.stall_restarts = []     # instance numbers killed for making no progress

    @property
    def log_path(self):
        return self.workdir / f"copier-{self.instances}.log"

    def start(self):
        self.instances += 1
        self._out = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.args, stdout=self._out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, cwd=HERE)
        log(f"copier #{self.instances} started (pid {self.proc.pid})")

    def _reap(self):
        self.proc.wait(timeout=30)
        self._out.close()

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self._reap()
        log(f"copier #{self.instances} killed -9")

    def check_alive(self):
        """Restart the copier if it exited by itself; returns False when it did."""
        rc = self.proc.poll()
        if rc is None:
            return True
        self._out.close()
        self.unexpected_exits.append((self.instances, rc))
        log(f"copier #{self.instances} exited by itself with {rc}; log tail:\n"
            f"{tail(self.log_path, 15)}")
        assert len(self.unexpected_exits) <= MAX_UNEXPECTED_EXITS, \
            f"copier keeps exiting: {self.unexpected_exits}"
        self.start()
        return False

    def dump_stacks(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGUSR1)
            time.sleep(1.0)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self._out.close()
        return self.proc.returncode if self.proc else None

    def logs(self):
        return [self.workdir / f"copier-{i}.log" for i in range(1, self.instances + 1)]

    def count(self, word):
        return sum(Path(p).read_text(errors="replace").count(word) for p in self.logs()
                   if Path(p).exists())


class CommittedMonitor:
    """Reads the group's committed input offsets (read_uncommitted: does not wait for
    pending transactional offsets). Tolerates a broker that is down."""

    def __init__(self, broker, group, topic):
        self.broker, self.group, self.topic = broker, group, topic
        self.c = None

    def read(self):
        try:
            if self.c is None:
                self.c = Consumer({"bootstrap.servers": self.broker.bootstrap,
                                   "group.id": self.group, "enable.auto.commit": False,
                                   "isolation.level": "read_uncommitted", "log_level": 2})
            parts = self.c.committed([TopicPartition(self.topic, p) for p in range(PARTITIONS)],
                                     timeout=5)
            return {tp.partition: max(tp.offset, 0) for tp in parts}
        except KafkaException:
            self.close()
            return None

    def close(self):
        if self.c is not None:
            try:
                self.c.close()
            except Exception:  # noqa: BLE001
                pass
            self.c = None


def read_output(broker, topic, isolation="read_committed"):
    """Assigned from the beginning, until every partition reported EOF (read_committed:
    fetch position == last stable offset) with nothing after it."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": uniq("eos-verify"),
                  "enable.auto.commit": False, "isolation.level": isolation,
                  "enable.partition.eof": True, "auto.offset.reset": "earliest",
                  "max.partition.fetch.bytes": 8 << 20, "fetch.max.bytes": 32 << 20})
    out = []
    eof = {}
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        deadline = time.monotonic() + VERIFY_TIMEOUT
        while len(eof) < PARTITIONS and time.monotonic() < deadline:
            for m in c.consume(num_messages=5000, timeout=0.5):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        eof[m.partition()] = m.offset()
                        continue
                    raise KafkaException(m.error())
                eof.pop(m.partition(), None)
                out.append((m.partition(), m.offset(), m.key(), m.value()))
        assert len(eof) == PARTITIONS, \
            f"output not read to the end in {VERIFY_TIMEOUT}s: eof={eof}, read {len(out)}"
    finally:
        c.close()
    return out, eof


def committed_offsets(broker, group, topic):
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        parts = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
        return {tp.partition: tp.offset for tp in parts}
    finally:
        c.close()


def kill_plan(rng):
    """Progress fractions (of N committed) at which to kill, at least 3 % apart."""
    n = COPIER_KILLS + BROKER_KILLS
    points = sorted(rng.sample(range(5, 91, 3), n))
    kinds = ["copier"] * COPIER_KILLS + ["broker"] * BROKER_KILLS
    rng.shuffle(kinds)
    return [(pt / 100.0, kind) for pt, kind in zip(points, kinds)]


@pytest.mark.timeout(DEADLINE + VERIFY_TIMEOUT + 180)
def test_exactly_once_copy_with_copier_and_broker_kills(broker, tmp_path):
    assert N >= 1
    rng = random.Random(SEED)
    plan = kill_plan(rng)
    log(f"seed={SEED} (EOS_SEED) N={N} batch={BATCH} plan={plan}")
    t0 = time.monotonic()
    src = create_topic(broker, uniq("eos-in"), PARTITIONS)
    dst = create_topic(broker, uniq("eos-out"), PARTITIONS)
    group, txn_id = uniq("eos-group"), uniq("eos-txn")
    fill_input(broker, src)
    in_end = end_offsets(broker, src, PARTITIONS)
    assert sum(in_end.values()) == N, f"input end offsets {in_end} != {N} records"
    log(f"input filled in {time.monotonic() - t0:.1f}s: end offsets {in_end}")

    copier = Copier(broker, tmp_path, src, dst, group, txn_id)
    monitor = CommittedMonitor(broker, group, src)
    events = []
    t_copy = time.monotonic()
    copier.start()

    def diag(reason):
        copier.dump_stacks()
        return (f"{reason}\nseed={SEED} events={events} unexpected copier exits="
                f"{copier.unexpected_exits} stall restarts={copier.stall_restarts}\n"
                f"--- copier #{copier.instances} log tail\n"
                f"{tail(copier.log_path)}\n--- broker log tail\n{broker.log_tail(60)}")

    try:
        deadline = t_copy + DEADLINE
        done = 0
        last_progress = last_restart = last_broker_restart = time.monotonic()
        while True:
            now = time.monotonic()
            if now > deadline:
                pytest.fail(diag(f"copy not finished within {DEADLINE}s: committed {done}/{N}"))
            if now - max(last_progress, last_broker_restart) > STALL:
                pytest.fail(diag(f"no committed progress for {STALL}s: committed {done}/{N}"))
            if not copier.check_alive():
                last_restart = time.monotonic()
            if now - max(last_progress, last_restart) > COPIER_STALL:
                log(f"copier #{copier.instances} made no progress for {COPIER_STALL}s at "
                    f"{done}/{N}: stacks + log tail, then kill -9 and restart")
                copier.dump_stacks()
                log(tail(copier.log_path, 25))
                copier.stall_restarts.append(copier.instances)
                assert len(copier.stall_restarts) <= MAX_UNEXPECTED_EXITS, \
                    diag(f"copier keeps stalling: {copier.stall_restarts}")
                copier.kill9()
                copier.start()
                last_restart = time.monotonic()
            committed = monitor.read()
            if committed is not None:
                total = sum(committed.values())
                if total > done:
                    done, last_progress = total, time.monotonic()
                elif total < done:
                    pytest.fail(diag(f"committed offsets went backwards: {committed} "
                                     f"(sum {total} < {done})"))
                if all(committed[p] >= in_end[p] for p in range(PARTITIONS)):
                    log(f"all input committed: {committed}")
                    break
            # next kill only once the current copier instance has committed something
            if plan and done >= plan[0][0] * N and (not events or done > events[-1][1]):
                frac, kind = plan.pop(0)
                time.sleep(rng.uniform(0.0, 0.3))   # land anywhere in a transaction
                log(f"kill #{len(events) + 1}: {kind} at {done}/{N} committed "
                    f"(planned {frac:.2f})")
                if kind == "copier":
                    copier.kill9()
                    copier.start()
                    last_restart = time.monotonic()
                else:
                    monitor.close()
                    broker.kill9()
                    tb = time.monotonic()
                    broker.restart()
                    log(f"broker restarted in {time.monotonic() - tb:.1f}s")
                    last_restart = last_broker_restart = time.monotonic()
                # baseline for "the new instance / restarted broker made progress": what is
                # committed now, after the kill (the killed copier may have committed more)
                for _ in range(40):
                    after = monitor.read()
                    if after is not None:
                        done = max(done, sum(after.values()))
                        break
                    time.sleep(0.25)
                events.append((kind, done))
                continue
            time.sleep(0.1)
        copy_secs = time.monotonic() - t_copy
    finally:
        monitor.close()
        rc = copier.stop()
    log(f"copy phase {copy_secs:.1f}s, copier instances={copier.instances}, final rc={rc}, "
        f"events={events}, unexpected exits={copier.unexpected_exits}, "
        f"stall restarts={copier.stall_restarts}, "
        f"commits={copier.count('COMMIT n=')}, aborts={copier.count('ABORT n=')}")
    assert not plan, f"kills not executed (copy finished first): {plan}"

    # ---------------------------------------------------------------- verification
    out, eof = read_output(broker, dst)
    out_hw = end_offsets(broker, dst, PARTITIONS)
    log(f"read {len(out)} committed output records; eof={eof} high watermarks={out_hw}")
    raw, _ = read_output(broker, dst, "read_uncommitted")
    log(f"read_uncommitted sees {len(raw)} records: {len(raw) - len(out)} from aborted "
        f"(fenced/killed) transactions")
    expected = {b"copy-%d" % i for i in range(N)}
    counts = Counter(v for _, _, _, v in out)
    dups = {v: c for v, c in counts.items() if c > 1}
    missing = expected - counts.keys()
    extra = counts.keys() - expected
    problems = []
    if dups:
        sample = sorted(dups, key=lambda v: int(v[5:]))[:10]
        where = {v: [(p, o, k.decode()) for p, o, k, vv in out if vv == v] for v in sample}
        problems.append(f"{len(dups)} duplicated values ({sum(dups.values()) - len(dups)} "
                        f"extra copies); first: {where}")
    if missing:
        sample = sorted(int(v[5:]) for v in missing)[:20]
        problems.append(f"{len(missing)} missing values; first (seq -> input partition:offset): "
                        f"{[(s, f'{s % PARTITIONS}:{s // PARTITIONS}') for s in sample]}")
    if extra:
        problems.append(f"{len(extra)} unexpected values: {sorted(extra)[:10]}")
    if eof != out_hw:
        problems.append(f"read_committed end (LSO) {eof} != high watermarks {out_hw} "
                        f"(a transaction left open?)")
    final_committed = committed_offsets(broker, group, src)
    if final_committed != in_end:
        problems.append(f"group committed offsets {final_committed} != input end {in_end}")
    log(f"total {time.monotonic() - t0:.1f}s")
    assert not problems, diag("exactly-once violated:\n" + "\n".join(problems))
    assert len(out) == N
