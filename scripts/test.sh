#!/usr/bin/env bash
# Runs every Shoal test on a fresh machine: formatting and lints, the Rust unit, property and
# integration tests (the cluster crate's against etcd and an S3 server installed by
# tests/cluster/rig.sh), a fixed set of simulator seeds, the real-client interop suite (Python
# venv created on first run), the Python package's tests and a short fuzzing pass of every
# decoder.
#
#   scripts/test.sh            everything (what CI runs)
#   scripts/test.sh fast       the quick tier for development: formatting, lints, the Rust
#                              tests (the cluster's included) and 200 simulator seeds; no
#                              release build, interop, Python package or fuzzing
#   SHOAL_FUZZ_SECONDS=0 ...   skip fuzzing
#   SHOAL_SIM_SEEDS=N ...      simulator seeds 0..N in release (default 2000, about 20 s), and
#                              0..N/2 with two-phase workers
#   SHOAL_TEST_KAFKA=1 ...     also run the interop suite and shoal-client's integration
#                              tests against real Apache Kafka
set -euo pipefail
cd "$(dirname "$0")/.."

tier="${1:-full}"
case "$tier" in
  full | fast) ;;
  *) echo "usage: scripts/test.sh [fast]" >&2; exit 2 ;;
esac
# The full tier builds everything once from a clean tree (CI): no incremental caches, and line
# tables only for the test binaries and the release binaries the interop suite, the simulator
# and the Python package use (backtraces keep their lines; profiling builds keep the
# workspace's `debug = 1`) — less to write and link. The fast tier keeps the developer's own
# settings, so it reuses their build.
if [ "$tier" = full ]; then
  export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
  export CARGO_PROFILE_DEV_DEBUG="${CARGO_PROFILE_DEV_DEBUG:-line-tables-only}"
  export CARGO_PROFILE_RELEASE_DEBUG="${CARGO_PROFILE_RELEASE_DEBUG:-line-tables-only}"
fi
started=$SECONDS
last=$SECONDS
# Each step's heading, with how long the previous one took (where CI's minutes go).
step() {
  printf '\n==> %s   [previous step %ds, total %ds]\n' "$*" $((SECONDS - last)) $((SECONDS - started))
  last=$SECONDS
}

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cluster engines: etcd and an S3 server (SeaweedFS, built once per machine)"
tests/cluster/rig.sh install
eval "$(tests/cluster/rig.sh env)"

step "cargo test (unit, property, integration; the cluster's against real etcd and S3)"
cargo test --workspace --locked

if [ "$tier" = fast ]; then
  step "simulator: 200 fixed seeds (crates/sim)"
  cargo run --locked -p shoal-sim -- --seeds 0..200 --steps 1500
  step "fast tier passed (scripts/test.sh runs everything)"
  exit 0
fi

step "cargo build --release (the broker the interop suite starts, and the simulator)"
cargo build --release --locked -p shoal-cli -p shoal-sim

step "simulator: ${SHOAL_SIM_SEEDS:-2000} fixed seeds in release, half as many with two-phase workers (crates/sim)"
"${CARGO_TARGET_DIR:-target}/release/shoal-sim" --seeds "0..${SHOAL_SIM_SEEDS:-2000}" --steps 1500
# and the KIP-939 two-phase workers (prepared transactions kept across incarnations)
"${CARGO_TARGET_DIR:-target}/release/shoal-sim" --two-phase --seeds "0..$(( ${SHOAL_SIM_SEEDS:-2000} / 2 ))" --steps 1500

step "build the krafka interop driver (tests/interop/krafka: its own workspace and lockfile)"
cargo fmt --manifest-path tests/interop/krafka/Cargo.toml -- --check
cargo build --locked --manifest-path tests/interop/krafka/Cargo.toml

step "interop: confluent-kafka, kafka-python, Java and krafka clients against Shoal"
tests/interop/run.sh --durations=15

step "Python package shoal-queues (crates/python: its own workspace and lockfile)"
cargo fmt --manifest-path crates/python/Cargo.toml -- --check
cargo clippy --locked --manifest-path crates/python/Cargo.toml -- -D warnings
# built with pip (maturin from PyPI) into the interop venv, its tests against Shoal
crates/python/tests/run.sh --durations=10

if [ "${SHOAL_TEST_KAFKA:-0}" = 1 ]; then
  step "interop: the same suite against Apache Kafka"
  INTEROP_TARGET=kafka tests/interop/run.sh
  step "shoal-queues' tests against Apache Kafka (KIP-1289 must fail fast there)"
  INTEROP_TARGET=kafka crates/python/tests/run.sh
  step "shoal-client's integration tests against Apache Kafka"
  KAFKA_LIBS="${KAFKA_LIBS:-$(tests/interop/kafka_ref/fetch.sh)}" SHOAL_CLIENT_TARGET=kafka \
    cargo test --locked -p shoal-client --test shoal -- --test-threads=1
fi

if [ "${SHOAL_FUZZ_SECONDS:-30}" != 0 ]; then
  step "fuzz: every decoder for ${SHOAL_FUZZ_SECONDS:-30}s"
  FUZZ_SECONDS="${SHOAL_FUZZ_SECONDS:-30}" bash .ci/fuzz.sh
fi

step "all tests passed"
