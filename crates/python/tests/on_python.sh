#!/usr/bin/env bash
# Builds the abi3 wheel of shoal-queues once (cp39-abi3) and runs its pytest suite on other
# CPython interpreters, each in a venv of its own under <repo>/target/python-venvs:
#   crates/python/tests/on_python.sh /path/to/python3.9 /path/to/python3.10 [-- pytest args]
# e.g. with pyenv: on_python.sh ~/.pyenv/versions/3.9.*/bin/python ~/.pyenv/versions/3.10.*/bin/python
# The test dependencies are the suite's (pytest, pytest-timeout, confluent-kafka 2.16.1) at
# versions that still support the interpreter; the broker is SHOAL_BIN's, as in run.sh.
set -euo pipefail
pkg="$(cd "$(dirname "$0")/.." && pwd)"
repo="$(cd "$pkg/../.." && pwd)"
pythons=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do pythons+=("$1"); shift; done
[ "${1:-}" = -- ] && shift
[ ${#pythons[@]} -gt 0 ] || { echo "usage: $0 PYTHON... [-- pytest args]" >&2; exit 2; }
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}"
wheels="$CARGO_TARGET_DIR/python-wheels"
venvs="$CARGO_TARGET_DIR/python-venvs"
rm -rf "$wheels"
"${pythons[0]}" -m pip wheel -q --disable-pip-version-check --no-deps "$pkg" -w "$wheels"
wheel="$(ls "$wheels"/shoal_queues-*-cp39-abi3-*.whl)"
status=0
for py in "${pythons[@]}"; do
  version="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  venv="$venvs/$version"
  [ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$wheel"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check pytest pytest-timeout==2.4.0 \
    confluent-kafka==2.16.1
  echo "== CPython $version: $(basename "$wheel")"
  (cd "$pkg" && "$venv/bin/python" -m pytest -q "$@") || status=1
done
exit $status
