"""The README's "From Python" block works as written: its `pip install` is what
tests/run.sh did before this suite, and its commands run from the repository's root against
this suite's broker (the README's bootstrap replaced by it, `python` being this
interpreter) until the pipeline has committed all 1000 records, read back read_committed."""

import re
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
    """The commands of the README's block holding the pip line (continuations joined)."""
    text = (REPO / "README.md").read_text()
    (body,) = [m.group(1) for m in re.finditer(r"^```sh\n(.*?)^```$", text, re.M | re.S)
               if PIP in m.group(1)]
    return [c.strip() for c in body.replace("\\\n", " ").splitlines() if c.strip()]


def test_readme_python_block(broker):
    commands = block()
    assert commands[0] == PIP  # what tests/run.sh installs, from the same directory
    run = []
    for command in commands[1:]:
        assert README_BOOTSTRAP in command, command
        argv = shlex.split(command.replace(README_BOOTSTRAP, broker.bootstrap))
        assert argv[0] == "python", command
        run.append([sys.executable] + argv[1:])
    produce, pipeline = run
    subprocess.run(produce, cwd=REPO, check=True, timeout=60)
    proc = subprocess.Popen(pipeline, cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        outputs = committed_values(broker, "orders-processed", 1000)
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=30)
    assert sorted(outputs) == sorted(f"processed:order {i}" for i in range(1000)), stderr
    assert "(total 1000)" in stderr, stderr
