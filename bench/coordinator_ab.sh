#!/usr/bin/env bash
# Paired runs of two broker binaries (before and after a change), on one machine, in one run:
# both brokers run side by side on loopback with fresh data directories, and each repetition
# measures A then B, or B then A (the order alternates), with the same client — the
# `shoal perf` of the CLIENT binary — so only the broker differs. Prints one JSON line per
# measurement, tagged with the repetition, the broker and the harness:
#
#   commits        rounds of 201 OffsetCommits pipelined on one connection (librdkafka's pattern)
#   txn-acks       KIP-1289 commit latency, A (produce only) and B (produce + staged acks)
#   produce        our producer, 200 000 records of 1 KiB, acks=all, idempotent
#   share-consume  one share consumer reading those 200 000 records
#
#   bench/coordinator_ab.sh BEFORE_SHOAL AFTER_SHOAL [REPS] [CLIENT_SHOAL] > results.jsonl
#
# HARNESSES (default "commits txn-acks produce share-consume") picks harnesses; RECORDS
# (default 200000) sizes produce and share-consume (share-consume needs produce). A harness
# that fails stops the run.
#
# A measurement, not a test: it asserts nothing about times (each harness still checks its
# own outcome and fails on a wrong one).
set -euo pipefail

before=${1:?the broker binary before the change}
after=${2:?the broker binary after the change}
reps=${3:-5}
client=${4:-$after}
base=$(mktemp -d /tmp/shoal-ab.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$base"
}
trap cleanup EXIT

start() { # name binary port
  mkdir -p "$base/$1"
  "$2" serve --data-dir "$base/$1" --listen "127.0.0.1:$3" >"$base/$1.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do
    if "$client" perf --bootstrap "127.0.0.1:$3" commits --rounds 1 --commits 1 >/dev/null 2>&1; then
      return
    fi
    sleep 0.1
  done
  echo "broker $1 did not start" >&2
  exit 1
}
start before "$before" 19511
start after "$after" 19512
port_of() { if [ "$1" = before ]; then echo 19511; else echo 19512; fi; }

harnesses=${HARNESSES:-commits txn-acks produce share-consume}
records=${RECORDS:-200000}

measure() { # rep broker
  local port out
  port=$(port_of "$2")
  local bootstrap="127.0.0.1:$port" topic="ab-$1-$2"  # created on first use
  for h in $harnesses; do
    case $h in
      commits) out=$("$client" perf --bootstrap "$bootstrap" commits) ;;
      txn-acks) out=$("$client" perf --bootstrap "$bootstrap" txn-acks --transactions 300 --json) ;;
      produce) out=$("$client" perf --bootstrap "$bootstrap" produce --topic "$topic" --records "$records") ;;
      share-consume)
        out=$("$client" perf --bootstrap "$bootstrap" share-consume --topic "$topic" \
          --group "g-$topic" --records "$records") ;;
      *) echo "unknown harness $h" >&2; exit 2 ;;
    esac
    echo "{\"rep\":$1,\"broker\":\"$2\",\"harness\":\"$h\",\"result\":$out}"
  done
}

for rep in $(seq "$reps"); do
  if [ $((rep % 2)) = 1 ]; then order="before after"; else order="after before"; fi
  for broker in $order; do
    measure "$rep" "$broker"
  done
done
