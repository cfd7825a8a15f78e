"""`shoal verify` with the Python example as its workers: a bounded run (a few SIGKILLs of
the workers and the broker) proves every input's output committed exactly once and every
input acknowledged. The soak (100+ crashes) is in docs/benchmarks.md."""

import os
import subprocess
import sys

import pytest
from conftest import REPO

pytestmark = pytest.mark.shoal_only
EXAMPLE = REPO / "crates" / "python" / "examples" / "exactly_once_pipeline.py"
RECORDS, CRASHES = 4000, 4


@pytest.mark.timeout(200)
def test_verify_with_python_workers():
    shoal = os.environ.get("SHOAL_BIN") or str(REPO / "target" / "release" / "shoal")
    run = subprocess.run(
        [shoal, "verify", "--records", str(RECORDS), "--crashes", str(CRASHES),
         "--workers", "2", "--crash-interval-ms-max", "800", "--settle-secs", "90",
         "--worker-bin", str(EXAMPLE), "--worker-python", sys.executable]
        + (["--seed", os.environ["SHOAL_VERIFY_SEED"]] if "SHOAL_VERIFY_SEED" in os.environ
           else []),
        capture_output=True, text=True, timeout=180)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert f"worker {sys.executable} {EXAMPLE}" in out, out
    assert f"{RECORDS} distinct inputs, 0 duplicated, 0 missing, 0 stray" in out, out
    assert f"crashes survived: {CRASHES} " in out, out
    assert "TX_PENDING records (broker metrics): 0" in out, out
    assert "OK: every input record's output committed exactly once and acknowledged" in out
