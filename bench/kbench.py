#!/usr/bin/env python3
"""Produce/consume throughput and produce latency through librdkafka.

Driven by bench/run.sh (which starts and stops Shoal); usable on its own:

  kbench.py run --bootstrap 127.0.0.1:9092 --label shoal-durable [--broker-pid PID]
  kbench.py run --start-kafka --label kafka          # reference Apache Kafka (KRaft)
  kbench.py run --mock --label librdkafka-mock       # in-process mock broker (client ceiling)
  kbench.py table results.jsonl                      # human table from the JSON lines
  kbench.py summary results.jsonl                    # median [min-max] over repetitions
  kbench.py txn-summary results.jsonl                # the transactions table (txn phase)
  kbench.py fsync-probe DIR                          # the disk's write+fdatasync latency

Every result is one JSON line on stdout; progress goes to stderr.

Phases (per label, in this order; each on fresh topics):
  warm-up          --warmup records produced and consumed, untimed (JIT of the
                   reference Kafka, connections, allocators).
  produce          one Producer (acks=all, linger.ms=5, batch.size ~1 MB, no
                   compression, idempotence off unless --idempotence), N records
                   of --size bytes to a fresh topic with P partitions, for each P
                   in --partitions; timed from the first produce() to flush()
                   returning with nothing left.
  consume          one Consumer (assign() from the beginning, no group
                   rebalance, fetch.max.bytes = max.partition.fetch.bytes =
                   50 MiB, fetch.queue.backoff.ms = 0, auto commit off) reading back every record of each
                   produce topic with consume(num_messages=10000); timed from
                   assign() to the last record. For each K in --consumers
                   (default 1): K such consumers, one process each (K > 1), each
                   reading the whole topic (fan-out: K x N records served),
                   timed from the first assign() to the last record.
  produce_latency  same producer config, 1 partition, paced at each of
                   --latency-rates (default 'half,50mb': half the measured
                   1-partition produce rate, and 50 MB/s = half the 100 MB/s
                   target) for --latency-seconds; latency = produce() call to
                   delivery callback, per record. client_bound=true when the
                   paced loop could not reach 95% of the rate.
  txn              (not in the default --phases; bench/run.sh --txn) for each P in
                   --partitions: a plain baseline, then for each N in --txn-sizes a
                   transactional Producer (transactional.id, idempotence and
                   acks=all implied, same linger.ms/batch.size) looping
                   begin_transaction -> produce N records -> commit_transaction,
                   then the plain baseline again. Records go round-robin to the P
                   partitions (explicit partition = i % P, in the baseline too), so
                   every transaction with N >= P spans all P partitions. Records per
                   N = min(--txn-records, N * --txn-max-txns); each N stops early
                   (truncated=true) after --txn-seconds. Timed from the first
                   begin_transaction() to the last commit_transaction() returning;
                   commit latency = duration of commit_transaction() (flushes the
                   transaction's records, then EndTxn), per transaction.
                   ratio_vs_plain = txn records/s over the mean of the two plain
                   baselines of the same P (test txn_baseline: plain producer,
                   idempotence off, same records/partitioning). After each N, unless
                   --no-txn-flush-baseline: txn_flush_baseline, the plain producer
                   calling flush() after every N records (the pipeline drain of a
                   commit without the transaction protocol; p50/p99 = flush()).
                   --txn-client java: the same rows with the Java client
                   (kafka-clients 4.x, bench/java/TxnBench.java: K producer threads in
                   one JVM, transaction version 2 when the broker finalizes it), rows
                   labelled "java"; the broker's CPU is not sampled for them.

MB is 10^6 bytes of record values (keys/headers are empty). CPU% is CPU time
(user+sys, all threads, from /proc/<pid>/stat) over wall time, so 100% = one core.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import types
import uuid
from array import array
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(*a):
    print("[kbench]", *a, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- /proc helpers
def cpu_ticks(pid):
    """utime+stime of a process (all its threads), in clock ticks; None if gone."""
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # fields 14 and 15 of stat(5)
    except (OSError, IndexError, ValueError):
        return None


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


class Sampler:
    """CPU of this process and of the broker, and the load average, over a phase."""

    def __init__(self, broker_pid):
        self.broker_pid = broker_pid

    def __enter__(self):
        self.load_start = loadavg()
        self.c0 = cpu_ticks(os.getpid())
        self.b0 = cpu_ticks(self.broker_pid)
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.t0
        c1, b1 = cpu_ticks(os.getpid()), cpu_ticks(self.broker_pid)
        self.load_end = loadavg()

        def pct(a, b):
            if a is None or b is None or self.wall <= 0:
                return None
            return round(100.0 * (b - a) / CLK_TCK / self.wall, 1)

        self.client_cpu = pct(self.c0, c1)
        self.broker_cpu = pct(self.b0, b1)
        self.broker_cpu_s = None if self.b0 is None or b1 is None else \
            round((b1 - self.b0) / CLK_TCK, 3)
        return False

    def fields(self):
        return {"client_cpu_pct": self.client_cpu, "broker_cpu_pct": self.broker_cpu,
                "broker_cpu_s": self.broker_cpu_s, "loadavg_start": self.load_start, "loadavg_end": self.load_end}


# ---------------------------------------------------------------- clients
def producer_conf(args, bootstrap):
    conf = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "linger.ms": args.linger_ms,
        "batch.size": args.batch_size,
        "batch.num.messages": 1000000,
        "compression.type": "none",
        "enable.idempotence": bool(args.idempotence),
        "queue.buffering.max.messages": 1000000,
        "queue.buffering.max.kbytes": 2097152,
        "message.timeout.ms": int(args.phase_timeout * 1000),
        "log_level": 3,
    }
    if args.mock:
        conf["test.mock.num.brokers"] = 1
    return conf


def payloads(size, count=16):
    # a few pre-generated random (incompressible) buffers, cycled
    return [os.urandom(size) for _ in range(count)]


def create_topic(bootstrap, name, partitions, timeout=30.0):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    fut = admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=timeout)
    fut[name].result(timeout=timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:  # wait until every partition has a leader
        md = admin.list_topics(topic=name, timeout=5)
        t = md.topics.get(name)
        if t and t.error is None and len(t.partitions) == partitions and \
                all(p.leader >= 0 and p.error is None for p in t.partitions.values()):
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {name} has no leaders after {timeout}s")


def auto_create(bootstrap, topic):
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        t = admin.list_topics(topic=topic, timeout=5).topics.get(topic)
        if t and t.error is None and t.partitions:
            return len(t.partitions)
        time.sleep(0.1)
    raise RuntimeError(f"topic {topic} not auto-created")


# ---------------------------------------------------------------- phases
def base_result(args, test, partitions):
    return {"label": args.label, "test": test, "partitions": partitions,
            "record_bytes": args.size, "acks": "all", "linger_ms": args.linger_ms,
            "batch_size": args.batch_size, "idempotence": bool(args.idempotence)}


def bench_produce(args, bootstrap, topic, partitions, bufs):
    from confluent_kafka import Producer

    errors = []
    conf = producer_conf(args, bootstrap)
    conf["delivery.report.only.error"] = True  # no per-record Python callback
    conf["on_delivery"] = lambda err, msg: errors.append(err)
    p = Producer(conf)
    p.list_topics(topic=topic, timeout=10)  # connect + metadata outside the timed part
    n, nb = args.records, len(bufs)
    produce, poll = p.produce, p.poll
    deadline = time.monotonic() + args.phase_timeout
    with Sampler(args.broker_pid) as s:
        t0 = time.perf_counter()
        for i in range(n):
            while True:
                try:
                    produce(topic, bufs[i % nb])
                    break
                except BufferError:
                    poll(0.001)
            if i % 10000 == 0:
                poll(0)
                if time.monotonic() > deadline:
                    raise RuntimeError("produce phase over --phase-timeout")
        t_loop = time.perf_counter() - t0
        left = p.flush(max(1.0, deadline - time.monotonic()))
        secs = time.perf_counter() - t0
    if left or errors:
        raise RuntimeError(f"produce: {left} undelivered, {len(errors)} errors "
                           f"(first: {errors[:1]})")
    r = base_result(args, "produce", partitions)
    r.update(records=n, seconds=round(secs, 3), records_per_s=round(n / secs),
             mb_per_s=round(n * args.size / secs / 1e6, 1),
             produce_loop_s=round(t_loop, 3), **s.fields())
    return r


def percentile(sorted_vals, q):
    if not sorted_vals:
        return None
    k = min(len(sorted_vals) - 1, max(0, int(round(q * (len(sorted_vals) - 1)))))
    return sorted_vals[k]


def bench_latency(args, bootstrap, topic, rate, bufs):
    from confluent_kafka import Producer

    n = max(1, int(rate * args.latency_seconds))
    sent = array("d", bytes(8 * n))
    lat = array("d", bytes(8 * n))
    errors = []

    def on_delivery(i, err, msg):
        if err is not None:
            errors.append(err)
        else:
            lat[i] = time.perf_counter() - sent[i]

    p = Producer(producer_conf(args, bootstrap))
    p.list_topics(topic=topic, timeout=10)
    # warm-up: a few records so connection setup is not in the measurement
    for _ in range(100):
        p.produce(topic, bufs[0])
    p.flush(10)
    produce, poll, nb, now = p.produce, p.poll, len(bufs), time.perf_counter
    deadline = time.monotonic() + args.phase_timeout
    with Sampler(args.broker_pid) as s:
        t0 = now()
        i = 0
        # paced in bursts: every wake-up sends the records whose due time has
        # passed, then polls (serving delivery callbacks) until the next one is due
        while i < n:
            due = min(n, int((now() - t0) * rate) + 1)
            while i < due:
                sent[i] = now()
                try:
                    produce(topic, bufs[i % nb], on_delivery=partial(on_delivery, i))
                except BufferError:
                    poll(0.001)
                    continue
                i += 1
            poll(0)
            wait = t0 + i / rate - now()
            if wait > 0:
                poll(max(wait, 0.001))
            if time.monotonic() > deadline:
                raise RuntimeError("latency phase over --phase-timeout")
        send_secs = now() - t0
        left = p.flush(max(1.0, deadline - time.monotonic()))
    if left or errors:
        raise RuntimeError(f"latency: {left} undelivered, {len(errors)} errors "
                           f"(first: {errors[:1]})")
    vals = sorted(lat)
    ms = lambda v: round(v * 1000, 2)  # noqa: E731
    r = base_result(args, "produce_latency", 1)
    r.update(records=n, target_rate=round(rate), achieved_rate=round(n / send_secs),
             # the paced loop fell behind: the client, not the broker, set the pace
             client_bound=n / send_secs < 0.95 * rate,
             mb_per_s=round(n * args.size / send_secs / 1e6, 1),
             seconds=round(send_secs, 3),
             p50_ms=ms(percentile(vals, 0.50)), p99_ms=ms(percentile(vals, 0.99)),
             p999_ms=ms(percentile(vals, 0.999)), max_ms=ms(vals[-1]),
             mean_ms=ms(sum(vals) / len(vals)), **s.fields())
    return r


def _consume_loop(bootstrap, topic, partitions, expected, timeout, barrier=None):
    """One Consumer reads `expected` records of `topic` from the start; returns counts and the
    monotonic start/end of the timed part (assign() to the last record)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"kbench-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "fetch.max.bytes": 52428800,
        "max.partition.fetch.bytes": 52428800,
        "receive.message.max.bytes": 104857600,
        "enable.partition.eof": False,
        # librdkafka pauses fetching for this long once its local queue passes
        # queued.max.messages.kbytes (64 MiB), which one 50 MiB response nearly does: with its
        # default (1000 ms) a 300 MB read spends most of its time in that pause, whatever the
        # broker. 0 keeps the consumer fetching.
        "fetch.queue.backoff.ms": 0,
        "log_level": 3,
    })
    c.list_topics(topic=topic, timeout=10)
    if barrier is not None:
        barrier.wait()
    count = nbytes = 0
    in_consume = in_loop = 0.0
    deadline = time.monotonic() + timeout
    try:
        t0 = time.monotonic()
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        while count < expected:
            if time.monotonic() > deadline:
                raise RuntimeError(f"consume: {count}/{expected} after --phase-timeout")
            ta = time.perf_counter()
            batch = c.consume(num_messages=10000, timeout=1.0)
            tb = time.perf_counter()
            in_consume += tb - ta
            for m in batch:
                if m.error():
                    raise RuntimeError(f"consume error: {m.error()}")
                count += 1
                nbytes += len(m.value())
            in_loop += time.perf_counter() - tb
        t1 = time.monotonic()
    finally:
        c.close()
    return {"records": count, "bytes": nbytes, "t0": t0, "t1": t1,
            "consume_call_s": in_consume, "python_loop_s": in_loop}


def _consume_worker(q, barrier, worker, kw):
    try:
        q.put((worker, _consume_loop(**kw, barrier=barrier)))
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        q.put((worker, e))


def bench_consume(args, bootstrap, topic, partitions, expected, consumers=1):
    """`consumers` Consumers, each in a group of its own and (for more than one) a process of
    its own, each read all `expected` records of `topic`: the broker serves consumers x
    expected records. records/s over the span from the first assign() to the last record."""
    kw = dict(bootstrap=bootstrap, topic=topic, partitions=partitions, expected=expected,
              timeout=args.phase_timeout)
    if consumers <= 1:
        with Sampler(args.broker_pid) as s:
            parts = [_consume_loop(**kw)]
    else:
        import multiprocessing as mp
        ctx = mp.get_context("spawn")  # no librdkafka state inherited through fork
        q, barrier = ctx.Queue(), ctx.Barrier(consumers + 1)
        procs = [ctx.Process(target=_consume_worker, args=(q, barrier, w, kw))
                 for w in range(consumers)]
        for pr in procs:
            pr.start()
        barrier.wait(timeout=120)
        with Sampler(args.broker_pid) as s:
            got = dict(q.get(timeout=args.phase_timeout + 60) for _ in range(consumers))
        for pr in procs:
            pr.join(10)
        bad = [x for x in got.values() if isinstance(x, BaseException)]
        if bad:
            raise RuntimeError(f"{len(bad)} of {consumers} consumers failed: {bad[0]!r}")
        parts = list(got.values())
    count = sum(x["records"] for x in parts)
    nbytes = sum(x["bytes"] for x in parts)
    secs = max(x["t1"] for x in parts) - min(x["t0"] for x in parts)
    r = base_result(args, "consume", partitions)
    r.update(records=count, seconds=round(secs, 3), records_per_s=round(count / secs),
             mb_per_s=round(nbytes / secs / 1e6, 1), consumers=consumers,
             consume_call_s=round(sum(x["consume_call_s"] for x in parts), 3),
             python_loop_s=round(sum(x["python_loop_s"] for x in parts), 3), **s.fields())
    if consumers > 1:
        r["client_cpu_pct"] = None  # this process only waits; the consumers are others
    return r


# ---------------------------------------------------------------- share groups
def new_share_group(bootstrap, prefix):
    """A fresh share group id whose share.auto.offset.reset is earliest (set before it exists)."""
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,
                                       ConfigResource, ResourceType)

    group = f"{prefix}-{uuid.uuid4().hex[:8]}"
    a = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest",
                    incremental_operation=AlterConfigOpType.SET)])
    for fut in a.incremental_alter_configs([res]).values():
        fut.result(timeout=30)
    return group


def _share_worker(q, barrier, counter, bootstrap, topic, group, mode, expected, timeout, pid):
    """One share consumer process: polls until the group has `expected` records in all."""
    try:
        from confluent_kafka import ShareConsumer
        conf = {"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3,
                "share.acknowledgement.mode": mode}
        c = ShareConsumer(conf)
        c.subscribe([topic])
        barrier.wait()
        got = 0
        t0 = time.monotonic()
        t_first = t_last = None
        deadline = t0 + timeout
        cpu0 = cpu_ticks(os.getpid())
        while counter.value < expected and time.monotonic() < deadline:
            batch = c.poll(0.2)
            n = batch.count()
            if not n:
                continue
            if mode == "explicit":
                for m in batch.records():
                    c.acknowledge(m)
                c.commit_async()
            now = time.monotonic()
            t_first = t_first or now
            t_last = now
            got += n
            with counter.get_lock():
                counter.value += n
        cpu1 = cpu_ticks(os.getpid())
        c.close()
        q.put((pid, {"records": got, "t_first": t_first, "t_last": t_last,
                     "cpu_s": None if cpu0 is None else (cpu1 - cpu0) / CLK_TCK}))
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        q.put((pid, e))


def bench_share(args, bootstrap, topic, partitions, expected, consumers, mode):
    """`consumers` share consumers (one process each) in a new group read `expected` records
    from the start of `topic`; records/s over the span from the first start to the moment the
    group has them all (implicit: accepted on the next poll; explicit: acknowledge + commit)."""
    import multiprocessing as mp

    group = new_share_group(bootstrap, "kbench-share")
    ctx = mp.get_context("spawn")
    q, barrier = ctx.Queue(), ctx.Barrier(consumers + 1)
    counter = ctx.Value("q", 0)
    procs = [ctx.Process(target=_share_worker,
                         args=(q, barrier, counter, bootstrap, topic, group, mode, expected,
                               args.phase_timeout, i)) for i in range(consumers)]
    for pr in procs:
        pr.start()
    with Sampler(args.broker_pid) as s:
        barrier.wait()
        t0 = time.monotonic()
        got = {}
        for _ in range(consumers):
            w, res = q.get(timeout=args.phase_timeout + 60)
            got[w] = res
    for pr in procs:
        pr.join(10)
    bad = [x for x in got.values() if isinstance(x, BaseException)]
    if bad:
        raise RuntimeError(f"share consumer failed: {bad[0]!r}")
    total = sum(x["records"] for x in got.values())
    if total < expected:
        raise RuntimeError(f"share: {total}/{expected} records after --phase-timeout")
    t_end = max(x["t_last"] for x in got.values() if x["t_last"])
    t_first = min(x["t_first"] for x in got.values() if x["t_first"])
    # From the first record delivered (group join and assignment excluded: Kafka assigns on
    # the third heartbeat, ~2 s) to the moment the group had them all.
    secs = t_end - t_first
    r = base_result(args, "share_consume", partitions)
    r.update(consumers=consumers, ack_mode=mode, records=total, duplicates=total - expected,
             seconds=round(secs, 3), records_per_s=round(expected / secs),
             seconds_incl_join=round(t_end - t0, 3),
             mb_per_s=round(expected * args.size / secs / 1e6, 1),
             per_consumer=[got[i]["records"] for i in sorted(got)], **s.fields())
    return r


def rss_kib(pid):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, TypeError, ValueError):
        return None
    return None


def bench_share_hold(args, bootstrap, topic, partitions, consumers=8, wait=2.0):
    """Explicit-mode share consumers that never acknowledge (librdkafka then refuses a second
    poll, so each polls until it holds records, then holds them): how many records all of them
    get in total, which the in-flight window caps at share.partition.max.record.locks (2000 by
    default) per partition plus at most one log batch, and the broker's RSS before and after."""
    from confluent_kafka import ShareConsumer

    group = new_share_group(bootstrap, "kbench-hold")
    rss0 = rss_kib(args.broker_pid)
    held, per = [], []
    got = 0
    for _ in range(consumers):
        c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3,
                           "share.acknowledgement.mode": "explicit"})
        c.subscribe([topic])
        n = 0
        deadline = time.monotonic() + wait
        while n == 0 and time.monotonic() < deadline:
            n = c.poll(0.2).count()
        held.append(c)
        per.append(n)
        got += n
    rss1 = rss_kib(args.broker_pid)
    for c in held:
        c.close()
    r = base_result(args, "share_hold", partitions)
    r.update(records=got, consumers=consumers, per_consumer=per, broker_rss_kib_before=rss0,
             broker_rss_kib_after=rss1)
    return r


def run_share_phase(args, bootstrap, parts, bufs, run_id, common):
    for P in parts:
        topic = f"kbench-{run_id}-share-p{P}"
        create_topic(bootstrap, topic, P)
        w = argparse.Namespace(**vars(args))
        w.records = args.share_records
        log(f"{args.label}: share phase: produce {w.records} -> {topic} ...")
        bench_produce(w, bootstrap, topic, P, bufs)
        rows = []
        log(f"{args.label}: classic consumer, P={P} ...")
        classic = bench_consume(w, bootstrap, topic, P, w.records)
        classic.update(common)
        emit(classic, args.out)
        for mode in ("implicit", "explicit"):
            for k in [int(x) for x in args.share_consumers.split(",") if x]:
                log(f"{args.label}: {k} share consumer(s), {mode}, P={P} ...")
                r = bench_share(w, bootstrap, topic, P, w.records, k, mode)
                r.update(common, classic_records_per_s=classic["records_per_s"],
                         ratio_vs_classic=round(r["records_per_s"] / classic["records_per_s"], 3))
                emit(r, args.out)
                rows.append(r)
        log(f"{args.label}: a share consumer that never acknowledges, P={P} ...")
        r = bench_share_hold(w, bootstrap, topic, P)
        r.update(common)
        emit(r, args.out)


# ---------------------------------------------------------------- transactions
def txn_sizes(args):
    return [int(x) for x in args.txn_sizes.split(",") if x.strip()]


def txn_records(args, n_per_txn):
    return max(n_per_txn, min(args.txn_records, n_per_txn * args.txn_max_txns))


def bench_txn_baseline(args, bootstrap, topic, partitions, records, bufs, flush_every=None,
                       worker=0, barrier=None):
    """Plain (non-transactional, idempotence off) producer, same records and partitioning.

    With flush_every=N: flush() after every N records (the transaction's drain of the
    pipeline, without its protocol); the flush() durations are reported as p50/p99.
    worker/barrier: one of --txn-producers processes started together (see run_workers)."""
    from confluent_kafka import Producer

    errors = []
    conf = producer_conf(args, bootstrap)
    conf["enable.idempotence"] = False
    conf["delivery.report.only.error"] = True
    conf["on_delivery"] = lambda err, msg: errors.append(err)
    p = Producer(conf)
    p.list_topics(topic=topic, timeout=10)
    for i in range(200):  # connection + first batch outside the timing
        p.produce(topic, bufs[0], partition=i % partitions)
    p.flush(10)
    produce, poll, nb = p.produce, p.poll, len(bufs)
    deadline = time.monotonic() + args.phase_timeout
    flush_lat = array("d")
    now = time.perf_counter
    if barrier is not None:
        barrier.wait()
    with Sampler(args.broker_pid) as s:
        t0 = now()
        t0_abs = time.monotonic()
        for i in range(records):
            while True:
                try:
                    produce(topic, bufs[i % nb], partition=i % partitions)
                    break
                except BufferError:
                    poll(0.001)
            if flush_every and (i + 1) % flush_every == 0:
                tf = now()
                if p.flush(args.phase_timeout):
                    raise RuntimeError("flush baseline: flush() timed out")
                flush_lat.append(now() - tf)
                if time.monotonic() > deadline:
                    raise RuntimeError("flush baseline over --phase-timeout")
            elif i % 10000 == 0:
                poll(0)
                if time.monotonic() > deadline:
                    raise RuntimeError("txn baseline over --phase-timeout")
        left = p.flush(max(1.0, deadline - time.monotonic()))
        secs = now() - t0
        t1_abs = time.monotonic()
    if left or errors:
        raise RuntimeError(f"txn baseline: {left} undelivered, {len(errors)} errors "
                           f"(first: {errors[:1]})")
    r = base_result(args, "txn_flush_baseline" if flush_every else "txn_baseline", partitions)
    r.update(idempotence=False, records=records, seconds=round(secs, 3),
             records_per_s=round(records / secs),
             mb_per_s=round(records * args.size / secs / 1e6, 1), **s.fields(),
             _t0=t0_abs, _t1=t1_abs, _lat=list(flush_lat))
    if flush_every:
        fl = sorted(flush_lat)
        ms = lambda v: round(v * 1000, 2)  # noqa: E731
        r.update(records_per_txn=flush_every, flushes=len(fl),
                 p50_ms=ms(percentile(fl, 0.50)), p99_ms=ms(percentile(fl, 0.99)),
                 max_ms=ms(fl[-1]), mean_ms=ms(sum(fl) / len(fl)))
    return r


def bench_txn(args, bootstrap, topic, partitions, n_per_txn, records, bufs, run_id,
              worker=0, barrier=None):
    """begin_transaction -> n_per_txn x produce() -> commit_transaction, until `records`.

    worker/barrier: one of --txn-producers processes (own transactional.id) started together."""
    from confluent_kafka import Producer

    errors = []
    conf = producer_conf(args, bootstrap)
    conf.pop("enable.idempotence")  # implied by transactional.id
    conf["transactional.id"] = f"kbench-{run_id}-p{partitions}-n{n_per_txn}-w{worker}"
    conf["transaction.timeout.ms"] = 60000  # >= message.timeout.ms (librdkafka requires)
    conf["delivery.report.only.error"] = True
    conf["on_delivery"] = lambda err, msg: errors.append(err)
    p = Producer(conf)
    p.list_topics(topic=topic, timeout=10)
    p.init_transactions(30)
    produce, poll, nb = p.produce, p.poll, len(bufs)
    begin, commit = p.begin_transaction, p.commit_transaction
    for _ in range(3):  # untimed: coordinator lookup, connections, first AddPartitionsToTxn
        begin()
        for i in range(n_per_txn):
            produce(topic, bufs[i % nb], partition=i % partitions)
        commit(30)
    txns = records // n_per_txn
    commit_lat = array("d")
    txn_lat = array("d")
    now = time.perf_counter
    deadline = time.monotonic() + min(args.txn_seconds, args.phase_timeout)
    truncated = False
    k = 0
    if barrier is not None:
        barrier.wait()
    with Sampler(args.broker_pid) as s:
        t0 = now()
        t0_abs = time.monotonic()
        for t in range(txns):
            ta = now()
            begin()
            for _ in range(n_per_txn):
                while True:
                    try:
                        produce(topic, bufs[k % nb], partition=k % partitions)
                        break
                    except BufferError:
                        poll(0.001)
                k += 1
            tb = now()
            commit(args.phase_timeout)
            tc = now()
            commit_lat.append(tc - tb)
            txn_lat.append(tc - ta)
            if time.monotonic() > deadline and t + 1 < txns:
                truncated = True
                break
        secs = now() - t0
        t1_abs = time.monotonic()
    p.flush(5)
    if errors:
        raise RuntimeError(f"txn: {len(errors)} delivery errors (first: {errors[:1]})")
    done = len(commit_lat) * n_per_txn
    cl, tl = sorted(commit_lat), sorted(txn_lat)
    ms = lambda v: round(v * 1000, 2)  # noqa: E731
    r = base_result(args, "txn_produce", partitions)
    r.update(idempotence=True, transactional=True, records_per_txn=n_per_txn,
             txns=len(commit_lat), records=done, truncated=truncated,
             seconds=round(secs, 3), records_per_s=round(done / secs),
             mb_per_s=round(done * args.size / secs / 1e6, 1),
             txns_per_s=round(len(commit_lat) / secs, 1),
             # p50_ms/p99_ms of a txn_produce row are the commit latency
             p50_ms=ms(percentile(cl, 0.50)), p99_ms=ms(percentile(cl, 0.99)),
             p999_ms=ms(percentile(cl, 0.999)), max_ms=ms(cl[-1]),
             mean_ms=ms(sum(cl) / len(cl)),
             commit_share=round(sum(cl) / secs, 3),  # fraction of the wall time in commit
             txn_p50_ms=ms(percentile(tl, 0.50)), txn_p99_ms=ms(percentile(tl, 0.99)),
             **s.fields(), _t0=t0_abs, _t1=t1_abs, _lat=list(commit_lat))
    return r


def _worker_main(q, barrier, fn_name, worker, kw):
    try:
        q.put((worker, globals()[fn_name](**kw, worker=worker, barrier=barrier)))
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        q.put((worker, e))


def run_workers(opts, fn, records, **kw):
    """Runs fn(records=records / K, **kw) in K = --txn-producers processes started together
    (a barrier before the timed part) and merges their results: records/s = all records over
    the span from the first start to the last end; latencies merged. K=1 runs in-process."""
    args = opts
    k = args.txn_producers
    if k <= 1:
        r = fn(records=records, **kw)
    else:
        import multiprocessing as mp
        ctx = mp.get_context("spawn")  # no librdkafka state inherited through fork
        q, barrier = ctx.Queue(), ctx.Barrier(k)
        share = max(1, records // k)
        procs = [ctx.Process(target=_worker_main,
                             args=(q, barrier, fn.__name__, w, dict(kw, records=share)))
                 for w in range(k)]
        for pr in procs:
            pr.start()
        got = {}
        for _ in range(k):
            w, res = q.get(timeout=args.phase_timeout + 60)
            got[w] = res
        for pr in procs:
            pr.join(10)
        bad = [res for res in got.values() if isinstance(res, BaseException)]
        if bad:
            raise RuntimeError(f"{len(bad)} of {k} workers failed: {bad[0]!r}")
        parts = [got[w] for w in range(k)]
        r = dict(parts[0])
        span = max(x["_t1"] for x in parts) - min(x["_t0"] for x in parts)
        done = sum(x["records"] for x in parts)
        r.update(records=done, seconds=round(span, 3), records_per_s=round(done / span),
                 mb_per_s=round(done * args.size / span / 1e6, 1),
                 truncated=any(x.get("truncated") for x in parts),
                 client_cpu_pct=None)  # per process; not comparable summed
        if "txns" in r:
            r.update(txns=sum(x["txns"] for x in parts),
                     txns_per_s=round(sum(x["txns"] for x in parts) / span, 1))
        lat = sorted(v for x in parts for v in x["_lat"])
        if lat and "p50_ms" in r:
            ms = lambda v: round(v * 1000, 2)  # noqa: E731
            r.update(p50_ms=ms(percentile(lat, 0.50)), p99_ms=ms(percentile(lat, 0.99)),
                     max_ms=ms(lat[-1]), mean_ms=ms(sum(lat) / len(lat)))
            if "p999_ms" in r:
                r["p999_ms"] = ms(percentile(lat, 0.999))
    for key in ("_t0", "_t1", "_lat"):
        r.pop(key, None)
    r["producers"] = k
    return r


def java_classpath(args):
    """Compiles bench/java/TxnBench.java once per run against the reference kafka-clients
    jars (KAFKA_LIBS, else tests/interop/kafka_ref/fetch.sh, which fetches them from Maven)."""
    import subprocess

    if getattr(args, "_java_cp", None):
        return args._java_cp
    repo = Path(__file__).resolve().parent.parent
    libs = os.environ.get("KAFKA_LIBS") or subprocess.run(
        [str(repo / "tests/interop/kafka_ref/fetch.sh")], check=True, capture_output=True,
        text=True, timeout=900).stdout.strip()
    classes = tempfile.mkdtemp(prefix="kbench-java-")
    subprocess.run(["javac", "-d", classes, "-cp", f"{libs}/*",
                    str(repo / "bench/java/TxnBench.java")], check=True, timeout=300)
    args._java_cp = f"{libs}/*:{classes}"
    return args._java_cp


def bench_java(args, bootstrap, topic, partitions, mode, records, n_per_txn, run_id):
    """One row of the txn phase with the Java client (bench/java/TxnBench.java): K producer
    threads in one JVM (K = --txn-producers), mode plain / flush (flush() every N) / txn.
    The JVM times itself after its warm-up; the broker's CPU is not sampled (the JVM start
    and warm-up would be in it)."""
    import subprocess

    cmd = ["java", "-cp", java_classpath(args), "TxnBench", bootstrap, topic, str(partitions),
           mode, str(records), str(n_per_txn), str(args.txn_producers), str(args.size),
           f"kbench-{run_id}-java-p{partitions}-n{n_per_txn}-{uuid.uuid4().hex[:6]}",
           str(min(args.txn_seconds, args.phase_timeout))]
    load_start = list(os.getloadavg())
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=args.phase_timeout + 120)
    lines = [l for l in run.stdout.splitlines() if l.startswith("{")]
    if run.returncode != 0 or not lines:
        raise RuntimeError(f"TxnBench {mode} failed ({run.returncode}): "
                           f"{(run.stdout + run.stderr)[-2000:]}")
    got = json.loads(lines[-1])
    test = {"plain": "txn_baseline", "flush": "txn_flush_baseline", "txn": "txn_produce"}[mode]
    r = base_result(args, test, partitions)
    r.update(client="java", idempotence=mode == "txn", producers=args.txn_producers,
             records=got["records"], seconds=got["seconds"],
             records_per_s=got["records_per_s"], mb_per_s=got["mb_per_s"],
             truncated=got["truncated"], client_cpu_pct=None, broker_cpu_pct=None,
             loadavg_start=load_start, loadavg_end=list(os.getloadavg()))
    for key in ("p50_ms", "p99_ms", "max_ms", "mean_ms"):
        if key in got:
            r[key] = got[key]
    if mode == "txn":
        r.update(transactional=True, records_per_txn=n_per_txn, txns=got["txns"],
                 txns_per_s=round(got["txns"] / got["seconds"], 1))
    elif mode == "flush":
        r.update(records_per_txn=n_per_txn)
    return r


def run_txn_phase(args, bootstrap, parts, bufs, run_id, common):
    if args.txn_client == "java":
        java = partial(bench_java, args, bootstrap, run_id=run_id)
        warm = max(txn_sizes(args))  # the JVM's untimed warm-up: 3 x this many records
        plain_row = lambda topic, P, n: java(topic, P, "plain", n, warm)  # noqa: E731
        txn_row = lambda topic, P, recs, n: java(topic, P, "txn", recs, n)  # noqa: E731
        flush_row = lambda topic, P, recs, n: java(topic, P, "flush", recs, n)  # noqa: E731
    else:
        def plain_row(topic, P, n):
            return run_workers(args, bench_txn_baseline, n, args=args, bootstrap=bootstrap,
                               topic=topic, partitions=P, bufs=bufs)

        def txn_row(topic, P, recs, n):
            return run_workers(args, bench_txn, recs, n_per_txn=n, run_id=run_id, args=args,
                               bootstrap=bootstrap, topic=topic, partitions=P, bufs=bufs)

        def flush_row(topic, P, recs, n):
            return run_workers(args, bench_txn_baseline, recs, flush_every=n, args=args,
                               bootstrap=bootstrap, topic=topic, partitions=P, bufs=bufs)
    for P in parts:
        base_n = txn_records(args, max(txn_sizes(args)))
        topic = f"kbench-{run_id}-txn-p{P}"
        create_topic(bootstrap, topic, P)
        log(f"{args.label}: txn baseline (plain) {base_n} records, P={P} ...")
        b1 = plain_row(topic, P, base_n)
        b1.update(common, baseline="before")
        emit(b1, args.out)
        rows = []
        for n in txn_sizes(args):
            recs = txn_records(args, n)
            log(f"{args.label}: txn {recs} records, {n}/txn, P={P} ...")
            rows.append(txn_row(topic, P, recs, n))
            if args.txn_flush_baseline:
                log(f"{args.label}: plain + flush() every {n}, {recs} records, P={P} ...")
                rows.append(flush_row(topic, P, recs, n))
        log(f"{args.label}: txn baseline (plain) again, P={P} ...")
        b2 = plain_row(topic, P, base_n)
        b2.update(common, baseline="after")
        emit(b2, args.out)
        plain = (b1["records_per_s"] + b2["records_per_s"]) / 2
        for r in rows:
            r.update(common, plain_records_per_s=round(plain),
                     ratio_vs_plain=round(r["records_per_s"] / plain, 3))
            emit(r, args.out)


# ---------------------------------------------------------------- reference Kafka
def conftest_module():
    """tests/interop/conftest.py (its Broker starts Shoal or Kafka), importable without
    pytest installed: it only needs a few of pytest's decorators."""
    try:
        import pytest  # noqa: F401  (conftest imports it)
    except ImportError:
        stub = types.ModuleType("pytest")
        stub.UsageError = RuntimeError
        stub.fixture = lambda *a, **k: a[0] if a and callable(a[0]) else (lambda f: f)
        stub.hookimpl = lambda *a, **k: (lambda f: f)

        def fail(msg, pytrace=True):
            raise RuntimeError(msg)
        stub.fail = fail
        sys.modules["pytest"] = stub
    sys.path.insert(0, str(REPO / "tests" / "interop"))
    import conftest
    return conftest


def start_kafka(workdir):
    """Start single-node KRaft Apache Kafka with tests/interop/conftest.py's Broker."""
    os.environ["INTEROP_TARGET"] = "kafka"
    conftest = conftest_module()
    conftest.TARGET = "kafka"
    b = conftest.Broker(Path(workdir))
    log("starting reference Kafka (JVM, KRaft) ...")
    t = time.monotonic()
    b.start()
    log(f"kafka ready at {b.bootstrap} (pid {b.proc.pid}) in {time.monotonic() - t:.1f}s")
    return b


# ---------------------------------------------------------------- main
def cmd_run(args):
    args.mock_listener = False
    kafka = tmp = mock_holder = None
    try:
        if args.start_kafka:
            tmp = tempfile.mkdtemp(prefix="kbench-kafka-")
            kafka = start_kafka(tmp)
            bootstrap, args.broker_pid = kafka.bootstrap, kafka.proc.pid
        elif args.mock:
            from confluent_kafka import Producer

            # the mock cluster lives inside this client; keep it alive and
            # point the other clients at its listener
            mock_holder = Producer({"test.mock.num.brokers": 1, "log_level": 3})
            md = mock_holder.list_topics(timeout=10)
            bootstrap = ",".join(f"{b.host}:{b.port}" for b in md.brokers.values())
            args.mock = False  # other clients connect to that listener normally
            args.mock_listener = True
            args.broker_pid = None
        else:
            bootstrap = args.bootstrap
        return run_phases(args, bootstrap)
    finally:
        if kafka is not None:
            kafka.stop()
            kafka.kill9()
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
        del mock_holder


def emit(r, out):
    line = json.dumps(r, sort_keys=False)
    print(line, flush=True)
    if out:
        with open(out, "a") as f:
            f.write(line + "\n")


def run_phases(args, bootstrap):
    bufs = payloads(args.size)
    run_id = uuid.uuid4().hex[:6]
    parts = [int(x) for x in args.partitions.split(",") if x]
    produced = []
    rate_1p = None
    common = {"broker_mode": args.broker_mode, "run_id": run_id,
              "shoal_sha256": os.environ.get("BENCH_SHOAL_SHA"),
              "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    if args.warmup:
        # untimed: JIT (reference Kafka), connections, page cache, allocator
        topic = f"kbench-{run_id}-warmup"
        if args.mock_listener:
            P = auto_create(bootstrap, topic)
        else:
            P = 1
            create_topic(bootstrap, topic, P)
        log(f"{args.label}: warm-up, {args.warmup} records produced and consumed (untimed)")
        w = argparse.Namespace(**vars(args))
        w.records = args.warmup
        bench_produce(w, bootstrap, topic, P, bufs)
        if "consume" in args.phases:
            bench_consume(w, bootstrap, topic, P, args.warmup)
    if "produce" in args.phases:
        for P in parts:
            topic = f"kbench-{run_id}-p{P}"
            if args.mock_listener:
                # the mock broker has no CreateTopics: it auto-creates (4 partitions)
                P = auto_create(bootstrap, topic)
                if any(x[1] == P for x in produced):
                    continue
            else:
                create_topic(bootstrap, topic, P)
            log(f"{args.label}: produce {args.records} x {args.size} B -> {topic} ...")
            r = bench_produce(args, bootstrap, topic, P, bufs)
            r.update(common)
            emit(r, args.out)
            produced.append((topic, P, args.records))
            if rate_1p is None or P == 1:
                rate_1p = r["records_per_s"]
    if "consume" in args.phases:
        for topic, P, n in produced:
            for k in (int(x) for x in args.consumers.split(",") if x):
                log(f"{args.label}: consume {n} from {topic} by {k} consumer(s) ...")
                r = bench_consume(args, bootstrap, topic, P, n, consumers=k)
                r.update(common)
                emit(r, args.out)
    if "share" in args.phases:
        if args.mock_listener:
            raise SystemExit("the share phase does not run against the mock broker")
        run_share_phase(args, bootstrap, parts, bufs, run_id, common)
    if "txn" in args.phases:
        if args.mock_listener:
            raise SystemExit("the txn phase does not run against the mock broker")
        run_txn_phase(args, bootstrap, parts, bufs, run_id, common)
    if "latency" in args.phases:
        for k, spec in enumerate(x.strip() for x in args.latency_rates.split(",") if x.strip()):
            if spec == "half":
                if not rate_1p:
                    raise SystemExit("latency rate 'half' needs the produce phase")
                rate = rate_1p / 2
            elif spec.lower().endswith("mb"):
                rate = float(spec[:-2]) * 1e6 / args.size
            else:
                rate = float(spec)
            topic = f"kbench-{run_id}-lat{k}"
            if args.mock_listener:
                auto_create(bootstrap, topic)
            else:
                create_topic(bootstrap, topic, 1)
            log(f"{args.label}: latency at {rate:.0f} rec/s ({spec}) for {args.latency_seconds}s ...")
            r = bench_latency(args, bootstrap, topic, rate, bufs)
            r.update(common, rate_spec=spec)
            emit(r, args.out)


def cmd_fsync_probe(args):
    """The disk's own durable-write cost: append --size-kib then fdatasync, repeated."""
    d = tempfile.mkdtemp(prefix="kbench-fsync-", dir=args.dir)
    buf = os.urandom(args.size_kib * 1024)
    lat = []
    try:
        fd = os.open(os.path.join(d, "probe"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        load0 = loadavg()
        t_end = time.monotonic() + args.seconds
        while len(lat) < args.count and time.monotonic() < t_end:
            t = time.perf_counter()
            os.write(fd, buf)
            os.fdatasync(fd)
            lat.append(time.perf_counter() - t)
        os.close(fd)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    lat.sort()
    ms = lambda v: round(v * 1000, 2)  # noqa: E731
    r = {"label": "disk", "test": "fsync_probe", "partitions": "-",
         "record_bytes": args.size_kib * 1024, "records": len(lat),
         "seconds": round(sum(lat), 3),
         "mb_per_s": round(len(lat) * len(buf) / sum(lat) / 1e6, 1),
         "p50_ms": ms(percentile(lat, 0.5)), "p99_ms": ms(percentile(lat, 0.99)),
         "p999_ms": ms(percentile(lat, 0.999)), "max_ms": ms(lat[-1]),
         "client_cpu_pct": None, "broker_cpu_pct": None,
         "loadavg_start": load0, "loadavg_end": loadavg(), "dir": args.dir,
         "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    emit(r, args.out)


def fmt(v, nd=1):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def print_table(hdr, rows, markdown):
    """Prints rows under hdr as a Markdown table or as aligned columns."""
    if markdown:
        print("| " + " | ".join(hdr) + " |")
        print("|" + "|".join("---" for _ in hdr) + "|")
        for row in rows:
            print("| " + " | ".join(row) + " |")
        return
    w = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h)
         for i, h in enumerate(hdr)]
    print("  ".join(h.ljust(w[i]) for i, h in enumerate(hdr)))
    for row in rows:
        print("  ".join(c.ljust(w[i]) for i, c in enumerate(row)))


def cmd_table(args):
    rows = [json.loads(l) for l in open(args.file) if l.strip().startswith("{")]
    hdr = ["label", "test", "P", "records", "sec", "rec/s", "MB/s", "p50 ms", "p99 ms",
           "p99.9 ms", "max ms", "client CPU%", "broker CPU%", "load 1m (start>end)"]
    out = []
    for r in rows:
        test = r["test"]
        if test == "produce_latency":
            test = f"latency@{r.get('rate_spec', '')}" + (" CLIENT-BOUND" if r.get("client_bound") else "")
        if test == "fsync_probe":
            test = f"fsync_probe {r['record_bytes'] // 1024} KiB"
        if test == "txn_produce":  # p50/p99 = commit latency
            test = f"txn N={r['records_per_txn']} x{r.get('ratio_vs_plain')}" + \
                (" TRUNCATED" if r.get("truncated") else "")
        if test == "txn_flush_baseline":  # p50/p99 = flush() latency
            test = f"plain+flush/{r['records_per_txn']} x{r.get('ratio_vs_plain')}"
        if test == "share_hold":
            test = (f"share hold (no acks): rss {r.get('broker_rss_kib_before')}"
                    f">{r.get('broker_rss_kib_after')} KiB")
        if test == "share_consume":
            test = (f"share {r['consumers']}x {r['ack_mode']} x{r.get('ratio_vs_classic')}"
                    + (f" DUP={r['duplicates']}" if r.get("duplicates") else ""))
        out.append([r["label"], test, str(r["partitions"]), str(r["records"]),
                    fmt(r.get("seconds"), 2),
                    fmt(r.get("records_per_s") or r.get("achieved_rate")),
                    fmt(r.get("mb_per_s")), fmt(r.get("p50_ms"), 2), fmt(r.get("p99_ms"), 2),
                    fmt(r.get("p999_ms"), 2), fmt(r.get("max_ms"), 2),
                    fmt(r.get("client_cpu_pct")), fmt(r.get("broker_cpu_pct")),
                    (f"{r['loadavg_start'][0]:.2f}>{r['loadavg_end'][0]:.2f}"
                     if r.get("loadavg_start") else "-")])
    print_table(hdr, out, args.markdown)


def cmd_summary(args):
    """Median [min-max] over repeated runs, grouped by label/test/partitions."""
    import statistics

    rows = [json.loads(l) for l in open(args.file) if l.strip().startswith("{")]
    groups = {}
    for r in rows:
        test = r["test"]
        if test == "produce_latency":
            test = f"latency@{r.get('rate_spec', '')}"
        elif test == "fsync_probe":
            test = f"fsync_probe {r['record_bytes'] // 1024} KiB"
        elif test == "txn_produce":
            test = f"txn N={r['records_per_txn']}"
        elif test == "consume" and r.get("consumers", 1) > 1:
            test = f"consume x{r['consumers']}"
        elif test == "txn_flush_baseline":
            test = f"plain+flush/{r['records_per_txn']}"
        groups.setdefault((r["label"], test, str(r["partitions"])), []).append(r)

    def agg(vals, nd):
        vals = [v for v in vals if v is not None]
        if not vals:
            return "-"
        m = statistics.median(vals)
        if len(vals) == 1:
            return f"{m:.{nd}f}"
        return f"{m:.{nd}f} [{min(vals):.{nd}f}-{max(vals):.{nd}f}]"

    hdr = ["label", "test", "P", "runs", "MB/s", "rec/s", "p50 ms", "p99 ms",
           "client CPU%", "broker CPU%", "broker CPU ms/MB", "load 1m", "notes"]

    def cpu_per_mb(r):  # CPU time the broker spent per MB moved: robust to a busy machine
        if r.get("broker_cpu_s") is not None and r.get("records"):
            return r["broker_cpu_s"] * 1000 / (r["records"] * r["record_bytes"] / 1e6)
        if r.get("broker_cpu_pct") is None or not r.get("seconds") or not r.get("records"):
            return None
        return r["broker_cpu_pct"] / 100 * r["seconds"] * 1000 / (r["records"] * r["record_bytes"] / 1e6)

    out = []
    for (label, test, P), rs in groups.items():
        cb = sum(1 for r in rs if r.get("client_bound"))
        notes = [f"{cb}/{len(rs)} client-bound"] if cb else []
        if any("ratio_vs_plain" in r for r in rs):
            notes.append("txn/plain " + agg([r.get("ratio_vs_plain") for r in rs], 2))
        out.append([label, test, P, str(len(rs)), agg([r.get("mb_per_s") for r in rs], 1),
                    agg([r.get("records_per_s") or r.get("achieved_rate") for r in rs], 0),
                    agg([r.get("p50_ms") for r in rs], 2), agg([r.get("p99_ms") for r in rs], 2),
                    agg([r.get("client_cpu_pct") for r in rs], 0),
                    agg([r.get("broker_cpu_pct") for r in rs], 0),
                    agg([cpu_per_mb(r) for r in rs], 2),
                    agg([r["loadavg_start"][0] for r in rs if r.get("loadavg_start")], 1),
                    "; ".join(notes)])
    print_table(hdr, out, args.markdown)


def cmd_txn_summary(args):
    """The transactions table: per label, P and N, median [min-max] over repetitions."""
    import statistics

    rows = [json.loads(l) for l in open(args.file) if l.strip().startswith("{")]
    groups = {}
    for r in rows:
        k = r.get("producers", 1)
        label = r["label"] + (" java" if r.get("client") == "java" else "")
        label += f" x{k} producers" if k > 1 else ""
        if r["test"] == "txn_baseline":
            groups.setdefault((label, r["partitions"], 0), []).append(r)
        elif r["test"] == "txn_produce":
            groups.setdefault((label, r["partitions"], r["records_per_txn"]), []).append(r)
        elif r["test"] == "txn_flush_baseline":
            groups.setdefault((label, r["partitions"], -r["records_per_txn"]), []).append(r)

    def agg(vals, nd):
        vals = [v for v in vals if v is not None]
        if not vals:
            return "-"
        m = statistics.median(vals)
        if len(vals) == 1:
            return f"{m:.{nd}f}"
        return f"{m:.{nd}f} [{min(vals):.{nd}f}-{max(vals):.{nd}f}]"

    hdr = ["label", "P", "N/txn", "runs", "records/s", "MB/s", "commit p50 ms",
           "commit p99 ms", "txn/plain", "client CPU%", "broker CPU%", "load 1m", "notes"]
    out = []
    # per label and P: N descending, each txn row followed by its flush baseline, plain last
    order = lambda k: (k[1], k[2] == 0, -abs(k[2]), k[2] < 0)  # noqa: E731
    labels = list(dict.fromkeys(k[0] for k in groups))
    for key in sorted(groups, key=lambda k: (labels.index(k[0]),) + order(k)):
        label, P, n = key
        rs = groups[key]
        tr = sum(1 for r in rs if r.get("truncated"))
        notes = []
        if n == 0:
            notes.append("plain, idempotence off (before+after)")
            name = "plain"
        elif n < 0:
            notes.append("plain + flush() every N, idempotence off; p50/p99 = flush()")
            name = f"{-n} flush"
        else:
            notes.append(f"{agg([r['txns'] for r in rs], 0)} txns")
            name = str(n)
        if tr:
            notes.append(f"{tr}/{len(rs)} truncated")
        out.append([label, str(P), name, str(len(rs)),
                    agg([r["records_per_s"] for r in rs], 0),
                    agg([r["mb_per_s"] for r in rs], 1),
                    agg([r.get("p50_ms") for r in rs], 2) if n else "-",
                    agg([r.get("p99_ms") for r in rs], 2) if n else "-",
                    agg([r.get("ratio_vs_plain") for r in rs], 2) if n else "1",
                    agg([r.get("client_cpu_pct") for r in rs], 0),
                    agg([r.get("broker_cpu_pct") for r in rs], 0),
                    agg([r["loadavg_start"][0] for r in rs if r.get("loadavg_start")], 1), "; ".join(notes)])
    print_table(hdr, out, args.markdown)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    tgt = r.add_mutually_exclusive_group(required=True)
    tgt.add_argument("--bootstrap", help="host:port of a running broker")
    tgt.add_argument("--start-kafka", action="store_true",
                     help="start reference Apache Kafka (tests/interop/conftest.py) for this run")
    tgt.add_argument("--mock", action="store_true",
                     help="librdkafka's in-process mock broker (acks instantly): client ceiling")
    r.add_argument("--label", required=True)
    r.add_argument("--broker-mode", default="", help="free text recorded in the JSON")
    r.add_argument("--broker-pid", type=int, help="sample this process's CPU")
    r.add_argument("--records", type=int, default=300000)
    r.add_argument("--size", type=int, default=1024)
    r.add_argument("--partitions", default="1,4", help="comma list, one produce topic each")
    r.add_argument("--consumers", default="1",
                   help="comma list: for each K, K consumers (own group, own process) each "
                        "read every produce topic whole")
    r.add_argument("--warmup", type=int, default=50000,
                   help="records produced+consumed untimed first (0: none)")
    r.add_argument("--phases", default="produce,latency,consume")
    r.add_argument("--latency-seconds", type=float, default=10.0)
    r.add_argument("--latency-rates", default="half,50mb",
                   help="comma list of paced rates: 'half' (of the measured 1-partition "
                        "produce max), 'NNmb' (NN MB/s of values) or records/s")
    r.add_argument("--linger-ms", type=int, default=5)
    r.add_argument("--batch-size", type=int, default=1000000)
    r.add_argument("--idempotence", action="store_true", help="enable.idempotence=true")
    r.add_argument("--txn-sizes", default="1000,100,10",
                   help="txn phase: records per transaction, comma list")
    r.add_argument("--txn-records", type=int, default=100000,
                   help="txn phase: records per transaction size (and per baseline)")
    r.add_argument("--txn-max-txns", type=int, default=2000,
                   help="txn phase: at most this many transactions per size")
    r.add_argument("--txn-seconds", type=float, default=10.0,
                   help="txn phase: stop a size after this long (row marked truncated)")
    r.add_argument("--share-records", type=int, default=200000,
                   help="share phase: records per partition count")
    r.add_argument("--share-consumers", default="1,2,4",
                   help="share phase: share consumer counts, comma list")
    r.add_argument("--txn-producers", type=int, default=1,
                   help="txn phase: K producer processes at once (own transactional.id each; "
                        "the plain baselines use K producers too); records split among them")
    r.add_argument("--txn-client", choices=["python", "java"], default="python",
                   help="txn phase client: confluent-kafka (processes) or kafka-clients 4.x "
                        "(bench/java/TxnBench.java, threads in one JVM)")
    r.add_argument("--no-txn-flush-baseline", dest="txn_flush_baseline",
                   action="store_false",
                   help="txn phase: skip the plain producer that flush()es every N records")
    r.add_argument("--phase-timeout", type=float, default=55.0,
                   help="abort a phase that runs longer than this (s)")
    r.add_argument("--out", help="also append the JSON lines to this file")
    f = sub.add_parser("fsync-probe", help="write+fdatasync latency of the disk under DIR")
    f.add_argument("dir")
    f.add_argument("--size-kib", type=int, default=256)
    f.add_argument("--count", type=int, default=200)
    f.add_argument("--seconds", type=float, default=10.0)
    f.add_argument("--out")
    t = sub.add_parser("table", help="one row per JSON result")
    t.add_argument("file")
    t.add_argument("--markdown", action="store_true")
    sm = sub.add_parser("summary", help="median [min-max] over repeated runs")
    sm.add_argument("file")
    sm.add_argument("--markdown", action="store_true")
    ts = sub.add_parser("txn-summary", help="transactions table, median [min-max]")
    ts.add_argument("file")
    ts.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    if args.cmd == "run":
        cmd_run(args)
    elif args.cmd == "fsync-probe":
        cmd_fsync_probe(args)
    elif args.cmd == "summary":
        cmd_summary(args)
    elif args.cmd == "txn-summary":
        cmd_txn_summary(args)
    else:
        cmd_table(args)


if __name__ == "__main__":
    main()
