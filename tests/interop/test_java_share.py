"""Share groups (KIP-932) through the Java client's KafkaShareConsumer (kafka-clients from the
reference Kafka jars, 4.x), records produced with a plain / transactional KafkaProducer.
java/ShareCheck.java does the work and prints one line per check:

* implicit: two implicit-mode consumers in one group on one partition receive every record
  exactly once between them (each gets some); commitSync returns no errors;
* explicit: RELEASE -> redelivered with deliveryCount 2; REJECT and ACCEPT -> never again;
  commitSync returns a per-partition result without error; acquisitionLockTimeoutMs() reports
  the broker's group.share.record.lock.duration.ms;
* close: records held unacknowledged by a consumer that closes go to another consumer
  (deliveryCount 2, as Kafka >= 4.2 counts the delivery to the closed member);
* lock-expiry: with the group config share.record.lock.duration.ms=2000, records a live consumer
  holds without acknowledging go to another consumer after ~2 s (deliveryCount 2); the first
  consumer's late ACCEPT fails with InvalidRecordStateException (partition error 121);
* read_committed: group config share.isolation.level=read_committed hides an aborted transaction,
  read_uncommitted shows it; implicit acknowledgements piggybacked on ShareFetch (control records
  acknowledged as gaps) stick: a later consumer of the same group gets nothing.

Every group gets share.auto.offset.reset=earliest through Admin incrementalAlterConfigs on
ConfigResource GROUP before its first consumer joins. Validated against Apache Kafka 4.4
(INTEROP_TARGET=kafka, ~25 s for the Java part).
"""

import os
import subprocess

from iutil import create_topic, uniq

HERE = os.path.dirname(os.path.abspath(__file__))

LOCK_MS = 15000
# Kafka property names; Shoal ignores keys it does not know (and finalizes share.version=1 by
# default; Kafka 4.4 finalizes share.version=2 on format, so nothing to enable there).
BROKER_CONFIG = {
    # single node: the share-state topic must fit on one broker
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "share.coordinator.state.topic.num.partitions": "3",
    # lets the lock-expiry check set the group's share.record.lock.duration.ms to 2000
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.record.lock.duration.ms": str(LOCK_MS),
    # faster joins (assignments arrive on heartbeats)
    "group.share.min.heartbeat.interval.ms": "500",
    "group.share.heartbeat.interval.ms": "1000",
}

EXPECTED = [
    "OK implicit: two consumers received all records exactly once, duplicates=0",
    "OK explicit: RELEASE redelivered with deliveryCount=2, REJECT/ACCEPT not redelivered, "
    "commitSync without errors",
    "OK close: records of a consumer closed without acknowledging went to another consumer "
    "with deliveryCount=2",
    "OK lock-expiry: unacknowledged records redelivered to another consumer with deliveryCount=2 "
    "after the lock expired; late ACCEPT -> InvalidRecordStateException",
    "OK read_committed: share.isolation.level=read_committed delivered only the 10 committed "
    "records, read_uncommitted all 15",
    "ALL OK",
]


def java_libs():
    libs = os.environ.get("KAFKA_LIBS")
    if not libs:
        libs = subprocess.run([os.path.join(HERE, "kafka_ref", "fetch.sh")], check=True,
                              capture_output=True, text=True, timeout=600).stdout.strip()
    return libs


def test_java_share_consumer(broker, tmp_path):
    libs = java_libs()
    classes = tmp_path / "classes"
    classes.mkdir()
    subprocess.run(["javac", "-d", str(classes), "-cp", f"{libs}/*",
                    os.path.join(HERE, "java", "ShareCheck.java")],
                   check=True, timeout=120)
    topics = [create_topic(broker, uniq(f"share-{name}"), 1)
              for name in ("implicit", "explicit", "close", "lock", "txn")]
    run = subprocess.run(["java", "-cp", f"{libs}/*:{classes}", "ShareCheck",
                          broker.bootstrap, str(LOCK_MS), *topics],
                         capture_output=True, text=True, timeout=150)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    lines = run.stdout.splitlines()
    for want in EXPECTED:
        assert any(line.startswith(want) for line in lines), f"missing {want!r} in:\n{out[-4000:]}"
