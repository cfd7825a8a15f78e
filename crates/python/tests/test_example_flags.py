"""The Python examples take the Rust examples' flags and say the same on a mistake: for
each bad command line both exit 1 with the same message (the Rust one from
`target/{release,debug}/examples/NAME`, which `cargo test` and
`cargo build -p shoal-client --example NAME` leave; its backtrace off)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

EXAMPLES = REPO / "crates" / "python" / "examples"
# Each example's full command line and its number flag.
FULL = {
    "exactly_once_pipeline": (["--bootstrap", "127.0.0.1:9", "--input", "i", "--output", "o",
                               "--group", "g", "--transactional-id", "t"], "--records-per-txn"),
    "checkpointed_source": (["--bootstrap", "127.0.0.1:9", "--input", "i", "--group", "g",
                             "--transactional-id", "t"], "--checkpoint-ms"),
    "atomic_dead_letter": (["--bootstrap", "127.0.0.1:9", "--input", "i", "--output", "o",
                            "--dead-letter", "d", "--group", "g", "--transactional-id", "t"],
                           "--records-per-txn"),
}


def bad(name):
    full, number = FULL[name]
    return [[], ["--bootstrap", "127.0.0.1:9"], ["foo"], ["--bootstrap"],
            full[:-2], full + [number, "0"], full + [number, "x"], full + [number, "-1"]]


CASES = [(name, args) for name in FULL for args in bad(name)]


def rust_example(name):
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    for profile in ("release", "debug"):
        path = target / profile / "examples" / name
        if path.exists():
            return path
    pytest.skip(f"no Rust {name} under {target}")


def said(argv):
    env = dict(os.environ, RUST_BACKTRACE="0", RUST_LIB_BACKTRACE="0")
    run = subprocess.run(argv, capture_output=True, text=True, timeout=30, env=env)
    # anyhow adds the cause chain ("Caused by: ...") after a blank line: the message is
    # what comes before it.
    return run.returncode, run.stderr.split("\n\n")[0].strip()


@pytest.mark.parametrize("name,args", CASES,
                         ids=[f"{n}:{' '.join(a[-2:]) or 'none'}" for n, a in CASES])
def test_the_same_message_for_a_bad_command_line(name, args):
    rust = said([str(rust_example(name))] + args)
    python = said([sys.executable, str(EXAMPLES / f"{name}.py")] + args)
    assert rust[0] == 1 and rust[1].startswith("Error: "), rust
    assert python == rust
