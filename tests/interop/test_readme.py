"""README.md works as written: every fenced code block of the README is run or checked here.

* Each block must match exactly one entry of ``BLOCKS`` (by language and a marker line); a block
  added to the README later matches none and fails ``test_every_readme_block_is_handled`` until it
  is given an entry here.
* Python blocks run in order, as a reader would paste them, with this venv's python against a
  fresh broker (this module's ``broker``): the quick start must print the 10 greetings it
  produced, the share-group example must print all 10 as well. The README's bootstrap
  ``127.0.0.1:9092`` is replaced by the test broker's address (the only change made to a block).
  Validated against Apache Kafka 4.4 (INTEROP_TARGET=kafka) and Shoal.
* The ``cargo run ... serve`` block: the package it names builds the ``shoal`` binary, and that
  binary started with exactly the block's arguments (plus ``--listen`` on a free port instead of
  the default 127.0.0.1:9092, which the default is checked to be) serves from ``./data`` as
  node 1 with the internal topics created.
* ``scripts/test.sh`` cannot run here (it runs this suite): it must exist, be executable and be
  what CI (``.ci/run``) runs.
* The layout block is not runnable: every path it lists must exist.
* The example pipelines block runs each command as written against a fresh ``shoal serve``, the
  ``cargo run --release ... --example NAME -- ARGS`` lines as the debug example binaries the
  workspace's tests built (``target/debug/examples/NAME``, ``CLIENT_EXAMPLES`` overrides the
  dir), with the README's bootstrap replaced; the pipelines run until their stderr shows all
  1000 records handled, then are killed, and what they wrote is read back read_committed.
* The verify block: every flag it passes is one ``shoal verify --help`` lists, and the example
  it builds is the worker verify runs; the run itself, at the same size, is
  ``crates/cli/tests/verify.rs``'s.
* The simulator block runs each line with the release ``shoal-sim`` binary
  (``scripts/test.sh`` builds it; ``SHOAL_SIM_BIN`` overrides): the seed runs pass, the
  ``--trace`` run ends with the seed's summary, the ``--bug`` run fails with a shortest failing
  prefix.

Also checked where cheap: the flags/env table against ``shoal serve --help`` and against the
broker's behaviour (env and flags, the precedence defaults < file < environment < flags, the
metrics endpoint, one broker per data dir, SIGINT/SIGTERM exit cleanly, the lazy-flush flags),
and the pinned confluent-kafka version. The checks of Shoal's own CLI are skipped with
INTEROP_TARGET=kafka: they describe the ``shoal`` binary, which the reference broker is not.
"""

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import REPO, TARGET, _die_with_parent, _free_port, _tcp_ok
from iutil import admin

README = REPO / "README.md"
README_BOOTSTRAP = "127.0.0.1:9092"
BLOCK_TIMEOUT = 90  # seconds for one python block (each poll in them waits up to 10 s)

# (language, a line the block contains, what is done with it). Exactly one block per entry.
BLOCKS = [
    ("sh", "cargo run --release -p shoal-cli -- serve", "serve: run by test_serve_block"),
    ("sh", "scripts/test.sh", "the whole suite (runs this file): test_test_sh_block"),
    ("python", "from confluent_kafka import Producer, Consumer", "run: test_python_blocks"),
    ("python", "from confluent_kafka import ShareConsumer", "run: test_python_blocks"),
    ("", "crates/protocol   wire codec", "directory layout, not runnable: test_layout_block"),
    ("sh", "cargo run --release -p shoal-client --example exactly_once_pipeline",
     "run: test_example_pipelines_block"),
    ("sh", "shoal serve --set transaction.two.phase.commit.enable=true",
     "the two-phase checkpointed source, run (with a kill) by crates/client/tests/examples.rs"),
    ("sh", "cargo run --release -p shoal-cli -- verify",
     "checked: test_verify_block (run by crates/cli/tests/verify.rs)"),
    ("sh", "cargo run --release -p shoal-sim", "run: test_simulator_block"),
    ("sh", "etcd --data-dir /tmp/shoal-etcd", "run: test_cluster_block"),
    ("sh", "pip install ./crates/python",
     "run by crates/python/tests/test_readme.py (it needs the package built)"),
]

shoal_only = pytest.mark.skipif(TARGET != "shoal",
                                reason="checks the shoal binary's CLI, not a broker behaviour")


def readme_blocks():
    """[(language, body)] of every fenced block, in README order."""
    text = README.read_text()
    return [(m.group(1), m.group(2))
            for m in re.finditer(r"^```([\w+-]*)[ \t]*\n(.*?)^```[ \t]*$", text, re.M | re.S)]


def _matches(entry, lang, body):
    e_lang, marker, _ = entry
    return e_lang == lang and any(line.strip().startswith(marker) for line in body.splitlines())


def test_every_readme_block_is_handled():
    blocks = readme_blocks()
    assert blocks, "no code block found in README.md"
    for lang, body in blocks:
        hits = [e for e in BLOCKS if _matches(e, lang, body)]
        assert len(hits) == 1, (f"README block ```{lang} is handled by {len(hits)} entries of "
                                f"BLOCKS (want 1); give it one in test_readme.py:\n{body}")
    for entry in BLOCKS:
        n = sum(_matches(entry, lang, body) for lang, body in blocks)
        assert n == 1, f"BLOCKS entry {entry} matches {n} README blocks (want 1)"


def _entry_body(entry):
    (body,) = [b for lang, b in readme_blocks() if _matches(entry, lang, b)]
    return body


def _body(marker):
    (entry,) = [e for e in BLOCKS if e[1] == marker]
    return _entry_body(entry)


def run_python_block(body, bootstrap, tmp_path, name):
    assert README_BOOTSTRAP in body, "the block no longer names the README's bootstrap"
    script = tmp_path / f"{name}.py"
    script.write_text(body.replace(README_BOOTSTRAP, bootstrap))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=BLOCK_TIMEOUT, cwd=tmp_path)
    assert out.returncode == 0, f"{name} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}"
    return out.stdout.splitlines()


def test_python_blocks(broker, tmp_path):
    """The quick start prints the 10 greetings; the share-group example, run after it on the same
    fresh broker, gets all 10 too (it sets share.auto.offset.reset=earliest before subscribing)."""
    lines = run_python_block(_body("from confluent_kafka import Producer, Consumer"),
                             broker.bootstrap, tmp_path, "quick_start")
    assert lines == [f"0 {i} b'hello {i}'" for i in range(10)], lines

    lines = run_python_block(_body("from confluent_kafka import ShareConsumer"),
                             broker.bootstrap, tmp_path, "share_quick_start")
    assert sorted(lines, key=lambda s: int(s.split()[0])) == \
        [f"{i} b'hello {i}'" for i in range(10)], lines


def test_pinned_client_version():
    """The quick start's `pip install` pin is the version this suite runs."""
    (pin,) = re.findall(r"confluent-kafka==([\d.]+)", _body("from confluent_kafka import Producer, Consumer"))
    reqs = (REPO / "tests" / "interop" / "requirements.txt").read_text()
    assert f"confluent-kafka=={pin}" in reqs, reqs
    from importlib.metadata import version
    assert version("confluent-kafka") == pin


def test_test_sh_block():
    body = _body("scripts/test.sh")
    assert body.strip() == "scripts/test.sh"
    script = REPO / "scripts" / "test.sh"
    assert script.is_file() and os.access(script, os.X_OK)
    ci = (REPO / ".ci" / "run").read_text()
    assert re.search(r"^\s*(exec\s+)?(bash\s+)?scripts/test\.sh\b", ci, re.M), ci
    text = script.read_text()
    # what the README says it runs
    for step in ("cargo fmt", "cargo clippy", "cargo test", "cargo build --release",
                 "tests/interop/run.sh", "fuzz"):
        assert step in text, step


def test_layout_block():
    for line in _body("crates/protocol   wire codec").splitlines():
        if line and not line.startswith(" "):
            path = line.split()[0]
            assert (REPO / path).exists(), f"README layout names {path}, which does not exist"


# ------------------------------------------------------------------ the shoal binary
def shoal_bin():
    return os.environ.get("SHOAL_BIN") or str(REPO / "target" / "release" / "shoal")


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHOAL_")}
    env.update(extra)
    return env


class Serve:
    """`shoal serve ARGS` in `cwd` with `env`; always killed on exit."""

    def __init__(self, args, cwd, env, port):
        self.port = port
        self.log = open(cwd / f"serve-{port}.log", "wb")
        self.proc = subprocess.Popen([shoal_bin(), "serve", *args], cwd=cwd, env=env,
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True,
                                     preexec_fn=_die_with_parent)

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.port}"

    def log_text(self, tail=4000):
        if not self.log.closed:
            self.log.flush()
        with open(self.log.name, "rb") as f:
            text = f.read().decode("utf-8", "replace")
        return text if tail is None else text[-tail:]

    def wait_ready(self, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"shoal exited early:\n{self.log_text()}"
            if _tcp_ok(self.port):
                md = admin(self).list_topics(timeout=5)
                if md.brokers:
                    return md
            time.sleep(0.1)
        raise AssertionError(f"shoal not ready on {self.port}:\n{self.log_text()}")

    def stop(self, signo=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(signo)
        try:
            return self.proc.wait(timeout=30)
        finally:
            self.kill()

    def kill(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        self.log.close()


def serve_help():
    return subprocess.run([shoal_bin(), "serve", "--help"], capture_output=True, text=True,
                          timeout=30, check=True).stdout


@shoal_only
def test_serve_block(tmp_path):
    """`cargo run --release -p shoal-cli -- serve`: shoal-cli builds `shoal`, whose serve with no
    option uses ./data, 127.0.0.1:9092 and node id 1 and creates the internal topics."""
    cmd = shlex.split(_body("cargo run --release -p shoal-cli -- serve").strip())
    assert cmd[:3] == ["cargo", "run", "--release"]
    pkg = cmd[cmd.index("-p") + 1]
    args = cmd[cmd.index("--") + 1:]
    assert args == ["serve"]
    cli_toml = (REPO / "crates" / "cli" / "Cargo.toml").read_text()
    assert re.search(rf'^name = "{re.escape(pkg)}"', cli_toml, re.M), cli_toml
    assert re.search(r'^\[\[bin\]\]\s*\nname = "shoal"', cli_toml, re.M), cli_toml
    assert re.search(rf"--listen <LISTEN>.*\[default: {re.escape(README_BOOTSTRAP)}\]",
                     serve_help())
    assert re.search(r"--data-dir <DATA_DIR>.*\[default: \./data\]", serve_help())

    port = _free_port()
    s = Serve(args[1:] + ["--listen", f"127.0.0.1:{port}"], tmp_path, clean_env(), port)
    try:
        md = s.wait_ready()
        assert [b.id for b in md.brokers.values()] == [1]
        assert {"__consumer_offsets", "__transaction_state"} <= set(md.topics)
        assert (tmp_path / "data").is_dir()
        assert s.stop(signal.SIGINT) == 0, s.log_text()
    finally:
        s.kill()


def flag_table():
    """[(flag, env)] rows of the README's options table."""
    rows = re.findall(r"^\| `(--[\w-]+)[^`]*` \| `([A-Z_<>]+)` \|", README.read_text(), re.M)
    assert len(rows) >= 5, rows
    return rows


@shoal_only
def test_flags_table_matches_help():
    help_text = serve_help()
    for flag, env in flag_table():
        (line,) = [l for l in help_text.splitlines() if l.strip().startswith(flag + " ")]
        if "<" not in env:
            assert f"[env: {env}=" in line, (flag, env, line)


def auto_topic_partitions(bootstrap, topic):
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap})
    p.produce(topic, b"x")
    assert p.flush(30) == 0
    md = admin(type("B", (), {"bootstrap": bootstrap})).list_topics(topic=topic, timeout=10)
    return len(md.topics[topic].partitions)


@shoal_only
def test_config_sources_and_precedence(tmp_path):
    """defaults < file < environment < flags, with every option given once by env and once by
    flag; SHOAL_LOG sets the log filter; --metrics serves Prometheus text; a second broker on the same data dir refuses to
    start; SIGTERM exits 0; Kafka's lazy flushing flags are accepted."""
    props = tmp_path / "broker.properties"
    props.write_text("num.partitions=2\n")
    data = tmp_path / "data"

    # 1. everything from the environment: file says 2
    port = _free_port()
    s = Serve([], tmp_path, clean_env(SHOAL_DATA_DIR=str(data), SHOAL_LISTEN=f"127.0.0.1:{port}",
                                     SHOAL_CONFIG=str(props), SHOAL_LOG="warn"),
              port)
    try:
        s.wait_ready()
        assert auto_topic_partitions(s.bootstrap, "from-file") == 2
        assert any(data.iterdir())
        assert s.stop() == 0, s.log_text()
        assert "INFO" not in s.log_text(tail=None), "SHOAL_LOG=warn still logged info lines"
    finally:
        s.kill()

    # 2. flags for the options, SHOAL_<KEY> beats the file
    port = _free_port()
    s = Serve(["--data-dir", str(data), "--listen", f"127.0.0.1:{port}", "--config", str(props)],
              tmp_path, clean_env(SHOAL_NUM_PARTITIONS="3"), port)
    try:
        s.wait_ready()
        assert auto_topic_partitions(s.bootstrap, "from-env") == 3
        assert s.stop() == 0, s.log_text()
        assert "INFO" in s.log_text(tail=None), "no info line with the default log filter"
    finally:
        s.kill()

    # 3. --set beats the environment; metrics; lazy flushing; one broker per data dir
    port, mport = _free_port(), _free_port()
    s = Serve(["--data-dir", str(data), "--listen", f"127.0.0.1:{port}", "--config", str(props),
               "--metrics", f"127.0.0.1:{mport}", "--set", "num.partitions=4",
               "--set", "log.flush.interval.messages=9223372036854775807",
               "--set", "log.flush.interval.ms=1000"],
              tmp_path, clean_env(SHOAL_NUM_PARTITIONS="3"), port)
    try:
        s.wait_ready()
        assert auto_topic_partitions(s.bootstrap, "from-flag") == 4
        with urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=10) as r:
            assert r.status == 200
            assert "# TYPE" in r.read().decode()
        port2 = _free_port()
        second = Serve(["--data-dir", str(data), "--listen", f"127.0.0.1:{port2}"], tmp_path,
                       clean_env(), port2)
        try:
            rc = second.proc.wait(timeout=30)
            assert rc != 0, "a second broker started on the same data dir"
        finally:
            second.kill()
        assert s.stop() == 0, s.log_text()
    finally:
        s.kill()


# ------------------------------------------------------------------ the client's examples
def _commands(body):
    """The block's commands, continuation lines joined, comments dropped."""
    out, cur = [], ""
    for line in body.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        out.append(shlex.split(cur + line))
        cur = ""
    return out


def _example_bin(name):
    d = os.environ.get("CLIENT_EXAMPLES") or str(REPO / "target" / "debug" / "examples")
    path = os.path.join(d, name)
    if not os.path.exists(path):
        subprocess.run(["cargo", "build", "--quiet", "--locked", "-p", "shoal-client",
                        "--example", name], cwd=REPO, check=True, timeout=900)
    return path


def _run_until(cmd, done, timeout=120):
    """Runs `cmd` until `done(stderr_lines)` holds, then kills it. Returns the stderr lines."""
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         start_new_session=True, preexec_fn=_die_with_parent)
    lines, buf = [], b""
    deadline = time.monotonic() + timeout
    try:
        os.set_blocking(p.stderr.fileno(), False)
        while time.monotonic() < deadline and not done(lines):
            assert p.poll() is None, f"{cmd[0]} exited {p.returncode}: {lines[-20:]}"
            chunk = p.stderr.read()
            if chunk:
                buf += chunk
                *complete, buf = buf.split(b"\n")
                lines.extend(l.decode("utf-8", "replace") for l in complete)
            else:
                time.sleep(0.1)
        assert done(lines), f"{cmd[0]} did not finish in {timeout}s: {lines[-20:]}"
        return lines
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=30)


def _total(lines, pattern):
    return sum(int(m.group(1)) for l in lines for m in [re.search(pattern, l)] if m)


@shoal_only
def test_example_pipelines_block(tmp_path):
    """The produce example writes 1000 records to `orders`; the exactly-once pipeline commits
    all 1000 transformed (`processed:` + value) to `orders-processed`; the checkpointed source
    acknowledges all 1000; the dead-letter example (every 1 KiB value is a dead letter)
    rejects all 1000, the broker's dead letters of them committed to `dlq.orders`, and
    writes none to `orders-doubled`. TxnShareAcknowledge is
    Shoal's (Kafka 4.4 has none), so this runs against Shoal only."""
    from iutil import consume_confluent
    commands = _commands(_entry_body(("sh", "cargo run --release -p shoal-client --example exactly_once_pipeline", "")))
    names = [c[c.index("--example") + 1] for c in commands]
    assert names == ["produce", "exactly_once_pipeline", "checkpointed_source",
                     "atomic_dead_letter"], names
    port = _free_port()
    s = Serve(["--data-dir", str(tmp_path / "data"), "--listen", f"127.0.0.1:{port}"],
              tmp_path, clean_env(), port)
    try:
        s.wait_ready()
        runs = []
        for c in commands:
            assert c[:3] == ["cargo", "run", "--release"] and c[c.index("-p") + 1] == "shoal-client"
            args = [a.replace(README_BOOTSTRAP, s.bootstrap) for a in c[c.index("--") + 1:]]
            runs.append([_example_bin(c[c.index("--example") + 1])] + args)
        out = subprocess.run(runs[0], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert "produced 1000 records" in out.stdout, out.stdout

        _run_until(runs[1], lambda ls: any("(total 1000)" in l for l in ls))
        _run_until(runs[2], lambda ls: any("(total 1000," in l for l in ls))
        _run_until(runs[3], lambda ls: _total(ls, r"(\d+) dead-lettered") >= 1000)

        committed = {"isolation.level": "read_committed"}
        processed = consume_confluent(s, "orders-processed", 1, 1000, extra=committed)
        assert len(processed) == 1000
        assert all(r["value"].startswith(b"processed:") for r in processed)
        dead = consume_confluent(s, "dlq.orders", 1, 1000, extra=committed)
        # each `orders` record once (the produce example writes partition 0 of one)
        sources = sorted((dict(r["headers"])["__dlq.errors.topic"],
                          int(dict(r["headers"])["__dlq.errors.offset"])) for r in dead)
        assert sources == [(b"orders", o) for o in range(1000)], sources[:5]
        assert consume_confluent(s, "orders-doubled", 1, 1, timeout=3, extra=committed) == []
    finally:
        s.kill()


@shoal_only
def test_verify_block():
    """`cargo build ... --example exactly_once_pipeline` builds the worker `shoal verify` runs by
    default, and every flag of the verify line is one verify takes."""
    build, run = _commands(_entry_body(("sh", "cargo run --release -p shoal-cli -- verify", "")))
    assert build[:3] == ["cargo", "build", "--release"]
    assert build[build.index("--example") + 1] == "exactly_once_pipeline"
    args = run[run.index("--") + 1:]
    assert args[0] == "verify"
    help_text = subprocess.run([shoal_bin(), "verify", "--help"], capture_output=True,
                               text=True, timeout=30, check=True).stdout
    assert "exactly_once_pipeline" in help_text, help_text
    for flag in [a for a in args[1:] if a.startswith("--")]:
        assert re.search(rf"^\s*{re.escape(flag)}\b", help_text, re.M), (flag, help_text)


# ------------------------------------------------------------------ the simulator
def shoal_sim_bin():
    path = os.environ.get("SHOAL_SIM_BIN") or str(REPO / "target" / "release" / "shoal-sim")
    if not os.path.exists(path):
        subprocess.run(["cargo", "build", "--release", "--locked", "-p", "shoal-sim"],
                       cwd=REPO, check=True, timeout=900)
    return path


@shoal_only
def test_simulator_block():
    """Every line of the simulator block, as written, with `cargo run --release -p shoal-sim --`
    standing for the release binary and `| tail` for reading the end of the output."""
    lines = [line for line in _body("cargo run --release -p shoal-sim").splitlines() if line]
    prefix = ["cargo", "run", "--release", "-p", "shoal-sim", "--"]
    assert len(lines) == 3, lines
    for line in lines:
        command, _, pipe = line.partition("|")
        words = shlex.split(command)
        assert words[:len(prefix)] == prefix, line
        args = words[len(prefix):]
        out = subprocess.run([shoal_sim_bin(), *args], capture_output=True, text=True,
                             timeout=300)
        if "--bug" in args:
            assert out.returncode == 1, (line, out.stdout[-2000:], out.stderr[-2000:])
            assert "FAILED" in out.stdout, out.stdout[-2000:]
            assert "shortest failing prefix" in out.stdout, out.stdout[-2000:]
        elif "--trace" in args:
            assert pipe.strip() == "tail", line
            assert out.returncode == 0, (line, out.stderr[-2000:])
            last = out.stdout.splitlines()[-2:]
            assert any(l.startswith("seed 42: ok") for l in last), last
        else:
            assert out.returncode == 0, (line, out.stdout[-2000:], out.stderr[-2000:])
            assert "1000 seeds ok" in out.stdout, out.stdout[-2000:]


def _port_for_weed():
    """A free port whose + 10000 (weed's default gRPC port for each HTTP port) is free too: a
    volume server whose gRPC port is taken never registers, and every upload then times out."""
    import socket
    while True:
        port = _free_port()
        if port + 10000 > 65535:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port


def _rig_binary(var, name):
    """etcd or weed as tests/cluster/rig.sh installs them (scripts/test.sh exports the paths)."""
    path = os.environ.get(var) or shutil.which(name)
    assert path, f"{name} not found: run tests/cluster/rig.sh install and eval its env"
    return path


@shoal_only
def test_cluster_block(tmp_path):
    """The three-broker cluster block runs as written with these changes only: every port it
    names moved to a free one (and etcd's peer port, which it leaves at its default, too),
    `/tmp/` paths into the test's directory, `etcd`, `weed` and `target/release/shoal` the
    binaries under test, the `cargo build` line (checked) not run. `shoal cluster status` must
    list the three brokers, and a stock client bootstrapping at all three produces and reads
    back through the cluster."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    body = _body("etcd --data-dir /tmp/shoal-etcd")
    assert "cargo build --release -p shoal-cli" in body
    script = body.replace("cargo build --release -p shoal-cli", "true")
    ports = sorted(set(re.findall(r"(?<=[:=])(\d{4})\b", script)))
    assert {"2379", "8333", "9333"} <= set(ports), ports
    for port in ports:
        script = re.sub(rf"(?<=[:=]){port}\b", str(_port_for_weed()), script)
    brokers = [_free_port() for _ in range(3)]
    assert "127.0.0.1:909$n" in script
    script = script.replace("127.0.0.1:909$n", "127.0.0.1:${BROKER_PORTS[$n]}")
    peer = _free_port()
    script = script.replace(
        "etcd --data-dir",
        f"{_rig_binary('SHOAL_ETCD_BIN', 'etcd')} --listen-peer-urls http://127.0.0.1:{peer} "
        f"--initial-advertise-peer-urls http://127.0.0.1:{peer} "
        f"--initial-cluster default=http://127.0.0.1:{peer} --data-dir", 1)
    script = re.sub(r"^weed ", _rig_binary("SHOAL_WEED_BIN", "weed") + " ", script, flags=re.M)
    script = script.replace("target/release/shoal", shoal_bin())
    script = script.replace("/tmp/", f"{tmp_path}/")
    script = f"set -e\nBROKER_PORTS=(x {' '.join(map(str, brokers))})\n" + script
    (tmp_path / "cluster.sh").write_text(script)
    out_path = tmp_path / "cluster.out"
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(["bash", str(tmp_path / "cluster.sh")], cwd=tmp_path,
                                env=clean_env(), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=_die_with_parent)
    try:
        code = proc.wait(timeout=120)
        text = out_path.read_text(errors="replace")
        assert code == 0, text
        assert "brokers: 3" in text, text
        bootstrap = ",".join(f"127.0.0.1:{p}" for p in brokers)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(10):
            producer.produce("readme-cluster", f"m{i}".encode())
        assert producer.flush(60) == 0
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "readme",
                             "enable.auto.commit": False})
        md = consumer.list_topics("readme-cluster", timeout=10)
        consumer.assign([TopicPartition("readme-cluster", p, 0)
                         for p in md.topics["readme-cluster"].partitions])
        got, deadline = [], time.monotonic() + 60
        while len(got) < 10 and time.monotonic() < deadline:
            m = consumer.poll(1)
            if m is not None and not m.error():
                got.append(m.value().decode())
        consumer.close()
        assert sorted(got) == sorted(f"m{i}" for i in range(10)), got
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)
