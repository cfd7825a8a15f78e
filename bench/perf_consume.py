#!/usr/bin/env python3
"""Consume throughput and broker CPU per MB with Kafka's own perf tools, Shoal beside Kafka.

  perf_consume.py [--targets shoal,kafka] [--partitions 1,8] [--consumers 1,8]
                  [--records 1000000] [--size 1024] [--reps 3] [--fetch-size 1048576]
                  [--out results.jsonl]

Per target, a fresh broker on its defaults (tests/interop/conftest.py's Broker: Shoal from
SHOAL_BIN or target/release/shoal, Kafka 4.4 from the reference jars). For each P in
--partitions: a topic of P partitions filled by kafka-producer-perf-test (ProducerPerformance:
--records x --size bytes, acks=all, linger.ms=5, batch.size=1000000); one untimed read
(page cache, the reference broker's JIT); then for each K in --consumers, --reps times: K
kafka-consumer-perf-test processes (ConsumerPerformance, each in a group of its own, so each
reads the whole topic: K x records served) started together.

Reported per repetition: the aggregate rate (K x MB over the span from the first consumer's
fetch start to the last one's end, fetch start = end.time - fetch.time.ms as the tool prints
them, so JVM start-up and the group join are excluded), each consumer's own fetch.MB.sec,
and the broker's CPU seconds (utime + stime from /proc, sampled before the consumers start
and after they exit) per MB served. The consumers run with the tool's defaults
(max.partition.fetch.bytes = --fetch-size, 1 MiB) and -Xmx1g. One JSON line per repetition
on stdout (and --out); progress on stderr.
"""

import argparse
import datetime
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

from kbench import conftest_module
from scale import cpu_seconds, emit, start_broker, stop_broker

REPO = Path(__file__).resolve().parent.parent


def log(*a):
    print("[perf-consume]", *a, file=sys.stderr, flush=True)


def kafka_libs():
    libs = os.environ.get("KAFKA_LIBS")
    if libs:
        return libs
    return subprocess.run([str(REPO / "tests/interop/kafka_ref/fetch.sh")], check=True,
                          capture_output=True, text=True, timeout=900).stdout.strip()


def java(libs, main, args):
    cmd = ["java", "-Xmx1g", "-cp", f"{libs}/*", main] + args
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run_tool(libs, main, args, timeout):
    proc = java(libs, main, args)
    out, err = proc.communicate(timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{main} failed ({proc.returncode}): {(out + err)[-2000:]}")
    return out


def parse_time(s):
    return datetime.datetime.strptime(s.strip(), "%Y-%m-%d %H:%M:%S:%f").timestamp()


def parse_consumer(out):
    """The tool's result line: start.time, end.time, MB, MB.sec, nMsg, nMsg.sec,
    rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec."""
    lines = [l for l in out.splitlines() if l and l[0].isdigit()]
    if not lines:
        raise RuntimeError(f"no result line in: {out[-2000:]}")
    f = [x.strip() for x in lines[-1].split(",")]
    end = parse_time(f[1])
    fetch_ms = float(f[7])
    return {"mb": float(f[2]), "records": int(f[4]), "fetch_start": end - fetch_ms / 1000,
            "end": end, "fetch_mb_s": float(f[8]), "rebalance_ms": float(f[6])}


def create_topic(bootstrap, topic, partitions):
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(60)


def consumers(libs, bootstrap, topic, args, k):
    common = ["--bootstrap-server", bootstrap, "--topic", topic, "--num-records",
              str(args.records), "--timeout", "30000", "--fetch-size", str(args.fetch_size),
              "--hide-header"]
    procs = [java(libs, "org.apache.kafka.tools.ConsumerPerformance",
                  common + ["--group", f"perf-{uuid.uuid4().hex[:10]}"])
             for _ in range(k)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        if p.returncode != 0:
            raise RuntimeError(f"ConsumerPerformance failed: {(out + err)[-2000:]}")
        results.append(parse_consumer(out))
    return results


def run_target(target, args, libs, conftest):
    broker, tmp = start_broker(conftest, target, "perf-consume")
    try:
        pid = broker.proc.pid
        for p in args.partitions:
            topic = f"perf-p{p}-{uuid.uuid4().hex[:6]}"
            create_topic(broker.bootstrap, topic, p)
            log(f"{target}: producing {args.records} x {args.size} B to {p} partition(s)")
            run_tool(libs, "org.apache.kafka.tools.ProducerPerformance",
                     ["--topic", topic, "--num-records", str(args.records), "--record-size",
                      str(args.size), "--throughput", "-1", "--producer-props",
                      f"bootstrap.servers={broker.bootstrap}", "acks=all", "linger.ms=5",
                      "batch.size=1000000"], 900)
            consumers(libs, broker.bootstrap, topic, args, 1)  # untimed warm-up read
            for k in args.consumers:
                for rep in range(args.reps):
                    c0 = cpu_seconds(pid)
                    got = consumers(libs, broker.bootstrap, topic, args, k)
                    c1 = cpu_seconds(pid)
                    mb = sum(r["mb"] for r in got)
                    span = max(r["end"] for r in got) - min(r["fetch_start"] for r in got)
                    missing = sum(args.records - r["records"] for r in got)
                    row = {"test": "perf_consume", "target": target, "partitions": p,
                           "consumers": k, "rep": rep, "records": args.records,
                           "record_bytes": args.size, "fetch_size": args.fetch_size,
                           "mb_served": round(mb, 1), "span_s": round(span, 3),
                           "mb_per_s": round(mb / span, 1) if span > 0 else None,
                           "per_consumer_fetch_mb_s": [r["fetch_mb_s"] for r in got],
                           "broker_cpu_s": None if c0 is None or c1 is None
                           else round(c1 - c0, 3),
                           "records_missing": missing}
                    if row["broker_cpu_s"] is not None and mb > 0:
                        row["broker_cpu_ms_per_mb"] = round(row["broker_cpu_s"] * 1000 / mb, 3)
                    log(f"{target} P={p} K={k} rep {rep}: {row['mb_per_s']} MB/s, "
                        f"{row.get('broker_cpu_ms_per_mb')} ms CPU/MB")
                    emit(row, args.out)
    finally:
        stop_broker(broker, tmp)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--targets", default="shoal,kafka")
    ap.add_argument("--partitions", default="1,8")
    ap.add_argument("--consumers", default="1,8")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--fetch-size", type=int, default=1_048_576)
    ap.add_argument("--out")
    args = ap.parse_args()
    args.partitions = [int(x) for x in args.partitions.split(",")]
    args.consumers = [int(x) for x in args.consumers.split(",")]
    libs = kafka_libs()
    conftest = conftest_module()
    for target in [t.strip() for t in args.targets.split(",") if t.strip()]:
        run_target(target, args, libs, conftest)


if __name__ == "__main__":
    main()
