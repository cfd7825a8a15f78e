"""The Python example takes the Rust example's flags and says the same on a mistake: for
each bad command line both exit 1 with the same message (the Rust one from
`target/{release,debug}/examples/exactly_once_pipeline`, which `cargo test` and
`cargo build -p shoal-client --example exactly_once_pipeline` leave; its backtrace off)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

EXAMPLE = REPO / "crates" / "python" / "examples" / "exactly_once_pipeline.py"
FULL = ["--bootstrap", "127.0.0.1:9", "--input", "i", "--output", "o", "--group", "g",
        "--transactional-id", "t"]
BAD = [
    [],
    ["--bootstrap", "127.0.0.1:9"],
    ["foo"],
    ["--bootstrap"],
    FULL + ["--records-per-txn", "0"],
    FULL + ["--records-per-txn", "x"],
]


def rust_example():
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    for profile in ("release", "debug"):
        path = target / profile / "examples" / "exactly_once_pipeline"
        if path.exists():
            return path
    pytest.skip(f"no Rust exactly_once_pipeline under {target}")


def said(argv):
    env = dict(os.environ, RUST_BACKTRACE="0", RUST_LIB_BACKTRACE="0")
    run = subprocess.run(argv, capture_output=True, text=True, timeout=30, env=env)
    # anyhow adds the cause chain ("Caused by: ...") after a blank line: the message is
    # what comes before it.
    return run.returncode, run.stderr.split("\n\n")[0].strip()


@pytest.mark.parametrize("args", BAD, ids=lambda a: " ".join(a[-2:]) or "none")
def test_the_same_message_for_a_bad_command_line(args):
    rust = said([str(rust_example())] + args)
    python = said([sys.executable, str(EXAMPLE)] + args)
    assert rust[0] == 1 and rust[1].startswith("Error: "), rust
    assert python == rust
