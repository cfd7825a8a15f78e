"""The Java client (kafka-clients from the reference Kafka jars, 4.x) against the broker: a
transactional producer (transaction version 2 when the broker finalizes it) and a
read_committed group consumer. The jars come from kafka_ref/fetch.sh (Maven Central)."""

import os
import subprocess

from iutil import create_topic, uniq

HERE = os.path.dirname(os.path.abspath(__file__))


def java_libs():
    libs = os.environ.get("KAFKA_LIBS")
    if not libs:
        libs = subprocess.run([os.path.join(HERE, "kafka_ref", "fetch.sh")], check=True,
                              capture_output=True, text=True, timeout=600).stdout.strip()
    return libs


def test_java_transactions_and_read_committed(broker, tmp_path):
    libs = java_libs()
    classes = tmp_path / "classes"
    classes.mkdir()
    subprocess.run(["javac", "-d", str(classes), "-cp", f"{libs}/*",
                    os.path.join(HERE, "java", "TransactionsCheck.java")],
                   check=True, timeout=120)
    topic = create_topic(broker, uniq("java-txn"), 1)
    run = subprocess.run(["java", "-cp", f"{libs}/*:{classes}", "TransactionsCheck",
                          broker.bootstrap, topic],
                         capture_output=True, text=True, timeout=120)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-3000:]
    assert "committed=20 seen=20" in run.stdout, out[-3000:]
