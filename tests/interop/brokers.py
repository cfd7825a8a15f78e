"""The broker processes the interop suite and the Python package's tests run against, one
per test file or test (the fixtures are in conftest.py).

INTEROP_TARGET selects which:

* ``shoal`` (default): ``$SHOAL_BIN serve --data-dir DIR --listen 127.0.0.1:PORT
  [--config FILE]`` where SHOAL_BIN defaults to ``<repo>/target/release/shoal``
  and FILE holds Kafka-named properties (``num.partitions=3``).
* ``kafka``: real Apache Kafka (KRaft, combined broker+controller, one node)
  from the jars in ``$KAFKA_LIBS`` (run.sh fills it via kafka_ref/fetch.sh).
"""

import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
import base64
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
TARGET = os.environ.get("INTEROP_TARGET", "shoal").strip().lower()
# Shoal must be ready within 30 s; the JVM reference gets more slack.
READY_TIMEOUT = float(os.environ.get("INTEROP_READY_TIMEOUT",
                                     "90" if TARGET == "kafka" else "30"))
STOP_TIMEOUT = 30.0

if TARGET not in ("shoal", "kafka"):
    raise pytest.UsageError(f"INTEROP_TARGET must be 'shoal' or 'kafka', not {TARGET!r}")

_LIVE = []  # brokers currently started (for failure reports / emergency cleanup)


def _die_with_parent():
    """preexec_fn: SIGKILL the broker if the pytest process dies (Linux)."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort only
        pass


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tcp_ok(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


def _kafka_libs():
    libs = os.environ.get("KAFKA_LIBS")
    if not libs:
        out = subprocess.run([str(HERE / "kafka_ref" / "fetch.sh")], check=True,
                             capture_output=True, text=True, timeout=600)
        libs = out.stdout.strip().splitlines()[-1]
        os.environ["KAFKA_LIBS"] = libs
    if not any(Path(libs).glob("kafka_2.13-*.jar")):
        raise RuntimeError(f"no kafka_2.13 jar in KAFKA_LIBS={libs}")
    return libs


_LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.state.name = state.change.logger
logger.state.level = WARN
"""


class Broker:
    """One broker process (Shoal or reference Kafka) bound to loopback."""

    def __init__(self, workdir: Path, config=None, listeners=None):
        self.target = TARGET
        self.workdir = Path(workdir)
        self.data_dir = self.workdir / "data"
        self.conf_dir = self.workdir / "conf"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        self.config = {k: str(v) for k, v in (config or {}).items()}
        self.port = _free_port()
        self.controller_port = _free_port() if TARGET == "kafka" else None
        # extra listeners: name -> (security protocol, port)
        self.listeners = {name: (proto, _free_port()) for name, proto in (listeners or {}).items()}
        self.log_path = self.workdir / "broker.log"
        # extra JVM options for the Kafka target (system properties such as
        # org.apache.kafka.sasl.oauthbearer.allowed.urls); Shoal ignores them
        self.jvm_options = []
        self.proc = None
        self._stdout = None
        self.starts = 0

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.port}"

    # ------------------------------------------------------------ commands
    def listener_bootstrap(self, name):
        return f"127.0.0.1:{self.listeners[name][1]}"

    def _listener_keys(self, extra_names=(), extra_map=()):
        """listeners / advertised.listeners / the protocol map for PLAINTEXT plus the extra
        listeners (and, for Kafka, its CONTROLLER listener)."""
        names = [("PLAINTEXT", "PLAINTEXT", self.port)]
        names += [(n, proto, port) for n, (proto, port) in self.listeners.items()]
        urls = [f"{n}://127.0.0.1:{port}" for n, _, port in names]
        pairs = [f"{n}:{proto}" for n, proto, _ in names] + list(extra_map)
        return {
            "listeners": ",".join(urls + list(extra_names)),
            "advertised.listeners": ",".join(urls),
            "listener.security.protocol.map": ",".join(pairs),
        }

    def _shoal_cmd(self):
        binary = os.environ.get("SHOAL_BIN") or str(REPO / "target" / "release" / "shoal")
        if not os.access(binary, os.X_OK):
            pytest.fail(f"Shoal binary not found/executable: {binary} (set SHOAL_BIN)",
                        pytrace=False)
        # always pass --config (possibly empty) so a stray SHOAL_CONFIG env var is not used
        cfg = self.conf_dir / "shoal.properties"
        config = dict(self.config)
        if self.listeners:
            config.update(self._listener_keys())
        cfg.write_text("".join(f"{k}={v}\n" for k, v in config.items()))
        listen = [] if self.listeners else ["--listen", self.bootstrap]
        return [binary, "serve", "--data-dir", str(self.data_dir), *listen,
                "--config", str(cfg)]

    def _kafka_cmd(self):
        libs = _kafka_libs()
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},"
                         f"CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "5",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "5",
            "group.initial.rebalance.delay.ms": "0",
            # share groups (share.version is finalized by default in 4.4): the
            # share-group state topic defaults to RF 3 / min ISR 2, which a
            # one-node cluster cannot host -> members never get an assignment
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "share.coordinator.state.topic.num.partitions": "5",
            # restart after kill -9: the controller refuses the re-registration
            # until the old broker session expires (default 9 s)
            "broker.heartbeat.interval.ms": "500",
            "broker.session.timeout.ms": "3000",
        }
        if self.listeners:
            props.update(self._listener_keys(
                [f"CONTROLLER://127.0.0.1:{self.controller_port}"], ["CONTROLLER:PLAINTEXT"]))
        props.update(self.config)
        server_props = self.conf_dir / "server.properties"
        server_props.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        log4j = self.conf_dir / "log4j2.properties"
        log4j.write_text(_LOG4J2.format(log=self.conf_dir / "kafka-server.log"))
        java = shutil.which("java") or "java"
        cp = os.path.join(libs, "*")
        jvm = [java, "-Xms256m", "-Xmx1g", "-XX:+UseG1GC", "-Djava.awt.headless=true",
               f"-Dlog4j2.configurationFile={log4j}", *self.jvm_options, "-cp", cp]
        if not (self.data_dir / "meta.properties").exists():
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            fmt = subprocess.run(
                jvm + ["kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}",
                       "-c", str(server_props), "--standalone"],
                capture_output=True, text=True, timeout=120)
            if fmt.returncode != 0:
                raise RuntimeError(f"kafka storage format failed:\n{fmt.stdout}\n{fmt.stderr}")
        return jvm + ["kafka.Kafka", str(server_props)]

    # ------------------------------------------------------------ lifecycle
    def start(self):
        assert self.proc is None or self.proc.poll() is not None, "already running"
        cmd = self._kafka_cmd() if TARGET == "kafka" else self._shoal_cmd()
        self._stdout = open(self.log_path, "ab")
        self._stdout.write(f"\n===== start #{self.starts + 1}: {' '.join(cmd)}\n".encode())
        self._stdout.flush()
        self.proc = subprocess.Popen(cmd, stdout=self._stdout, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True,
                                     preexec_fn=_die_with_parent)
        self.starts += 1
        if self not in _LIVE:
            _LIVE.append(self)
        self._wait_ready()
        return self

    def _wait_ready(self):
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode} during "
                                   f"startup\n{self.log_tail()}")
            if _tcp_ok(self.port):
                break
            time.sleep(0.1)
        else:
            raise RuntimeError(f"broker port {self.port} not open after "
                               f"{READY_TIMEOUT}s\n{self.log_tail()}")
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode} during "
                                   f"startup\n{self.log_tail()}")
            admin = AdminClient({"bootstrap.servers": self.bootstrap,
                                 "socket.timeout.ms": 3000, "log_level": 2})
            try:
                md = admin.list_topics(timeout=max(0.5, min(5.0, deadline - time.monotonic())))
                if md.brokers:
                    return
            except Exception as e:  # noqa: BLE001 - retried until the deadline
                last = e
            time.sleep(0.2)
        raise RuntimeError(f"broker not ready (metadata) after {READY_TIMEOUT}s: "
                           f"{last!r}\n{self.log_tail()}")

    def _reap(self, timeout):
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        if self._stdout:
            self._stdout.close()
            self._stdout = None

    def kill9(self):
        """SIGKILL the broker (and its process group); waits for it to die."""
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._reap(30)

    def stop(self):
        """SIGTERM and wait (escalates to SIGKILL after 30 s)."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self._reap(STOP_TIMEOUT)
        if self in _LIVE:
            _LIVE.remove(self)

    def restart(self):
        """Start again on the same data dir and port (after kill9/stop)."""
        if self.proc and self.proc.poll() is None:
            self.stop()
        return self.start()

    def is_running(self):
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, n=60):
        lines = []
        for p in (self.log_path, self.conf_dir / "kafka-server.log"):
            try:
                with open(p, "rb") as f:
                    f.seek(0, os.SEEK_END)
                    f.seek(max(0, f.tell() - 20000))
                    tail = f.read().decode("utf-8", "replace").splitlines()[-n:]
                lines.append(f"--- {p} (last {len(tail)} lines)\n" + "\n".join(tail))
            except OSError:
                pass
        return "\n".join(lines)
