"""A Shoal broker for the shoal-queues tests, started as tests/interop/conftest.py starts
one: ``$SHOAL_BIN serve --data-dir DIR --listen 127.0.0.1:PORT --config FILE`` on a free
loopback port (SHOAL_BIN defaults to ``<repo>/target/release/shoal``), killed with the test
process, stopped with SIGTERM at the end of the session.
"""

import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
READY_TIMEOUT = 30.0
# Lets a group use a short share.record.lock.duration.ms, so unacknowledged records come
# back within seconds (the tests that check acknowledgements rely on it).
BROKER_CONFIG = {"group.share.min.record.lock.duration.ms": "1000"}
LOCK_MS = 2000


def _die_with_parent():
    """preexec_fn: SIGKILL the broker if the test process dies (Linux)."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort only
        pass


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    def __init__(self, workdir: Path):
        self.port = _free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        binary = os.environ.get("SHOAL_BIN") or str(REPO / "target" / "release" / "shoal")
        if not os.access(binary, os.X_OK):
            pytest.fail(f"Shoal binary not found: {binary} (set SHOAL_BIN)", pytrace=False)
        cfg = workdir / "shoal.properties"
        cfg.write_text("".join(f"{k}={v}\n" for k, v in BROKER_CONFIG.items()))
        self.log = open(workdir / "broker.log", "wb")
        self.proc = subprocess.Popen(
            [binary, "serve", "--data-dir", str(workdir / "data"), "--listen", self.bootstrap,
             "--config", str(cfg)],
            stdout=self.log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        deadline = time.monotonic() + READY_TIMEOUT
        while not self._listening():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"Shoal did not start; see {workdir / 'broker.log'}", pytrace=False)
            time.sleep(0.1)

    def _listening(self):
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1.0):
                return True
        except OSError:
            return False

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.log.close()


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    b = Broker(tmp_path_factory.mktemp("shoal"))
    yield b
    b.stop()


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
