#!/usr/bin/env python3
"""__consumer_offsets size and broker start-up (replay) time after many offset commits,
before and after compaction. A measurement, not a test: prints a small table.

    bench/compaction_replay.py [--bin target/release/shoal] [--commits 100000] [--groups 10]

Starts `shoal serve` on a free 127.0.0.1 port with a fresh data dir and 1 MiB segments,
cleaner off; commits offsets (10 partitions per commit, synchronous, one thread per group); stops it; times three restarts (process start to the first answered
metadata request with the groups loaded: ListGroups lists them all); then runs it with the
cleaner on (min.cleanable.dirty.ratio 0.01, backoff 100 ms) until the topic stops shrinking,
stops it, and times three restarts again."""

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

REPO = Path(__file__).resolve().parent.parent


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def offsets_bytes(data):
    return sum(f.stat().st_size for d in Path(data).glob("__consumer_offsets-*")
               for f in d.glob("*.log"))


class Shoal:
    def __init__(self, binary, data, config):
        self.port = free_port()
        conf = Path(data).parent / "bench.properties"
        conf.write_text("".join(f"{k}={v}\n" for k, v in config.items()))
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(
            [binary, "serve", "--data-dir", data, "--listen", f"127.0.0.1:{self.port}",
             "--config", str(conf)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.bootstrap = f"127.0.0.1:{self.port}"

    def wait_ready(self, groups):
        """Seconds from process start until ListGroups lists `groups` groups."""
        deadline = time.monotonic() + 300
        # The port first (a refused connection would put librdkafka into its reconnect
        # backoff and add up to a second), then the groups.
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("broker not listening") from None
                time.sleep(0.002)
        a = AdminClient({"bootstrap.servers": self.bootstrap})
        while time.monotonic() < deadline:
            try:
                res = a.list_consumer_groups(request_timeout=5).result()
                if len(res.valid) >= groups:
                    return time.monotonic() - self.t0
            except Exception:  # noqa: BLE001 - not up yet
                pass
            time.sleep(0.005)
        raise RuntimeError("broker not ready")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(REPO / "target" / "release" / "shoal"))
    ap.add_argument("--commits", type=int, default=100_000)
    ap.add_argument("--groups", type=int, default=10)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="shoal-compaction-bench-")
    data = os.path.join(tmp, "data")
    base = {"log.segment.bytes": "1048576", "offsets.topic.segment.bytes": "1048576",
            "num.partitions": "10"}
    try:
        s = Shoal(args.bin, data, {**base, "log.cleaner.enable": "false"})
        s.wait_ready(0)
        consumers = [Consumer({"bootstrap.servers": s.bootstrap, "group.id": f"bench-{g}",
                               "enable.auto.commit": False})
                     for g in range(args.groups)]
        t = time.monotonic()

        def commits(g):
            # Synchronous: pipelined asynchronous commits on one connection stall until
            # librdkafka's 60 s request timeout (seen with this build; reported separately).
            c = consumers[g]
            for i in range(g, args.commits, args.groups):
                c.commit(offsets=[TopicPartition("bench", p, i + p) for p in range(10)],
                         asynchronous=False)
            c.close()

        threads = [threading.Thread(target=commits, args=(g,)) for g in range(args.groups)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        commit_s = time.monotonic() - t
        s.stop()
        before = offsets_bytes(data)

        def restarts(config):
            times = []
            for _ in range(3):
                b = Shoal(args.bin, data, config)
                times.append(b.wait_ready(args.groups))
                b.stop()
            return statistics.median(times), times

        off = {**base, "log.cleaner.enable": "false"}
        start_before = restarts(off)
        s = Shoal(args.bin, data, {**base, "log.cleaner.backoff.ms": "100",
                                   "log.cleaner.min.cleanable.ratio": "0.01"})
        s.wait_ready(args.groups)
        t = time.monotonic()
        last, stable = offsets_bytes(data), 0
        while stable < 5 and time.monotonic() - t < 600:
            time.sleep(1)
            now = offsets_bytes(data)
            stable = stable + 1 if now == last else 0
            last = now
        clean_s = time.monotonic() - t
        s.stop()
        after = offsets_bytes(data)
        start_after = restarts(off)
        print(f"commits: {args.commits} x 10 partitions, {args.groups} groups, "
              f"{commit_s:.1f} s to write")
        print("| | __consumer_offsets bytes | start-up to groups loaded (median of 3) |")
        print("| --- | --- | --- |")
        print(f"| before compaction | {before:,} | {start_before[0]:.3f} s "
              f"{[round(x, 3) for x in start_before[1]]} |")
        print(f"| after compaction | {after:,} | {start_after[0]:.3f} s "
              f"{[round(x, 3) for x in start_after[1]]} |")
        print(f"the size was stable (5 s unchanged) {clean_s:.0f} s after the cleaning broker "
              "started (one cleaner task, no I/O limit)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
