#!/usr/bin/env python3
"""Scale on one node (issue 14): Shoal beside Apache Kafka 4.4 in the same run.

  scale.py partitions [--targets shoal,kafka] [--sizes 10,1000,10000] [--records-per-partition 20]
  scale.py connections [--targets shoal,kafka] [--sizes 10,100,1000] [--rate 2000] [--seconds 5]
                      [--active A] [--burst-kib K] [--ab R]

  scale.py recovery [--targets shoal,kafka] [--gib 10] [--partitions 100] [--settle 65]
                    [--groups 200] [--out FILE.jsonl]

recovery: per target, a fresh broker (its defaults) gets a topic of --partitions partitions
and --gib GiB of 1 KiB records (`shoal perf produce`, acks=all, spread over the
partitions), --groups consumer groups each committing an offset on every partition (records
in __consumer_offsets), then --settle seconds of idleness (Kafka and Shoal both write their
recovery-point checkpoints every 60 s by default), then kill -9. The broker is started again
on the same directory and timed from spawn to:
  port       the listener accepts TCP;
  metadata   Metadata lists every partition of the topic with a leader;
  produce    one record from an idempotent producer (acks=all) accepted by every
             partition (for Shoal this includes loading each partition's producer state,
             which it does on first use);
  offsets    the committed offsets of one group read back.
Then the high watermarks are summed: every produced record must be there (nothing lost).
Reports the data size, broker CPU seconds and RSS at `produce`.

partitions: per target and size P, a fresh broker; P partitions made at once, 10 topics per
CreateTopics (Kafka refuses more; 100 partitions per topic, so 10 000 = 100 topics; fewer
than 100 = one topic), timed
until Metadata shows them all led; broker RSS and open file descriptors idle, per partition
over the empty broker; one producer writing --records-per-partition 1 KiB records to every
partition (round robin) and one consumer assigned every partition reading them back, in
records/s; with --idle S, S seconds of idleness and the fds counted again (Shoal closes
segment files unused for one to two minutes); a clean restart (SIGTERM, start) timed to Metadata with every partition led, and
RSS and fds after it; then every topic deleted (10 per DeleteTopics), timed until Metadata
lists none.

connections: per target and size N, a fresh broker; N idle connections, each having done one
ApiVersions exchange; broker RSS and fds, per connection over the broker with none; then one
idempotent producer (acks=all, linger.ms=0) paced at --rate 1 KiB records/s for --seconds on
a 1-partition topic: produce latency p50/p99 (produce() to delivery) with the N idle
connections open. With --active A: the latency run again while A producers (each
--active-rate records/s) and A consumers (a group each, all 8 partitions) work on another
topic beside the idle connections. With --burst-kib K: then every idle connection sends one
Metadata request of about K KiB (unknown topics, no auto-creation; about as large a response)
and goes quiet; RSS --burst-quiet seconds later, per connection. With --ab R instead: R paired repetitions on one broker,
each timing the paced producer without and with the N idle connections (opened --settle
seconds before, closed after, the order alternating), so the comparison does not rest on one run; with
--active as well, the active clients work through every repetition on both sides.

Brokers come from tests/interop/conftest.py's Broker (Shoal: SHOAL_BIN or
target/release/shoal; Kafka: the jars of tests/interop/kafka_ref/fetch.sh). One JSON line per
target on stdout (and --out); progress on stderr.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from kbench import conftest_module

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(*a):
    print("[scale]", *a, file=sys.stderr, flush=True)


def shoal_bin():
    return os.environ.get("SHOAL_BIN") or str(REPO / "target" / "release" / "shoal")


def cpu_seconds(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except OSError:
        return None


def rss_mib(pid):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None


def du_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def tcp_ok(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def create_topic(bootstrap, name, partitions):
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if leaders_ok(admin, name, partitions):
            return
        time.sleep(0.2)
    raise RuntimeError(f"{name}: partitions without leaders after 60 s")


def leaders_ok(admin, topic, partitions):
    try:
        md = admin.list_topics(topic=topic, timeout=2)
    except Exception:  # noqa: BLE001 - not ready yet
        return False
    t = md.topics.get(topic)
    return bool(t and t.error is None and len(t.partitions) == partitions
                and all(p.leader >= 0 and p.error is None for p in t.partitions.values()))


def commit_groups(bootstrap, topic, partitions, groups, run_id):
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    for g in range(groups):
        # Kafka creates __consumer_offsets on first use: the first commits can fail per
        # partition (not raised), so retry until every partition is accepted.
        for attempt in range(100):
            tps = [TopicPartition(topic, p, 1 + g) for p in range(partitions)]
            fut = admin.alter_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(f"scale-{run_id}-g{g}", tps)])
            errors = [tp.error for f in fut.values() for tp in f.result(30).topic_partitions
                      if tp.error]
            if not errors:
                break
            time.sleep(0.2)
        else:
            raise RuntimeError(f"offset commit of group {g} kept failing: {errors[:3]}")


def read_offsets(bootstrap, topic, partitions, group):
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    fut = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)])
    res = list(fut.values())[0].result(30)
    return {tp.partition: tp.offset for tp in res.topic_partitions}


def high_watermarks(bootstrap, topic, partitions):
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"scale-hw-{uuid.uuid4().hex[:6]}",
                  "log_level": 3})
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in range(partitions)]
    finally:
        c.close()


def produce_each(bootstrap, topic, partitions, deadline):
    """One acks=all record to every partition; returns when all are acknowledged."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                  "enable.idempotence": True, "message.timeout.ms": 120000, "log_level": 3})
    errors = []
    for i in range(partitions):
        p.produce(topic, b"probe", partition=i,
                  on_delivery=lambda err, msg: err and errors.append(err))
    left = p.flush(max(1.0, deadline - time.monotonic()))
    if left or errors:
        raise RuntimeError(f"probe produce: {left} unacknowledged, errors {errors[:3]}")


def fd_count(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def start_broker(conftest, target, name, config=None):
    conftest.TARGET = target
    if target == "shoal":
        os.environ["SHOAL_BIN"] = shoal_bin()
    tmp = Path(tempfile.mkdtemp(prefix=f"scale-{name}-{target}-",
                                dir=os.environ.get("BENCH_TMP", "/tmp")))
    broker = conftest.Broker(tmp, config)
    broker.start()
    return broker, tmp


def stop_broker(broker, tmp):
    try:
        broker.kill9()
    finally:
        subprocess.run(["rm", "-rf", str(tmp)], check=False)


def emit(r, out):
    r["time"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    print(json.dumps(r), flush=True)
    if out:
        with open(out, "a") as f:
            f.write(json.dumps(r) + "\n")


def all_led(admin, layout):
    """Whether Metadata shows every topic of `layout` ({topic: partitions}) fully led."""
    try:
        md = admin.list_topics(timeout=10)
    except Exception:  # noqa: BLE001 - not ready yet
        return False
    for name, n in layout.items():
        t = md.topics.get(name)
        if not t or t.error is not None or len(t.partitions) != n or \
                any(p.leader < 0 or p.error is not None for p in t.partitions.values()):
            return False
    return True


def run_partitions(conftest, target, size, args):
    from confluent_kafka import Consumer, Producer, TopicPartition, OFFSET_BEGINNING
    from confluent_kafka.admin import AdminClient, NewTopic
    per_topic = min(100, size)
    layout = {f"p{size}-t{i:03d}": per_topic for i in range(size // per_topic)}
    broker, tmp = start_broker(conftest, target, "partitions")
    try:
        pid = broker.proc.pid
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 3})
        time.sleep(1)
        rss0, fds0 = rss_mib(pid), fd_count(pid)
        t = time.monotonic()
        # At most 10 topics (1 000 partitions) per CreateTopics: Kafka refuses a larger
        # batch (POLICY_VIOLATION, "excessively large batch operation").
        names = list(layout)
        for i in range(0, len(names), 10):
            futs = admin.create_topics([NewTopic(n, layout[n], 1) for n in names[i:i + 10]],
                                       operation_timeout=300, request_timeout=300)
            for f in futs.values():
                f.result(600)
        while not all_led(admin, layout):
            if time.monotonic() - t > 900:
                raise RuntimeError(f"{target}: {size} partitions not all led after 900 s")
            time.sleep(0.2)
        create_s = time.monotonic() - t
        time.sleep(2)
        rss1, fds1 = rss_mib(pid), fd_count(pid)

        n = size * args.records_per_partition
        value = b"v" * 1024
        prod = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5,
                         "batch.size": 1000000, "queue.buffering.max.messages": 1000000,
                         "log_level": 3})
        tps = [(name, p) for name, k in layout.items() for p in range(k)]
        t = time.monotonic()
        for i in range(n):
            name, p = tps[i % len(tps)]
            while True:
                try:
                    prod.produce(name, value, partition=p)
                    break
                except BufferError:
                    prod.poll(0.01)
        if prod.flush(300):
            raise RuntimeError(f"{target}: produce spread did not finish")
        produce_rps = n / (time.monotonic() - t)

        cons = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "scale-spread",
                         "enable.auto.commit": False, "fetch.queue.backoff.ms": 0,
                         "log_level": 3})
        t = time.monotonic()
        cons.assign([TopicPartition(name, p, OFFSET_BEGINNING) for name, p in tps])
        got = 0
        while got < n:
            if time.monotonic() - t > 600:
                raise RuntimeError(f"{target}: consumed {got}/{n}")
            got += sum(1 for m in cons.consume(10000, 1.0) if not m.error())
        consume_rps = n / (time.monotonic() - t)
        cons.close()
        rss2, fds2 = rss_mib(pid), fd_count(pid)
        fds_idle_again = None
        if args.idle > 0:
            log(f"{target}: idle {args.idle}s after the I/O")
            time.sleep(args.idle)
            fds_idle_again = fd_count(pid)

        broker.stop()
        t = time.monotonic()
        broker.start()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 3})
        while not all_led(admin, layout):
            if time.monotonic() - t > 900:
                raise RuntimeError(f"{target}: not all led after restart")
            time.sleep(0.05)
        restart_s = time.monotonic() - t
        pid = broker.proc.pid
        time.sleep(2)
        rss3, fds3 = rss_mib(pid), fd_count(pid)

        t = time.monotonic()
        for i in range(0, len(names), 10):
            for f in admin.delete_topics(names[i:i + 10], operation_timeout=300,
                                         request_timeout=300).values():
                f.result(600)
        while True:
            md = admin.list_topics(timeout=10)
            if not any(name in md.topics for name in layout):
                break
            if time.monotonic() - t > 900:
                raise RuntimeError(f"{target}: topics still listed after delete")
            time.sleep(0.1)
        delete_s = time.monotonic() - t

        def per(a, b):
            return None if a is None or b is None else round((b - a) / size, 4)
        emit({"test": "partitions", "target": target, "partitions": size,
              "topics": len(layout), "create_s": round(create_s, 2),
              "rss_mib_empty": rss0, "rss_mib_idle": rss1, "rss_kib_per_partition":
              None if per(rss0, rss1) is None else round(per(rss0, rss1) * 1024, 1),
              "fds_empty": fds0, "fds_idle": fds1, "fds_per_partition": per(fds0, fds1),
              "produce_records": n, "produce_rps": round(produce_rps),
              "consume_rps": round(consume_rps), "rss_mib_after_io": rss2,
              "fds_after_io": fds2, "idle_s": args.idle, "fds_after_idle": fds_idle_again,
              "restart_s": round(restart_s, 2),
              "rss_mib_after_restart": rss3, "fds_after_restart": fds3,
              "delete_s": round(delete_s, 2)}, args.out)
    finally:
        stop_broker(broker, tmp)


def read_response(sock, what):
    """Reads one response frame whole and discards it; returns its size."""
    import struct
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            raise RuntimeError(f"connection closed before the {what} response")
        head += chunk
    size = left = struct.unpack(">i", head)[0]
    while left > 0:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise RuntimeError(f"connection closed inside the {what} response")
        left -= len(chunk)
    return size


def api_versions_v0(sock):
    import struct
    sock.sendall(struct.pack(">ihhih", 10, 18, 0, 1, -1))
    read_response(sock, "ApiVersions")


def metadata_burst(sock, kib):
    """One Metadata v4 request of about `kib` KiB (unknown topic names of 200 characters,
    no auto-creation) and its response read whole: a large request and a large response,
    to see what a connection keeps afterwards."""
    import struct
    name = b"m" * 190
    count = max(1, kib * 1024 // (2 + len(name) + 10))
    body = b"".join(struct.pack(">h", len(name) + 10) + name + b"%010d" % i
                    for i in range(count))
    req = struct.pack(">hhih", 3, 4, 2, -1) + struct.pack(">i", count) + body + b"\x00"
    sock.sendall(struct.pack(">i", len(req)) + req)
    return read_response(sock, "Metadata")


def latency_run(bootstrap, topic, rate, seconds):
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                  "enable.idempotence": True, "log_level": 3})
    lat = []
    value = b"l" * 1024

    def done(t0):
        return lambda err, msg: err is None and lat.append(time.perf_counter() - t0)
    p.produce(topic, value)
    p.flush(30)
    start = time.perf_counter()
    i = 0
    while True:
        now = time.perf_counter()
        if now - start >= seconds:
            break
        due = start + i / rate
        if now < due:
            p.poll(min(0.001, due - now))
            continue
        p.produce(topic, value, on_delivery=done(time.perf_counter()))
        p.poll(0)
        i += 1
    p.flush(30)
    lat.sort()

    def q(f):
        return round(lat[min(len(lat) - 1, int(f * len(lat)))] * 1000, 2) if lat else None
    return {"sent": i, "acked": len(lat), "p50_ms": q(0.50), "p99_ms": q(0.99),
            "max_ms": round(lat[-1] * 1000, 2) if lat else None}


def _active_clients(bootstrap, topic, partitions, clients, rate_each, ready, stop, q):
    """`clients` producers and `clients` consumers (a client handle each, one process):
    every producer writes `rate_each` 1 KiB records/s round robin, every consumer (a group
    of its own) reads the topic from its end. Reports records written and read."""
    from confluent_kafka import Consumer, Producer, TopicPartition, OFFSET_END
    try:
        value = b"a" * 1024
        prods = [Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                           "log_level": 3}) for _ in range(clients)]
        cons = []
        for i in range(clients):
            c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"active-{i}",
                          "enable.auto.commit": False, "log_level": 3})
            c.assign([TopicPartition(topic, p, OFFSET_END) for p in range(partitions)])
            cons.append(c)
        ready.set()
        sent_by = [0] * clients
        read = 0
        start = time.monotonic()
        while not stop.is_set():
            due = int((time.monotonic() - start) * rate_each)
            for i, p in enumerate(prods):
                if sent_by[i] < due:  # at most one per pass: a late producer catches up
                    p.produce(topic, value, partition=(sent_by[i] + i) % partitions)
                    sent_by[i] += 1
                p.poll(0)
            for c in cons:
                read += len(c.consume(1000, 0))
            time.sleep(0.005)
        for p in prods:
            p.flush(10)
        for c in cons:
            c.close()
        q.put({"sent": sum(sent_by), "read": read, "seconds": time.monotonic() - start})
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        ready.set()
        q.put({"error": repr(e)})


def _start_active(broker, args):
    """Starts `--active` producers and as many consumers (another process) on an 8-partition
    topic of their own and waits until they work; returns the handle `_stop_active` takes."""
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    create_topic(broker.bootstrap, "active", 8)
    ready, stop, q = ctx.Event(), ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=_active_clients,
                       args=(broker.bootstrap, "active", 8, args.active,
                             args.active_rate, ready, stop, q))
    proc.start()
    ready.wait(120)
    time.sleep(2)
    return proc, stop, q


def _stop_active(handle):
    """Stops the active clients; returns what they wrote and read."""
    proc, stop, q = handle
    stop.set()
    got = q.get(timeout=120)
    proc.join(30)
    if "error" in got:
        raise RuntimeError(f"active clients failed: {got['error']}")
    return got


def run_connections(conftest, target, size, args):
    broker, tmp = start_broker(conftest, target, "connections")
    socks = []
    try:
        pid = broker.proc.pid
        topic = "latency"
        create_topic(broker.bootstrap, topic, 1)
        time.sleep(1)
        rss0, fds0 = rss_mib(pid), fd_count(pid)
        base = latency_run(broker.bootstrap, topic, args.rate, args.seconds)
        t = time.monotonic()
        socks = _open_idle(broker.port, size)
        open_s = time.monotonic() - t
        time.sleep(1)
        rss1, fds1 = rss_mib(pid), fd_count(pid)
        loaded = latency_run(broker.bootstrap, topic, args.rate, args.seconds)
        active = {}
        if args.active:
            # The same run again with `--active` producers and consumers working beside
            # the idle connections.
            handle = _start_active(broker, args)
            fds2, rss2 = fd_count(pid), rss_mib(pid)
            busy = latency_run(broker.bootstrap, topic, args.rate, args.seconds)
            got = _stop_active(handle)
            active = {"active_clients": 2 * args.active, "fds_active": fds2,
                      "rss_mib_active": rss2, "active_written": got["sent"],
                      "active_read": got["read"], "p50_ms_active": busy["p50_ms"],
                      "p99_ms_active": busy["p99_ms"], "max_ms_active": busy["max_ms"]}
        burst = {}
        if args.burst_kib:
            # Every idle connection sends one large request and reads a large response,
            # then goes quiet again: what each keeps of it is what it costs afterwards.
            t = time.monotonic()
            response_bytes = sum(metadata_burst(s, args.burst_kib) for s in socks)
            burst_s = time.monotonic() - t
            time.sleep(args.burst_quiet)
            rss3 = rss_mib(pid)
            burst = {"burst_kib": args.burst_kib, "burst_s": round(burst_s, 2),
                     "burst_response_kib": round(response_bytes / 1024 / size, 1),
                     "quiet_s": args.burst_quiet, "rss_mib_after_burst": rss3,
                     "rss_kib_per_connection_after_burst": None if rss0 is None or rss3 is None
                     else round((rss3 - rss0) * 1024 / size, 1)}
        for s in socks:  # still served after the run: every idle connection answers
            api_versions_v0(s)
        emit({"test": "connections", "target": target, "connections": size,
              "open_s": round(open_s, 3), "rss_mib_none": rss0, "rss_mib_idle": rss1,
              "rss_kib_per_connection": None if rss0 is None or rss1 is None
              else round((rss1 - rss0) * 1024 / size, 1),
              "fds_none": fds0, "fds_idle": fds1,
              "rate": args.rate, "p50_ms_without": base["p50_ms"],
              "p99_ms_without": base["p99_ms"], "p50_ms_with": loaded["p50_ms"],
              "p99_ms_with": loaded["p99_ms"], "max_ms_with": loaded["max_ms"],
              "acked_with": loaded["acked"], "sent_with": loaded["sent"], **active, **burst}, args.out)
    finally:
        for s in socks:
            s.close()
        stop_broker(broker, tmp)


def _open_idle(port, n):
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        api_versions_v0(s)
        socks.append(s)
    return socks


def run_connections_ab(conftest, target, size, args):
    """--ab R: R paired repetitions on one broker. Each repetition runs the paced producer
    once with no idle connections and once with `size` of them open (opened just before,
    closed just after), the order alternating between repetitions so that drift in the
    machine (page cache, the disk's fsync outliers, the JVM warming up) falls on both
    sides. A warm-up run before the first repetition is discarded."""
    broker, tmp = start_broker(conftest, target, "connections-ab")
    active = None
    try:
        topic = "latency"
        create_topic(broker.bootstrap, topic, 1)
        time.sleep(1)
        if args.active:
            # The active clients work through every repetition, on both sides of each pair.
            active = _start_active(broker, args)
        latency_run(broker.bootstrap, topic, args.rate, 2)
        runs = {"without": [], "with": []}
        for rep in range(args.ab):
            order = ("without", "with") if rep % 2 == 0 else ("with", "without")
            for side in order:
                socks = []
                try:
                    if side == "with":
                        socks = _open_idle(broker.port, size)
                        time.sleep(args.settle)
                    r = latency_run(broker.bootstrap, topic, args.rate, args.seconds)
                    for s in socks:  # every idle connection is still served
                        api_versions_v0(s)
                finally:
                    for s in socks:
                        s.close()
                runs[side].append(r)
                log(f"{target}: rep {rep} {side}: p50 {r['p50_ms']} p99 {r['p99_ms']} ms")

        def med(xs):
            xs = sorted(xs)
            return xs[len(xs) // 2] if len(xs) % 2 else round((xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2, 2)
        line = {"test": "connections-ab", "target": target, "connections": size,
                "reps": args.ab, "rate": args.rate, "seconds": args.seconds}
        for side, rs in runs.items():
            for k in ("p50_ms", "p99_ms", "max_ms"):
                line[f"{k}_{side}"] = [r[k] for r in rs]
                line[f"{k}_{side}_median"] = med([r[k] for r in rs])
            line[f"acked_{side}"] = sum(r["acked"] for r in rs)
            line[f"sent_{side}"] = sum(r["sent"] for r in rs)
        # Paired: in how many repetitions was the p99 higher with the idle connections?
        line["p99_higher_with"] = sum(
            1 for a, b in zip(runs["without"], runs["with"]) if b["p99_ms"] > a["p99_ms"])
        if active:
            got = _stop_active(active)
            active = None
            line.update({"active_clients": 2 * args.active, "active_written": got["sent"],
                         "active_read": got["read"], "active_seconds": round(got["seconds"], 1)})
        emit(line, args.out)
    finally:
        if active:
            active[1].set()
            active[0].join(30)
        stop_broker(broker, tmp)


def run_recovery(conftest, target, args, out):
    conftest.TARGET = target
    if target == "shoal":
        os.environ["SHOAL_BIN"] = shoal_bin()
    tmp = Path(tempfile.mkdtemp(prefix=f"scale-recovery-{target}-",
                                dir=os.environ.get("BENCH_TMP", "/tmp")))
    broker = conftest.Broker(tmp)
    run_id = uuid.uuid4().hex[:6]
    topic = f"scale-{run_id}"
    records = int(args.gib * (1 << 30) / 1024)
    try:
        log(f"{target}: starting")
        broker.start()
        create_topic(broker.bootstrap, topic, args.partitions)
        log(f"{target}: producing {records} x 1 KiB to {args.partitions} partitions")
        t = time.monotonic()
        perf = subprocess.run(
            [shoal_bin(), "perf", "--bootstrap", broker.bootstrap, "produce", "--topic", topic,
             "--records", str(records), "--record-bytes", "1024", "--idempotence", "false",
             "--timeout-secs", "1800"],
            capture_output=True, text=True, timeout=1900)
        if perf.returncode != 0:
            raise RuntimeError(f"perf produce failed: {perf.stderr[-2000:]}")
        produce_s = time.monotonic() - t
        log(f"{target}: produced in {produce_s:.1f}s; committing offsets of {args.groups} groups")
        commit_groups(broker.bootstrap, topic, args.partitions, args.groups, run_id)
        log(f"{target}: idle {args.settle}s, then kill -9")
        time.sleep(args.settle)
        data = du_bytes(broker.data_dir)
        broker.kill9()

        # ---- restart, timed from spawn
        cmd = broker._kafka_cmd() if target == "kafka" else broker._shoal_cmd()
        logf = open(broker.log_path, "ab")
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        broker.proc, broker._stdout = proc, logf
        deadline = t0 + 600
        marks = {}
        while not tcp_ok(broker.port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{target}: not listening\n{broker.log_tail()}")
            time.sleep(0.01)
        marks["port_s"] = time.monotonic() - t0
        from confluent_kafka.admin import AdminClient
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0,
                             "socket.timeout.ms": 2000})
        while not leaders_ok(admin, topic, args.partitions):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{target}: no metadata\n{broker.log_tail()}")
            time.sleep(0.02)
        marks["metadata_s"] = time.monotonic() - t0
        produce_each(broker.bootstrap, topic, args.partitions, deadline)
        marks["produce_s"] = time.monotonic() - t0
        cpu_at_ready, rss_at_ready = cpu_seconds(proc.pid), rss_mib(proc.pid)
        # Until the group's offsets read back (a coordinator still loading answers without
        # them), bounded by the deadline.
        while True:
            try:
                offsets = read_offsets(broker.bootstrap, topic, args.partitions,
                                       f"scale-{run_id}-g0")
            except Exception as e:  # noqa: BLE001 - retried until the deadline
                offsets = {"error": repr(e)}
            if all(o == 1 for o in offsets.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        marks["offsets_s"] = time.monotonic() - t0
        hw = high_watermarks(broker.bootstrap, topic, args.partitions)
        expected = records + args.partitions  # the probes
        lost = expected - sum(hw)
        bad_offsets = sum(1 for o in offsets.values() if o != 1)
        if bad_offsets:
            log(f"{target}: offsets read back: {offsets}")
        scanned = open_ms = None
        if target == "shoal":
            import re
            text = re.sub(r"\x1b\[[0-9;]*m", "",
                          Path(broker.log_path).read_text(errors="replace"))
            m = re.findall(r"open_ms=(\d+) recovery_scanned_bytes=(\d+)", text)
            if m:
                open_ms, scanned = int(m[-1][0]), int(m[-1][1])
        r = {"test": "recovery", "target": target, "partitions": args.partitions,
             "open_ms": open_ms, "recovery_scanned_bytes": scanned,
             "records": records, "data_bytes": data, "groups": args.groups,
             "settle_s": args.settle, "produce_mb_per_s": round(records * 1024 / produce_s / 1e6),
             **{k: round(v, 3) for k, v in marks.items()},
             "cpu_s_to_produce": cpu_at_ready, "rss_mib_at_produce": rss_at_ready,
             "records_missing": lost, "offsets_wrong": bad_offsets,
             "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        print(json.dumps(r), flush=True)
        if out:
            with open(out, "a") as f:
                f.write(json.dumps(r) + "\n")
        if lost or bad_offsets:
            raise RuntimeError(f"{target}: {lost} records missing, {bad_offsets} offsets wrong")
        return r
    finally:
        try:
            broker.kill9()
            if args.keep_log:
                subprocess.run(["cp", str(broker.log_path), args.keep_log], check=False)
        finally:
            subprocess.run(["rm", "-rf", str(tmp)], check=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("recovery")
    r.add_argument("--targets", default="shoal,kafka")
    r.add_argument("--gib", type=float, default=10.0)
    r.add_argument("--partitions", type=int, default=100)
    r.add_argument("--groups", type=int, default=200)
    r.add_argument("--settle", type=float, default=65.0)
    r.add_argument("--keep-log", help="copy the broker's log here before deleting its dir")
    r.add_argument("--out")
    pa = sub.add_parser("partitions")
    pa.add_argument("--targets", default="shoal,kafka")
    pa.add_argument("--sizes", default="10,1000,10000")
    pa.add_argument("--records-per-partition", type=int, default=20)
    pa.add_argument("--idle", type=float, default=0,
                    help="seconds to stay idle after the I/O before counting fds again")
    pa.add_argument("--out")
    co = sub.add_parser("connections")
    co.add_argument("--targets", default="shoal,kafka")
    co.add_argument("--sizes", default="10,100,1000")
    co.add_argument("--rate", type=float, default=2000)
    co.add_argument("--seconds", type=float, default=5)
    co.add_argument("--active", type=int, default=0,
                    help="then again with this many producers and as many consumers active")
    co.add_argument("--active-rate", type=float, default=20,
                    help="records/s each active producer writes")
    co.add_argument("--burst-kib", type=int, default=0,
                    help="then each idle connection sends one Metadata request of this size")
    co.add_argument("--burst-quiet", type=float, default=3,
                    help="seconds of quiet after the burst before RSS is read")
    co.add_argument("--ab", type=int, default=0,
                    help="instead: this many paired runs without/with the idle connections")
    co.add_argument("--settle", type=float, default=1,
                    help="with --ab: seconds between opening the idle connections and timing")
    co.add_argument("--out")
    args = ap.parse_args()
    conftest = conftest_module()
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    if args.cmd == "recovery":
        for target in targets:
            run_recovery(conftest, target, args, args.out)
    elif args.cmd == "partitions":
        for size in (int(x) for x in args.sizes.split(",")):
            for target in targets:
                log(f"{target}: {size} partitions")
                run_partitions(conftest, target, size, args)
    elif args.cmd == "connections":
        for size in (int(x) for x in args.sizes.split(",")):
            for target in targets:
                log(f"{target}: {size} idle connections")
                if args.ab:
                    run_connections_ab(conftest, target, size, args)
                else:
                    run_connections(conftest, target, size, args)


if __name__ == "__main__":
    main()
