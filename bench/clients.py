#!/usr/bin/env python3
"""Three clients side by side: Shoal's (`shoal perf`), librdkafka's (confluent-kafka) and
krafka's, against one broker, interleaved. Driven by `bench/run.sh --clients` (which starts
and stops Shoal); usable on its own:

  clients.py run --bootstrap 127.0.0.1:9092 --label shoal-durable [--broker-pid PID] [--rep K]
  clients.py run --start-kafka --label kafka                 # reference Apache Kafka (KRaft)
  clients.py produce --bootstrap B --topic T [...]           # librdkafka's produce, one JSON line
  clients.py share-consume --bootstrap B --topic T --group G --records N   # its share consumer
  clients.py summary results.jsonl [--markdown]              # median [min-max] per broker/client

The per-client programs print the same JSON line (fields: client, test, partitions, records,
record_bytes, acks, linger_ms, batch_size, buffer_memory, idempotence, compression,
target_rate, achieved_rate, seconds, send_seconds, records_per_s, mb_per_s, p50_ms, p99_ms,
max_ms, mean_ms, errors, client_cpu_pct, broker_cpu_pct; share_consume: records,
duplicates, seconds, records_per_s, commit_ms):

  shoal       target/release/shoal perf --bootstrap B produce|share-consume ...
              (crates/cli/src/perf_client.rs)
  librdkafka  this file's `produce` / `share-consume` (confluent-kafka 2.16.1)
  krafka      tests/interop/krafka/target/release/shoal-krafka-interop B bench-produce|
              bench-share-consume ... (tests/interop/krafka/src/bench.rs)
  shoal-py    this file's `produce` / `share-consume` with --client shoal-py: the Python
              package shoal-queues (crates/python, `import shoal`) in the same loops as
              librdkafka's (not among the defaults of `run`: --clients shoal-py,librdkafka)

`run` does, on fresh topics, each client in its own process (start-up, connection and
metadata outside the timed part), the order of the clients rotated by --rep and by step:
  warm-up     each client produces --warmup records to a 1-partition topic (discarded)
  produce     for each P in --partitions: each client N records of --size bytes, record i to
              partition i % P, unpaced; then each client's share consumer reads its topic
  latency     each client paced at --rate-mb MB/s for --latency-seconds on 1 partition;
              client_bound=true when its send loop did not reach 95 % of that rate
Producer settings are the same for all: acks=all, enable.idempotence=true (--idempotence),
compression none, linger.ms, batch.size, buffer memory (librdkafka:
queue.buffering.max.kbytes), keyless records. Latency = the client's send/produce call to
its delivery (future resolving / callback), per record. librdkafka's unpaced run reports
errors only (delivery.report.only.error, no per-record Python callback), so it has no
latency figures there; the Rust clients await every delivery.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from array import array
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
import kbench  # noqa: E402  (create_topic, start_kafka, cpu_ticks, percentile, print_table)

CLIENTS = ("shoal", "librdkafka", "krafka", "shoal-py")


def log(*a):
    print("[clients]", *a, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- librdkafka's programs
def ck_producer_conf(a):
    return {
        "bootstrap.servers": a.bootstrap,
        "client.id": "clients-librdkafka",
        "acks": "all",
        "linger.ms": a.linger_ms,
        "batch.size": a.batch_size,
        "batch.num.messages": 1000000,
        "compression.type": a.compression,
        "enable.idempotence": a.idempotence == "true",
        "queue.buffering.max.messages": 10000000,
        "queue.buffering.max.kbytes": max(1, a.buffer_memory // 1024),
        "message.timeout.ms": 120000,
        "log_level": 3,
    }


class Cpu:
    """CPU% of this process and of the broker over the timed part."""

    def __init__(self, broker_pid):
        self.pid = broker_pid
        self.me, self.b = kbench.cpu_ticks(os.getpid()), kbench.cpu_ticks(broker_pid)

    def finish(self, wall):
        def pct(a, b):
            if a is None or b is None or wall <= 0:
                return None
            return round(100.0 * (b - a) / kbench.CLK_TCK / wall, 1)
        return pct(self.me, kbench.cpu_ticks(os.getpid())), pct(self.b, kbench.cpu_ticks(self.pid))


def cmd_produce(a):
    if a.client == "shoal-py":
        return cmd_produce_py(a)
    from confluent_kafka import Producer

    n, size, rate = a.records, a.record_bytes, a.rate
    bufs = kbench.payloads(size)
    nb = len(bufs)
    errors = []
    conf = ck_producer_conf(a)
    if rate is None:
        conf["delivery.report.only.error"] = True  # no per-record Python callback
        conf["on_delivery"] = lambda err, msg: errors.append(err)
    p = Producer(conf)
    md = p.list_topics(topic=a.topic, timeout=10)  # connect + metadata outside the timing
    P = len(md.topics[a.topic].partitions)
    if P == 0:
        raise SystemExit(f"topic {a.topic} has no partitions")
    sent = array("d", bytes(8 * n)) if rate else None
    lat = array("d", bytes(8 * n)) if rate else None

    def on_delivery(i, err, msg):
        if err is not None:
            errors.append(err)
        else:
            lat[i] = time.perf_counter() - sent[i]

    produce, poll, now = p.produce, p.poll, time.perf_counter
    cpu = Cpu(a.broker_pid)
    t0 = now()
    if rate is None:
        for i in range(n):
            while True:
                try:
                    produce(a.topic, bufs[i % nb], partition=i % P)
                    break
                except BufferError:
                    poll(0.001)
            if i % 10000 == 0:
                poll(0)
    else:
        # paced in bursts, as kbench.py's latency phase: every wake-up sends the records
        # whose due time has passed, then polls (delivery callbacks) until the next is due
        i = 0
        while i < n:
            due = min(n, int((now() - t0) * rate) + 1)
            while i < due:
                sent[i] = now()
                try:
                    produce(a.topic, bufs[i % nb], partition=i % P,
                            on_delivery=partial(on_delivery, i))
                except BufferError:
                    poll(0.001)
                    continue
                i += 1
            poll(0)
            wait = t0 + i / rate - now()
            if wait > 0:
                poll(max(wait, 0.001))
    send_secs = now() - t0
    left = p.flush(120)
    secs = now() - t0
    client_cpu, broker_cpu = cpu.finish(secs)
    r = {"client": "librdkafka", "test": "produce_latency" if rate else "produce",
         "topic": a.topic, "partitions": P, "records": n, "record_bytes": size, "acks": "all",
         "linger_ms": a.linger_ms, "batch_size": a.batch_size, "buffer_memory": a.buffer_memory,
         "idempotence": a.idempotence == "true", "compression": a.compression,
         "target_rate": round(rate) if rate else None, "achieved_rate": round(n / send_secs),
         "seconds": round(secs, 3), "send_seconds": round(send_secs, 3),
         "records_per_s": round((n - left - len(errors)) / secs),
         "mb_per_s": round((n - left - len(errors)) * size / secs / 1e6, 1),
         "p50_ms": None, "p99_ms": None, "max_ms": None, "mean_ms": None,
         "errors": left + len(errors), "first_error": str(errors[0]) if errors else None,
         "client_cpu_pct": client_cpu, "broker_cpu_pct": broker_cpu}
    if rate:
        vals = sorted(lat)
        ms = lambda v: round(v * 1000, 3)  # noqa: E731
        r.update(p50_ms=ms(kbench.percentile(vals, 0.5)), p99_ms=ms(kbench.percentile(vals, 0.99)),
                 max_ms=ms(vals[-1]), mean_ms=ms(sum(vals) / len(vals)))
    print(json.dumps(r), flush=True)


def cmd_share_consume(a):
    if a.client == "shoal-py":
        return cmd_share_consume_py(a)
    from confluent_kafka import ShareConsumer

    kbench_group_earliest(a.bootstrap, a.group)
    c = ShareConsumer({"bootstrap.servers": a.bootstrap, "group.id": a.group, "log_level": 3,
                       "client.id": "clients-librdkafka", "share.acknowledgement.mode": "explicit"})
    c.subscribe([a.topic])
    started = last = time.perf_counter()
    t_first = cpu = None
    got = nbytes = 0
    while got < a.records:
        batch = c.poll(0.5)
        if not batch.count():
            if time.perf_counter() - last > 30:
                raise SystemExit(f"no record for 30 s after {got} of {a.records}")
            continue
        if t_first is None:
            t_first, cpu = time.perf_counter(), Cpu(a.broker_pid)
        for m in batch.records():
            if m.error():
                raise SystemExit(f"share consume error: {m.error()}")
            c.acknowledge(m)  # sent with the next poll's ShareFetch
            nbytes += len(m.value())
            got += 1
        last = time.perf_counter()
    secs = last - t_first
    client_cpu, broker_cpu = cpu.finish(secs)
    tc = time.perf_counter()
    res = c.commit_sync()
    commit_ms = (time.perf_counter() - tc) * 1000
    c.close()
    errors = sum(1 for v in (res or {}).values() if v is not None)
    print(json.dumps({
        "client": "librdkafka", "test": "share_consume", "topic": a.topic, "ack_mode": "explicit",
        "records": got, "duplicates": None, "seconds": round(secs, 3),
        "seconds_incl_join": round(last - started, 3), "records_per_s": round(got / secs),
        "mb_per_s": round(nbytes / secs / 1e6, 1), "commit_ms": round(commit_ms, 3),
        "errors": errors, "client_cpu_pct": client_cpu, "broker_cpu_pct": broker_cpu}), flush=True)


# ---------------------------------------------------------------- shoal-queues' programs
def partitions_of(bootstrap, topic):
    """The topic's partition count (librdkafka's metadata, outside any timing)."""
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3}).list_topics(
        topic=topic, timeout=10)
    return len(md.topics[topic].partitions)


def cmd_produce_py(a):
    """librdkafka's `produce` loop with shoal.Producer (same settings; it blocks for buffer
    room instead of raising BufferError). Unpaced: no delivery callback, so failures show
    as records missing from the share-consume phase rather than as errors here."""
    import shoal

    n, size, rate = a.records, a.record_bytes, a.rate
    bufs = kbench.payloads(size)
    nb = len(bufs)
    P = partitions_of(a.bootstrap, a.topic)
    errors = []
    p = shoal.Producer({
        "bootstrap.servers": a.bootstrap, "client.id": "clients-shoal-py", "acks": "all",
        "linger.ms": a.linger_ms, "batch.size": a.batch_size,
        "buffer.memory": a.buffer_memory, "enable.idempotence": a.idempotence == "true",
        "compression.type": a.compression})
    sent = array("d", bytes(8 * n)) if rate else None
    lat = array("d", bytes(8 * n)) if rate else None

    def on_delivery(i, err, msg):
        if err is not None:
            errors.append(err)
        else:
            lat[i] = time.perf_counter() - sent[i]

    produce, poll, now = p.produce, p.poll, time.perf_counter
    cpu = Cpu(a.broker_pid)
    t0 = now()
    if rate is None:
        for i in range(n):
            produce(a.topic, bufs[i % nb], partition=i % P)
    else:
        i = 0
        while i < n:
            due = min(n, int((now() - t0) * rate) + 1)
            while i < due:
                sent[i] = now()
                produce(a.topic, bufs[i % nb], partition=i % P,
                        on_delivery=partial(on_delivery, i))
                i += 1
            poll(0)
            wait = t0 + i / rate - now()
            if wait > 0:
                poll(max(wait, 0.001))
    send_secs = now() - t0
    left = p.flush(120)
    secs = now() - t0
    client_cpu, broker_cpu = cpu.finish(secs)
    p.close()
    r = {"client": "shoal-py", "test": "produce_latency" if rate else "produce",
         "topic": a.topic, "partitions": P, "records": n, "record_bytes": size, "acks": "all",
         "linger_ms": a.linger_ms, "batch_size": a.batch_size, "buffer_memory": a.buffer_memory,
         "idempotence": a.idempotence == "true", "compression": a.compression,
         "target_rate": round(rate) if rate else None, "achieved_rate": round(n / send_secs),
         "seconds": round(secs, 3), "send_seconds": round(send_secs, 3),
         "records_per_s": round((n - left - len(errors)) / secs),
         "mb_per_s": round((n - left - len(errors)) * size / secs / 1e6, 1),
         "p50_ms": None, "p99_ms": None, "max_ms": None, "mean_ms": None,
         "errors": left + len(errors), "first_error": str(errors[0]) if errors else None,
         "client_cpu_pct": client_cpu, "broker_cpu_pct": broker_cpu}
    if rate:
        vals = sorted(lat)
        ms = lambda v: round(v * 1000, 3)  # noqa: E731
        r.update(p50_ms=ms(kbench.percentile(vals, 0.5)), p99_ms=ms(kbench.percentile(vals, 0.99)),
                 max_ms=ms(vals[-1]), mean_ms=ms(sum(vals) / len(vals)))
    print(json.dumps(r), flush=True)


def cmd_share_consume_py(a):
    """librdkafka's `share-consume` loop with shoal.ShareConsumer (explicit mode, each
    record ACCEPTed, sent with the next poll; commit_sync at the end)."""
    import shoal

    kbench_group_earliest(a.bootstrap, a.group)
    c = shoal.ShareConsumer({"bootstrap.servers": a.bootstrap, "group.id": a.group,
                             "client.id": "clients-shoal-py",
                             "share.acknowledgement.mode": "explicit"})
    c.subscribe([a.topic])
    started = last = time.perf_counter()
    t_first = cpu = None
    got = nbytes = 0
    accept = shoal.AcknowledgeType.ACCEPT
    while got < a.records:
        batch = c.poll(0.5)
        if not batch:
            if time.perf_counter() - last > 30:
                raise SystemExit(f"no record for 30 s after {got} of {a.records}")
            continue
        if t_first is None:
            t_first, cpu = time.perf_counter(), Cpu(a.broker_pid)
        for m in batch:
            c.acknowledge(m, accept)
            nbytes += len(m.value())
            got += 1
        last = time.perf_counter()
    secs = last - t_first
    client_cpu, broker_cpu = cpu.finish(secs)
    tc = time.perf_counter()
    errors = 0
    try:
        c.commit_sync()
    except shoal.KafkaException:
        errors = 1
    commit_ms = (time.perf_counter() - tc) * 1000
    c.close()
    print(json.dumps({
        "client": "shoal-py", "test": "share_consume", "topic": a.topic, "ack_mode": "explicit",
        "records": got, "duplicates": None, "seconds": round(secs, 3),
        "seconds_incl_join": round(last - started, 3), "records_per_s": round(got / secs),
        "mb_per_s": round(nbytes / secs / 1e6, 1), "commit_ms": round(commit_ms, 3),
        "errors": errors, "client_cpu_pct": client_cpu, "broker_cpu_pct": broker_cpu}),
        flush=True)


def kbench_group_earliest(bootstrap, group):
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,
                                       ConfigResource, ResourceType)

    adm = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest",
                    incremental_operation=AlterConfigOpType.SET)])
    for fut in adm.incremental_alter_configs([res]).values():
        fut.result(timeout=30)


# ---------------------------------------------------------------- the driver
def client_cmd(a, client, kind, bootstrap, topic, **kw):
    """The command line of one client program: kind is produce or share-consume."""
    s = a.settings
    if kind == "produce":
        opts = {"topic": topic, "records": kw["records"], "record-bytes": a.size,
                "linger-ms": s["linger_ms"], "batch-size": s["batch_size"],
                "buffer-memory": s["buffer_memory"], "idempotence": a.idempotence,
                "compression": "none"}
        if kw.get("rate"):
            opts["rate"] = kw["rate"]
    else:
        opts = {"topic": topic, "group": kw["group"], "records": kw["records"]}
    if a.broker_pid:
        opts["broker-pid"] = a.broker_pid
    flat = [x for k, v in opts.items() for x in (f"--{k}", str(v))]
    if client == "shoal":
        return [a.shoal_bin, "perf", "--bootstrap", bootstrap, kind] + flat
    if client == "krafka":
        return [a.krafka_bin, bootstrap, f"bench-{kind}", "--deadline", str(int(a.client_timeout))] + flat
    if client == "shoal-py":
        flat += ["--client", "shoal-py"]
    return [sys.executable, str(Path(__file__).resolve()), kind, "--bootstrap", bootstrap] + flat


def run_client(a, cmd):
    env = dict(os.environ, SHOAL_LOG=os.environ.get("SHOAL_LOG", "warn"))
    t = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.client_timeout + 30, env=env)
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if p.returncode != 0 or not lines:
        raise RuntimeError(f"{cmd[0]} failed (exit {p.returncode}) after "
                           f"{time.monotonic() - t:.1f}s:\n{p.stderr[-3000:]}\n{p.stdout[-1000:]}")
    return json.loads(lines[-1])


def rotated(clients, k):
    k %= len(clients)
    return clients[k:] + clients[:k]


def cmd_run(a):
    kafka = tmp = None
    try:
        if a.start_kafka:
            tmp = tempfile.mkdtemp(prefix="clients-kafka-")
            kafka = kbench.start_kafka(tmp)
            bootstrap, a.broker_pid = kafka.bootstrap, kafka.proc.pid
        else:
            bootstrap = a.bootstrap
        drive(a, bootstrap)
    finally:
        if kafka is not None:
            kafka.stop()
            kafka.kill9()
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def drive(a, bootstrap):
    clients = [c for c in a.clients.split(",") if c]
    for c in clients:
        if c not in CLIENTS:
            raise SystemExit(f"unknown client {c} (one of {', '.join(CLIENTS)})")
    a.settings = {"linger_ms": a.linger_ms, "batch_size": a.batch_size,
                  "buffer_memory": a.buffer_memory}
    run_id = uuid.uuid4().hex[:6]
    common = {"label": a.label, "rep": a.rep, "run_id": run_id, "broker_mode": a.broker_mode,
              "shoal_sha256": os.environ.get("BENCH_SHOAL_SHA")}
    step = a.rep

    def emit(r, extra=None):
        r.update(common, time=time.strftime("%Y-%m-%dT%H:%M:%S%z"), loadavg=kbench.loadavg())
        if extra:
            r.update(extra)
        kbench.emit(r, a.out)

    if a.warmup:
        for c in rotated(clients, step):
            topic = f"cb-{run_id}-warm-{c}"
            kbench.create_topic(bootstrap, topic, 1)
            log(f"{a.label}: warm-up {c} ({a.warmup} records, discarded)")
            run_client(a, client_cmd(a, c, "produce", bootstrap, topic, records=a.warmup))
    for P in [int(x) for x in a.partitions.split(",") if x]:
        step += 1
        order = rotated(clients, step)
        for c in order:
            topic = f"cb-{run_id}-{c}-p{P}"
            kbench.create_topic(bootstrap, topic, P)
            log(f"{a.label}: {c} produce {a.records} x {a.size} B -> {P} partition(s)")
            r = run_client(a, client_cmd(a, c, "produce", bootstrap, topic, records=a.records))
            emit(r)
        if a.no_share:
            continue
        for c in order:
            topic = f"cb-{run_id}-{c}-p{P}"
            group = f"cb-{run_id}-{c}-p{P}-share"
            log(f"{a.label}: {c} share-consume {a.records} from {topic}")
            r = run_client(a, client_cmd(a, c, "share-consume", bootstrap, topic,
                                         group=group, records=a.records))
            emit(r, {"partitions": P, "record_bytes": a.size})
    rate = a.rate_mb * 1e6 / a.size
    n = int(rate * a.latency_seconds)
    step += 1
    for c in rotated(clients, step):
        topic = f"cb-{run_id}-{c}-lat"
        kbench.create_topic(bootstrap, topic, 1)
        log(f"{a.label}: {c} paced at {a.rate_mb} MB/s ({rate:.0f} rec/s) for {a.latency_seconds}s")
        r = run_client(a, client_cmd(a, c, "produce", bootstrap, topic, records=n, rate=rate))
        emit(r, {"rate_mb": a.rate_mb,
                 "client_bound": r["achieved_rate"] < 0.95 * rate})


def agg(vals, nd):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "-"
    m = statistics.median(vals)
    if len(vals) == 1:
        return f"{m:.{nd}f}"
    return f"{m:.{nd}f} [{min(vals):.{nd}f}–{max(vals):.{nd}f}]"


def cmd_summary(a):
    rows = [json.loads(l) for l in open(a.file) if l.strip().startswith("{")]
    rows = [r for r in rows if "client" in r]
    groups = {}
    for r in rows:
        test = r["test"]
        if test == "produce_latency":
            test = f"latency @{r.get('rate_mb')} MB/s"
        elif test == "share_consume":
            test = "share consume"
        groups.setdefault((r["label"], test, str(r.get("partitions", "-")), r["client"]), []).append(r)
    order = {c: i for i, c in enumerate(CLIENTS)}
    keys = sorted(groups, key=lambda k: (k[0], k[1] != "produce", k[1], k[2], order.get(k[3], 9)))
    hdr = ["broker", "test", "P", "client", "runs", "MB/s", "rec/s", "p50 ms", "p99 ms",
           "max ms", "client CPU%", "broker CPU%", "notes"]
    out = []
    for k in keys:
        rs = groups[k]
        notes = []
        cb = sum(1 for r in rs if r.get("client_bound"))
        if cb:
            notes.append(f"{cb}/{len(rs)} CLIENT-BOUND (<95% of the rate)")
        errs = sum(r.get("errors") or 0 for r in rs)
        if errs:
            notes.append(f"{errs} errors")
        dups = sum(r.get("duplicates") or 0 for r in rs)
        if dups:
            notes.append(f"{dups} redelivered")
        if k[1].startswith("latency"):
            notes.append("achieved " + agg([r.get("achieved_rate") for r in rs], 0) + " rec/s")
        out.append([k[0], k[1], k[2], k[3], str(len(rs)), agg([r.get("mb_per_s") for r in rs], 1),
                    agg([r.get("records_per_s") for r in rs], 0),
                    agg([r.get("p50_ms") for r in rs], 2), agg([r.get("p99_ms") for r in rs], 2),
                    agg([r.get("max_ms") for r in rs], 1),
                    agg([r.get("client_cpu_pct") for r in rs], 0),
                    agg([r.get("broker_cpu_pct") for r in rs], 0), "; ".join(notes)])
    kbench.print_table(hdr, out, a.markdown)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    def producer_opts(p):
        p.add_argument("--linger-ms", type=int, default=5)
        p.add_argument("--batch-size", type=int, default=1048576)
        p.add_argument("--buffer-memory", type=int, default=33554432)

    pr = sub.add_parser("produce", help="librdkafka's produce (one JSON line)")
    pr.add_argument("--bootstrap", required=True)
    pr.add_argument("--topic", required=True)
    pr.add_argument("--records", type=int, default=200000)
    pr.add_argument("--record-bytes", type=int, default=1024)
    pr.add_argument("--idempotence", choices=["true", "false"], default="true")
    pr.add_argument("--compression", default="none")
    pr.add_argument("--rate", type=float, help="records/s (default: unpaced)")
    pr.add_argument("--broker-pid", type=int)
    pr.add_argument("--client", choices=["librdkafka", "shoal-py"], default="librdkafka")
    producer_opts(pr)
    sc = sub.add_parser("share-consume", help="librdkafka's share consumer (one JSON line)")
    sc.add_argument("--bootstrap", required=True)
    sc.add_argument("--topic", required=True)
    sc.add_argument("--group", required=True)
    sc.add_argument("--records", type=int, required=True)
    sc.add_argument("--broker-pid", type=int)
    sc.add_argument("--client", choices=["librdkafka", "shoal-py"], default="librdkafka")
    r = sub.add_parser("run", help="the three clients, interleaved, against one broker")
    tgt = r.add_mutually_exclusive_group(required=True)
    tgt.add_argument("--bootstrap")
    tgt.add_argument("--start-kafka", action="store_true")
    r.add_argument("--label", required=True)
    r.add_argument("--broker-mode", default="")
    r.add_argument("--broker-pid", type=int)
    r.add_argument("--rep", type=int, default=0, help="repetition number (rotates the order)")
    r.add_argument("--clients", default="shoal,librdkafka,krafka")
    r.add_argument("--records", type=int, default=200000)
    r.add_argument("--size", type=int, default=1024)
    r.add_argument("--partitions", default="1,4")
    r.add_argument("--warmup", type=int, default=20000)
    r.add_argument("--rate-mb", type=float, default=20.0)
    r.add_argument("--latency-seconds", type=float, default=5.0)
    r.add_argument("--no-share", action="store_true")
    r.add_argument("--client-timeout", type=float, default=180.0)
    r.add_argument("--shoal-bin", default=os.environ.get("SHOAL_BIN", str(REPO / "target/release/shoal")))
    r.add_argument("--krafka-bin", default=os.environ.get(
        "KRAFKA_BIN", str(REPO / "tests/interop/krafka/target/release/shoal-krafka-interop")))
    r.add_argument("--out")
    r.add_argument("--idempotence", choices=["true", "false"], default="true",
                   help="enable.idempotence of every client's producer (default true)")
    producer_opts(r)
    sm = sub.add_parser("summary", help="median [min-max] per broker, test, P and client")
    sm.add_argument("file")
    sm.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    {"produce": cmd_produce, "share-consume": cmd_share_consume, "run": cmd_run,
     "summary": cmd_summary}[a.cmd](a)


if __name__ == "__main__":
    main()
