"""Consume throughput and broker CPU per MB over PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-512) on
one broker, Shoal or Kafka (INTEROP_TARGET), with confluent-kafka.

    INTEROP_TARGET=shoal N=10000 tests/interop/.venv/bin/python bench/tls_consume.py /tmp/tls-bench

One partition of N 64 KiB records is written on the PLAINTEXT listener, then read whole by a
fresh consumer on each listener, twice; broker CPU is utime+stime of the broker process
(/proc, 10 ms ticks) over the read. Certificates are made at run time (tests/interop/tlsutil.py).
"""
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "interop"))
from conftest import Broker
from tlsutil import make_certs
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

work = Path(sys.argv[1]); work.mkdir(parents=True, exist_ok=True)
(work / "certs").mkdir(exist_ok=True)
certs = make_certs(work / "certs")
config = {"ssl.keystore.type": "PEM", "ssl.keystore.location": certs["keystore"],
          "sasl.enabled.mechanisms": "SCRAM-SHA-512",
          "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
          "log.flush.interval.messages": "9223372036854775807", "log.flush.interval.ms": "1000"}
b = Broker(work / "broker", config, {"SSL": "SSL", "SASL_SSL": "SASL_SSL"})
b.start()
pid = b.proc.pid
def cpu():
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")
admin = AdminClient({"bootstrap.servers": b.bootstrap})
admin.create_topics([NewTopic("bench", 1, 1)])["bench"].result(30)
admin.alter_user_scram_credentials([UserScramCredentialUpsertion("u", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"p")])["u"].result(30)
time.sleep(2)
N, SIZE = int(os.environ.get("N", "3000")), 64 * 1024
p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, "batch.size": 1000000, "acks": 1})
payload = os.urandom(SIZE)
for i in range(N):
    while True:
        try:
            p.produce("bench", payload); break
        except BufferError:
            p.poll(0.1)
p.flush(120)
total_mb = N * SIZE / 1e6
def consume(listener, extra):
    conf = {"bootstrap.servers": b.listener_bootstrap(listener) if listener != "PLAINTEXT" else b.bootstrap,
            "group.id": f"g-{listener}-{time.time()}", "enable.auto.commit": False,
            "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 10485760,
            "log_level": 2}
    conf.update(extra)
    c = Consumer(conf)
    c.assign([TopicPartition("bench", 0, 0)])
    got = 0
    # warm-up: first message
    while got == 0:
        m = c.poll(5)
        if m is not None and not m.error(): got = 1
    t0, c0 = time.monotonic(), cpu()
    while got < N:
        ms = c.consume(min(N - got, 1000), 5)
        got += sum(1 for m in ms if not m.error())
    dt, dc = time.monotonic() - t0, cpu() - c0
    c.close()
    mb = (N - 1) * SIZE / 1e6
    print(f"{listener:10s} {mb/dt:8.1f} MB/s  broker CPU {dc/mb*1000:6.2f} ms/MB  ({mb:.0f} MB in {dt:.2f} s)", flush=True)
ssl = {"security.protocol": "SSL", "ssl.ca.location": certs["ca"]}
sasl_ssl = {"security.protocol": "SASL_SSL", "ssl.ca.location": certs["ca"], "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u", "sasl.password": "p"}
for _ in range(2):
    consume("PLAINTEXT", {})
    consume("SSL", ssl)
    consume("SASL_SSL", sasl_ssl)
b.stop()
