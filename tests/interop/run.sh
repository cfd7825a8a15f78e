#!/usr/bin/env bash
# Runs the real-client interop suite.
#   tests/interop/run.sh [pytest args...]
#   tests/interop/run.sh --venv-only    only create / update the venv (tests/interop/.venv)
# Target: INTEROP_TARGET=shoal (default; SHOAL_BIN, default <repo>/target/release/shoal)
#         INTEROP_TARGET=kafka (real Apache Kafka from Maven Central via kafka_ref/fetch.sh)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="$here/.venv"
py="${PYTHON:-python3}"

apt_install() {  # best effort, only where we are root on Debian/Ubuntu
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "run.sh: installing $* with apt-get" >&2
    apt-get install -y -qq "$@" >/dev/null 2>&1 ||
      { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq "$@" >/dev/null 2>&1; }
  else
    return 1
  fi
}

if [ ! -x "$venv/bin/python" ]; then
  if ! "$py" -m venv "$venv" >/dev/null 2>&1; then
    rm -rf "$venv"
    pyver="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    # Debian's python3 needs python3-venv (ensurepip) for `python3 -m venv`
    apt_install python3-venv "python${pyver}-venv" || apt_install python3-venv ||
      { echo "run.sh: '$py -m venv' failed; install python3-venv" >&2; exit 1; }
    "$py" -m venv "$venv"
  fi
fi
# test_sasl_ssl.py makes its test certificates with the openssl command
command -v openssl >/dev/null || apt_install openssl ||
  echo "run.sh: openssl not found; the TLS tests will fail (install openssl)" >&2
stamp="$venv/.req-$(sha256sum "$here/requirements.txt" | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$here/requirements.txt"
  touch "$stamp"
fi
# `run.sh --venv-only`: just the venv (crates/python/tests/run.sh builds shoal-queues in it).
if [ "${1:-}" = "--venv-only" ]; then
  exit 0
fi
# The Kafka jars serve both the reference broker and the Java-client tests.
if [ -z "${KAFKA_LIBS:-}" ]; then
  KAFKA_LIBS="$("$here/kafka_ref/fetch.sh")"
  export KAFKA_LIBS
fi
cd "$here"
exec "$venv/bin/python" -m pytest -q "$@"
