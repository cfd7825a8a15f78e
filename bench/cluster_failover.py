"""Failover time of a three-broker Shoal cluster: kill -9 of a partition's owner to the first
acknowledged write to that partition after it, with confluent-kafka.

    eval "$(tests/cluster/rig.sh env)"
    ROUNDS=5 tests/interop/.venv/bin/python bench/cluster_failover.py /tmp/failover

One etcd (SHOAL_ETCD_BIN), a shared object directory (file://), three `shoal serve`
(SHOAL_BIN, default target/release/shoal) with the default broker.session.timeout.ms (9 s,
as Kafka's). A producer (acks=all, idempotent) sends one record every 5 ms to a one-partition
topic; each round kills its owner with SIGKILL, measures the time from the kill to the first
delivery report of a record sent after the kill, then restarts the killed broker. Prints each
round and min/median/max.
"""
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parent.parent
work = Path(sys.argv[1])
work.mkdir(parents=True, exist_ok=True)
rounds = int(os.environ.get("ROUNDS", "5"))
shoal = os.environ.get("SHOAL_BIN", str(REPO / "target" / "release" / "shoal"))
etcd_bin = os.environ.get("SHOAL_ETCD_BIN", "etcd")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


client, peer = free_port(), free_port()
etcd = subprocess.Popen(
    [etcd_bin, "--data-dir", str(work / "etcd"),
     f"--listen-client-urls=http://127.0.0.1:{client}",
     f"--advertise-client-urls=http://127.0.0.1:{client}",
     f"--listen-peer-urls=http://127.0.0.1:{peer}",
     f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
     f"--initial-cluster=default=http://127.0.0.1:{peer}"],
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
wait_port(client)
ports = {n: free_port() for n in (1, 2, 3)}
procs = {}


def start(n):
    log = open(work / f"broker-{n}.log", "ab")
    procs[n] = subprocess.Popen(
        [shoal, "serve", "--node-id", str(n), "--data-dir", str(work / f"data-{n}"),
         "--listen", f"127.0.0.1:{ports[n]}",
         "--metadata-store", f"etcd://127.0.0.1:{client}",
         "--object-store", f"file://{work / 'objects'}"],
        stdout=subprocess.DEVNULL, stderr=log)
    wait_port(ports[n])


try:
    for n in ports:
        start(n)
    bootstrap = ",".join(f"127.0.0.1:{p}" for p in ports.values())
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic("failover", 1, 1)]).values():
        f.result(30)
    acked = []  # (monotonic time, value) of each delivery

    def delivered(err, msg):
        if err is None:
            acked.append((time.monotonic(), int(msg.value())))

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 0,
                         "message.timeout.ms": 120000, "topic.metadata.refresh.interval.ms": 1000})
    sent = 0

    def pump(seconds):
        global sent
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            producer.produce("failover", str(sent).encode(), on_delivery=delivered)
            sent += 1
            producer.poll(0.005)

    results = []
    for r in range(rounds):
        pump(3)
        md = admin.list_topics("failover", timeout=10)
        owner = md.topics["failover"].partitions[0].leader
        killed_at = time.monotonic()
        first_after = sent
        procs[owner].send_signal(signal.SIGKILL)
        procs[owner].wait()
        while not any(v >= first_after for _, v in acked):
            pump(0.1)
            if time.monotonic() - killed_at > 120:
                raise RuntimeError("no write acknowledged 120 s after the kill")
        first = min(t for t, v in acked if v >= first_after)
        results.append(first - killed_at)
        print(f"round {r + 1}: owner node {owner} killed, first acknowledged write after "
              f"{first - killed_at:.2f} s", flush=True)
        start(owner)
    producer.flush(60)
    print(f"failover: min {min(results):.2f} s, median {statistics.median(results):.2f} s, "
          f"max {max(results):.2f} s over {rounds} rounds")
finally:
    for p in procs.values():
        if p.poll() is None:
            p.kill()
            p.wait()
    etcd.kill()
    etcd.wait()
