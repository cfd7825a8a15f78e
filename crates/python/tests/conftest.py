"""The broker for the shoal-queues tests: tests/interop's (brokers.py), so INTEROP_TARGET
picks Shoal (default; SHOAL_BIN, default ``<repo>/target/release/shoal``) or Apache Kafka
(KAFKA_LIBS, as tests/interop/run.sh fills it). One broker for the session, on a free
loopback port, killed with the test process. Tests of what only Shoal has (transactional
share acknowledgements, KIP-1289) are marked ``shoal_only``; against Kafka they are skipped,
and test_kafka.py checks that the package fails fast there instead.
"""

import sys
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tests" / "interop"))
from brokers import TARGET, Broker  # noqa: E402

# Lets a group use a short share.record.lock.duration.ms, so unacknowledged records come
# back within seconds (the tests that check acknowledgements rely on it).
BROKER_CONFIG = {
    "group.share.min.record.lock.duration.ms": "1000",
    # Faster assignments: both brokers hand out partitions on heartbeats.
    "group.share.min.heartbeat.interval.ms": "1000",
    "group.share.heartbeat.interval.ms": "1000",
}
LOCK_MS = 2000
ON_KAFKA = TARGET == "kafka"


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "shoal_only: needs what only Shoal has (KIP-1289); skipped against Kafka")
    config.addinivalue_line("markers", "kafka_only: checks how the package meets Apache Kafka")


def pytest_collection_modifyitems(config, items):
    if ON_KAFKA:
        skip = pytest.mark.skip(reason="KIP-1289 is Shoal's: Apache Kafka lacks it")
        for item in items:
            if "shoal_only" in item.keywords:
                item.add_marker(skip)
    else:
        skip = pytest.mark.skip(reason="runs against Apache Kafka only (INTEROP_TARGET=kafka)")
        for item in items:
            if "kafka_only" in item.keywords:
                item.add_marker(skip)


def pytest_report_header(config):
    return f"broker: {TARGET}"


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    b = Broker(tmp_path_factory.mktemp("broker"), BROKER_CONFIG)
    try:
        yield b.start()
    finally:
        b.stop()
        b.kill9()


@pytest.fixture
def names():
    """Unique topic / group / transactional-id names for one test."""
    tag = uuid.uuid4().hex[:8]
    return lambda kind: f"{kind}-{tag}"


def create_topics(broker, *topics, partitions=1):
    import shoal
    with shoal.AdminClient({"bootstrap.servers": broker.bootstrap}) as admin:
        for topic, future in admin.create_topics(
                [shoal.NewTopic(t, num_partitions=partitions) for t in topics]).items():
            assert future.result(timeout=0) is None, topic


def earliest_group(broker, group):
    """A share group that starts at the earliest offset, with a short acquisition lock."""
    import shoal
    with shoal.AdminClient({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.set_group_configs(group, {"share.auto.offset.reset": "earliest",
                                        "share.record.lock.duration.ms": str(LOCK_MS)})


def poll_all(consumer, count, timeout=30.0, ack=None):
    """Messages polled until `count` arrived or `timeout` s passed; `ack(m)` (explicit
    mode) gives each one's AcknowledgeType."""
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        for m in consumer.poll(0.5):
            got.append(m)
            if ack is not None:
                consumer.acknowledge(m, ack(m))
    return got
