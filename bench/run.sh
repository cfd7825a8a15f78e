#!/usr/bin/env bash
# Shoal benchmark harness: produce/consume throughput and produce latency
# through librdkafka (confluent-kafka 2.16.1), see bench/kbench.py.
#
#   bench/run.sh [--modes durable,lazy[,kafka][,mock]] [--reps N] [--records N] [--size BYTES]
#                [--partitions 1,4] [--consumers 1,8] [--latency-seconds S] [--latency-rates half,50mb]
#                [--idempotence] [--txn [--txn-sizes 1000,100,10] [--txn-records N]
#                [--txn-producers K] [--txn-client python|java]] [--share [--share-records N] [--share-consumers 1,2,4]]
#                [--out FILE.jsonl] [-- extra kbench.py run args]
#   bench/run.sh --clients [--modes durable,kafka] [--reps N] [--records N] [--partitions 1,4]
#                [--latency-seconds S] [--rate-mb MB] [--out FILE.jsonl] [-- extra clients.py run args]
#
# --clients: our client beside librdkafka's and krafka's (bench/clients.py run): per mode
# (default durable,kafka) and repetition a fresh broker, then the three clients interleaved
# (order rotated), each in its own process: produce N records (idempotent, acks=all,
# linger.ms=5, batch.size=1048576, no compression) to 1 and 4 partitions, each client's share
# consumer reading its topic back, and a paced latency run at --rate-mb (default 20) MB/s for
# --latency-seconds; prints the median [min-max] table (clients.py summary). Needs
# target/release/shoal and tests/interop/krafka/target/release/shoal-krafka-interop
# (cargo build --release --manifest-path tests/interop/krafka/Cargo.toml).
#
# --txn: transactional mode: instead of produce/consume/latency, run only the
# txn phase (kbench.py run --phases txn): per partition count, a plain
# (non-transactional) baseline, then a transactional producer committing every
# N records for each N in --txn-sizes (with a plain producer that flush()es every
# N records as a control), then the plain baseline again; prints the
# transactions table (kbench.py txn-summary). --records is not used there:
# --txn-records (default 100000) records per N, at most 2000 transactions per N.
# --share: share groups (KIP-932): per partition count, --share-records records
# produced, read by a classic consumer, then by 1/2/4 share consumers (one process
# each, a new group each, share.auto.offset.reset=earliest) in implicit and
# explicit acknowledgement mode; ratio = share records/s over the classic one.
# --txn-producers K: K producer processes at once in every row of that phase
# (the transactional ones with a transactional.id each), records split among them.
# --txn-client java: the txn phase with the Java client (kafka-clients 4.x from
# tests/interop/kafka_ref/fetch.sh; bench/java/TxnBench.java, K threads in one JVM).
# Not supported by the mock mode (skipped).
#
# Modes:
#   durable  shoal serve with its default log.flush.interval.messages=1
#            (fsync before ack, group commit)
#   lazy     shoal serve --set log.flush.interval.messages=9223372036854775807
#                        --set log.flush.interval.ms=1000
#   kafka    reference Apache Kafka (single-node KRaft, its defaults = lazy
#            flush), started by tests/interop/conftest.py; needs java + the jars
#            from tests/interop/kafka_ref/fetch.sh (fetched once from Maven)
#   mock     librdkafka's in-process mock broker (acks instantly): the ceiling
#            of the Python client itself (produce only)
#
# Each mode starts its own broker on a free 127.0.0.1 port with a fresh temp
# data dir, runs the phases, stops the broker and deletes the dir.
# Output: one JSON line per result on stdout (and in --out), then a table.
# SHOAL_BIN overrides target/release/shoal; BENCH_TMP the temp dir parent.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
shoal="${SHOAL_BIN:-$repo/target/release/shoal}"

modes=""
reps=1
records=300000
size=1024
partitions="1,4"
latency_seconds=8
latency_rates="half,50mb"
idem=()
txn=()
txn_mode=0
out=""
extra=()
clients_mode=0
clients_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --modes) modes="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --records) records="$2"; shift 2 ;;
    --size) size="$2"; shift 2 ;;
    --partitions) partitions="$2"; shift 2 ;;
    --latency-seconds) latency_seconds="$2"; shift 2 ;;
    --latency-rates) latency_rates="$2"; shift 2 ;;
    --idempotence) idem=(--idempotence); shift ;;
    --txn) txn_mode=1; txn+=(--phases txn); shift ;;
    --share) txn_mode=2; txn+=(--phases share); shift ;;
    --share-records) txn+=(--share-records "$2"); shift 2 ;;
    --share-consumers) txn+=(--share-consumers "$2"); shift 2 ;;
    --consumers) txn+=(--consumers "$2"); shift 2 ;;
    --txn-sizes) txn+=(--txn-sizes "$2"); shift 2 ;;
    --txn-records) txn+=(--txn-records "$2"); shift 2 ;;
    --txn-producers) txn+=(--txn-producers "$2"); shift 2 ;;
    --txn-client) txn+=(--txn-client "$2"); shift 2 ;;
    --clients) clients_mode=1; shift ;;
    --rate-mb) clients_args+=(--rate-mb "$2"); shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

if [ -z "$modes" ]; then
  if [ "$clients_mode" = 1 ]; then modes="durable,kafka"; else modes="durable,lazy"; fi
fi
if [ "$clients_mode" = 1 ]; then
  [ "$txn_mode" = 0 ] || { echo "run.sh: --clients does not combine with --txn/--share" >&2; exit 2; }
  krafka_bin="${KRAFKA_BIN:-$repo/tests/interop/krafka/target/release/shoal-krafka-interop}"
  [ -x "$krafka_bin" ] || { echo "run.sh: no krafka driver at $krafka_bin (cargo build --release --manifest-path tests/interop/krafka/Cargo.toml)" >&2; exit 1; }
  [ -x "$shoal" ] || { echo "run.sh: no shoal binary at $shoal (cargo build --release -p shoal-cli)" >&2; exit 1; }
fi

# ------------------------------------------------------------ python venv
want="confluent-kafka==2.16.1"
has_ck() { "$1" -c 'import sys, importlib.metadata as m; sys.exit(m.version("confluent-kafka") != "2.16.1")' 2>/dev/null; }
py=""
if [ -x "$repo/tests/interop/.venv/bin/python" ] && has_ck "$repo/tests/interop/.venv/bin/python"; then
  py="$repo/tests/interop/.venv/bin/python"
else
  venv="$here/.venv"
  if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv" || {
      echo "run.sh: 'python3 -m venv' failed (apt-get install python3-venv)" >&2; exit 1; }
  fi
  has_ck "$venv/bin/python" ||
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "$want"
  py="$venv/bin/python"
fi

results="$(mktemp /tmp/shoal-bench-XXXXXX.jsonl)"
tmp=""
bpid=""
cleanup() {
  if [ -n "$bpid" ] && kill -0 "$bpid" 2>/dev/null; then
    kill -TERM "$bpid" 2>/dev/null || true
    for _ in $(seq 1 300); do kill -0 "$bpid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$bpid" 2>/dev/null || true
    wait "$bpid" 2>/dev/null || true
  fi
  bpid=""
  [ -n "$tmp" ] && rm -rf "$tmp"
  tmp=""
}
trap 'cleanup; rm -f "$results"' EXIT
trap 'exit 130' INT TERM

free_port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

echo "# python: $py (confluent-kafka 2.16.1)" >&2
if [ -x "$shoal" ]; then
  BENCH_SHOAL_SHA="$(sha256sum "$shoal" | cut -c1-12)"
  export BENCH_SHOAL_SHA
  echo "# shoal: $shoal ($("$shoal" --version), built $(stat -c %y "$shoal" | cut -c1-19), sha256 $BENCH_SHOAL_SHA)" >&2
fi
echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r)" >&2
if [ "$clients_mode" = 1 ]; then
  echo "# command: $0 --clients --modes $modes --reps $reps --records $records --size $size --partitions $partitions --latency-seconds $latency_seconds ${clients_args[*]:-} ${extra[*]:-}" >&2
  kb=("$py" "$here/clients.py" run --records "$records" --size "$size" --partitions "$partitions"
      --latency-seconds "$latency_seconds" --out "$results" --shoal-bin "$shoal" --krafka-bin "$krafka_bin"
      ${clients_args[@]+"${clients_args[@]}"} ${extra[@]+"${extra[@]}"})
else
  echo "# command: $0 --modes $modes --reps $reps --records $records --size $size --partitions $partitions --latency-seconds $latency_seconds --latency-rates $latency_rates ${idem[*]:-} ${txn[*]:-} ${extra[*]:-}" >&2
  kb=("$py" "$here/kbench.py" run --records "$records" --size "$size" --partitions "$partitions"
      --latency-seconds "$latency_seconds" --latency-rates "$latency_rates" --out "$results" ${idem[@]+"${idem[@]}"} ${txn[@]+"${txn[@]}"} ${extra[@]+"${extra[@]}"})
fi

for rep in $(seq 1 "$reps"); do
  echo "# ---- repetition $rep/$reps" >&2
  kbr=("${kb[@]}")
  [ "$clients_mode" = 1 ] && kbr+=(--rep "$rep")
  # the disk's raw write+fdatasync cost, for reading the durable numbers
  if [[ ",$modes," == *,durable,* ]]; then
    "$py" "$here/kbench.py" fsync-probe "${BENCH_TMP:-/tmp}" --out "$results"
  fi

  IFS=',' read -r -a mode_list <<< "$modes"
  for mode in "${mode_list[@]}"; do
    echo "# [$mode] uptime before: $(uptime)" >&2
    case "$mode" in
      durable|lazy)
        [ -x "$shoal" ] || { echo "run.sh: no shoal binary at $shoal (cargo build --release)" >&2; exit 1; }
        tmp="$(mktemp -d "${BENCH_TMP:-/tmp}/shoal-bench-data-XXXXXX")"
        port="$(free_port)"
        sets=()
        if [ "$mode" = lazy ]; then
          sets=(--set log.flush.interval.messages=9223372036854775807 --set log.flush.interval.ms=1000)
          desc="log.flush.interval.messages=9223372036854775807 log.flush.interval.ms=1000"
        else
          desc="log.flush.interval.messages=1 (default: fsync before ack, group commit)"
        fi
        "$shoal" serve --data-dir "$tmp/data" --listen "127.0.0.1:$port" ${sets[@]+"${sets[@]}"} \
          >"$tmp/broker.log" 2>&1 &
        bpid=$!
        for _ in $(seq 1 300); do  # ready = port open (kbench then waits for metadata)
          "$py" -c "import socket; socket.create_connection(('127.0.0.1',$port),0.5)" 2>/dev/null && break
          kill -0 "$bpid" 2>/dev/null || { echo "run.sh: shoal exited:" >&2; cat "$tmp/broker.log" >&2; exit 1; }
          sleep 0.1
        done
        "${kbr[@]}" --bootstrap "127.0.0.1:$port" --broker-pid "$bpid" \
          --label "shoal-$mode" --broker-mode "$desc" || { tail -30 "$tmp/broker.log" >&2; exit 1; }
        cleanup
        ;;
      kafka)
        "${kbr[@]}" --start-kafka --label kafka \
          --broker-mode "Apache Kafka defaults (lazy flush: OS page cache)"
        ;;
      mock)
        if [ "$txn_mode" != 0 ] || [ "$clients_mode" = 1 ]; then
          echo "# [mock] skipped: the txn and share phases do not run against the mock broker" >&2
          continue
        fi
        "${kb[@]}" --mock --label librdkafka-mock --phases produce \
          --broker-mode "librdkafka in-process mock broker (acks instantly)"
        ;;
      *) echo "run.sh: unknown mode $mode" >&2; exit 2 ;;
    esac
    echo "# [$mode] uptime after:  $(uptime)" >&2
  done
done

[ -n "$out" ] && cat "$results" >> "$out"
echo
if [ "$clients_mode" = 1 ]; then
  echo "# median [min-max] over $reps repetition(s)"
  "$py" "$here/clients.py" summary "$results"
  rm -f "$results"
  exit 0
fi
"$py" "$here/kbench.py" table "$results"
if [ "$reps" -gt 1 ]; then
  echo
  echo "# median [min-max] over $reps repetitions"
  "$py" "$here/kbench.py" summary "$results"
fi
if grep -q '"test": "txn_produce"' "$results"; then
  echo
  echo "# transactions: median [min-max] over $reps repetition(s); p50/p99 = commit_transaction() (flush() for 'N flush' rows)"
  "$py" "$here/kbench.py" txn-summary "$results"
fi
rm -f "$results"
