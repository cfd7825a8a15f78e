"""The README's "From Python" block works as written: its `pip install` is what
tests/run.sh did before this suite, and its commands run from the repository's root against
this suite's broker (the README's bootstrap replaced by it, `python` being this
interpreter): the pipeline until it has committed all 1000 records, read back
read_committed; the checkpointed source until a checkpoint covers all 1000; the dead-letter
example until it has dead-lettered all 1000 (`order N` is no number), read back
read_committed, with nothing doubled."""

import re
import threading
import time
import shlex
import subprocess
import sys

import pytest
from conftest import REPO
from test_exactly_once import committed_values

pytestmark = pytest.mark.shoal_only  # the pipeline needs KIP-1289
README_BOOTSTRAP = "127.0.0.1:9092"
PIP = "pip install ./crates/python"


def block():
    """The commands of the README's block holding the pip line (continuations joined,
    comments dropped)."""
    text = (REPO / "README.md").read_text()
    (body,) = [m.group(1) for m in re.finditer(r"^```sh\n(.*?)^```$", text, re.M | re.S)
               if PIP in m.group(1)]
    lines = [c.strip() for c in body.replace("\\\n", " ").splitlines()]
    return [c for c in lines if c and not c.startswith("#")]


def run_until(argv, done, timeout=60.0):
    """Runs `argv` from the repository's root until `done(stderr lines)`, then stops it;
    returns the lines."""
    proc = subprocess.Popen(argv, cwd=REPO, stderr=subprocess.PIPE, text=True)
    lines = []
    threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True).start()
    deadline = time.monotonic() + timeout
    try:
        while not done(list(lines)):
            assert time.monotonic() < deadline and proc.poll() is None, lines[-20:]
            time.sleep(0.05)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return lines


def test_readme_python_block(broker):
    commands = block()
    assert commands[0] == PIP  # what tests/run.sh installs, from the same directory
    run = []
    for command in commands[1:]:
        assert README_BOOTSTRAP in command, command
        argv = shlex.split(command.replace(README_BOOTSTRAP, broker.bootstrap))
        assert argv[0] == "python", command
        run.append([sys.executable] + argv[1:])
    produce, pipeline, source, dead_letter = run
    subprocess.run(produce, cwd=REPO, check=True, timeout=60)
    proc = subprocess.Popen(pipeline, cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        outputs = committed_values(broker, "orders-processed", 1000)
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=30)
    assert sorted(outputs) == sorted(f"processed:order {i}" for i in range(1000)), stderr
    assert "(total 1000)" in stderr, stderr

    run_until(source, lambda lines: any("(total 1000, sum 0)" in line for line in lines))

    def dead_lettered(lines):
        return sum(int(m.group(1)) for line in lines
                   for m in [re.search(r"(\d+) dead-lettered", line)] if m)

    lines = run_until(dead_letter, lambda lines: dead_lettered(lines) >= 1000)
    assert dead_lettered(lines) == 1000, lines
    assert all("(0 accepted," in line for line in lines
               if line.startswith("committed ")), lines
    assert sorted(committed_values(broker, "dlq.orders", 1000)) == sorted(
        f"order {i}" for i in range(1000))
    assert committed_values(broker, "orders-doubled", 0, timeout=3) == []
