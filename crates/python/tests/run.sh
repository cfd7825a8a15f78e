#!/usr/bin/env bash
# Builds shoal-queues (crates/python) into the interop suite's venv with pip (maturin, the
# build backend, comes from PyPI as pyproject.toml pins it) and runs its pytest suite
# against a Shoal broker (SHOAL_BIN, default <repo>/target/release/shoal).
#   crates/python/tests/run.sh [pytest args...]
# The build uses the workspace's target directory (CARGO_TARGET_DIR, default <repo>/target),
# so the crates `cargo build --release -p shoal-cli` compiled are reused.
set -euo pipefail
pkg="$(cd "$(dirname "$0")/.." && pwd)"
repo="$(cd "$pkg/../.." && pwd)"
venv="$repo/tests/interop/.venv"
"$repo/tests/interop/run.sh" --venv-only
CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}" \
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps \
  "$pkg"
cd "$pkg"
exec "$venv/bin/python" -m pytest -q "$@"
