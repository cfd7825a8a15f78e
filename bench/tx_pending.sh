#!/usr/bin/env bash
# Broker memory with N records TX_PENDING (KIP-1289), and restart time after kill -9 with
# them (issue 12, benchmark (c)). A measurement, not a test.
#
#   bench/tx_pending.sh [--records N] [--record-bytes B] [--reps R]
#
# Per repetition: a fresh `shoal serve` (durable default) with a metrics listener; its RSS
# idle; `shoal perf stage-pending` writes N records to a 5-partition topic (a share partition
# holds at most 2000 records in flight, TX_PENDING included), one share consumer acquires and
# ACCEPTs them all, a transactional producer stages the acknowledgements (TxnShareAcknowledge) and leaves the transaction open; the broker's RSS and the
# `shoal_share_partition_txn_pending_records` gauge then; kill -9; restart on the same data
# directory; the time until the port accepts a connection and until the gauge shows the N
# records replayed, and the RSS then. Prints one JSON line per repetition.
# SHOAL_BIN overrides target/release/shoal; BENCH_TMP the temp dir parent.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
shoal="${SHOAL_BIN:-$repo/target/release/shoal}"
records=10000
record_bytes=1024
reps=1
while [ $# -gt 0 ]; do
  case "$1" in
    --records) records="$2"; shift 2 ;;
    --record-bytes) record_bytes="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    *) echo "tx_pending.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
now_ms() { date +%s%3N; }
pending() {  # the gauge's sum over share partitions, empty if the endpoint is not up
  { curl -fsS "http://127.0.0.1:$metrics/metrics" 2>/dev/null || true; } |
    awk '/^shoal_share_partition_txn_pending_records/ {s += $NF; n++} END {if (n) print s; else print 0}'
}
start() {
  setsid "$shoal" serve --data-dir "$dir" --listen "127.0.0.1:$port" --metrics "127.0.0.1:$metrics" \
    >>"$dir.log" 2>&1 &
  pid=$!
}
wait_port() {
  for _ in $(seq 1 3000); do
    if python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$port),0.2)" 2>/dev/null; then
      return 0
    fi
    sleep 0.01
  done
  echo "tx_pending.sh: the broker did not listen" >&2; exit 1
}

for rep in $(seq 1 "$reps"); do
  dir="$(mktemp -d "${BENCH_TMP:-/tmp}/shoal-txpending.XXXXXX")"
  port="$(free_port)"; metrics="$(free_port)"
  trap 'kill -9 "$pid" 2>/dev/null || true; rm -rf "$dir" "$dir.log"' EXIT
  start; wait_port; sleep 1
  rss_idle="$(rss_kib "$pid")"
  staged="$("$shoal" perf --bootstrap "127.0.0.1:$port" stage-pending --topic txp --group txp-g \
    --records "$records" --record-bytes "$record_bytes")"
  sleep 1
  rss_pending="$(rss_kib "$pid")"
  gauge_before="$(pending)"
  kill -9 "$pid"; wait "$pid" 2>/dev/null || true
  t0="$(now_ms)"; start; wait_port; t_listen="$(now_ms)"
  gauge_after=0
  for _ in $(seq 1 6000); do
    gauge_after="$(pending)"
    [ "${gauge_after:-0}" -ge "$records" ] && break
    sleep 0.01
  done
  t_replayed="$(now_ms)"
  rss_restarted="$(rss_kib "$pid")"
  data_kib="$(du -sk "$dir" | cut -f1)"
  echo "{\"test\": \"tx_pending\", \"rep\": $rep, \"records\": $records, \"record_bytes\": $record_bytes," \
    "\"rss_idle_kib\": $rss_idle, \"rss_pending_kib\": $rss_pending," \
    "\"gauge_before_crash\": $gauge_before, \"gauge_after_restart\": $gauge_after," \
    "\"restart_listen_ms\": $((t_listen - t0)), \"restart_replayed_ms\": $((t_replayed - t0))," \
    "\"rss_restarted_kib\": $rss_restarted, \"data_dir_kib\": $data_kib," \
    "\"staging\": $staged, \"loadavg\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}"
  kill -9 "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true
  rm -rf "$dir" "$dir.log"; trap - EXIT
done
