#!/usr/bin/env bash
# One row of the exactly-once pipeline benchmark (issue 12, 5a): a fresh `shoal serve`
# (durable defaults, num.partitions=4) on a random loopback port, RECORDS 1 KiB records
# produced to topic `in` (shoal perf produce), then WORKERS exactly_once_pipeline processes
# (share group g, one transactional id each) until their commit lines add up to RECORDS.
#
#   bench/pipeline.sh eos|alo WORKERS RECORDS_PER_TXN RECORDS
#
# eos: the default exactly-once pipeline; alo: its --at-least-once baseline (explicit
# non-transactional acknowledgements). Prints one line: records, seconds (from the workers'
# start, so it includes their start-up and joining the group), records/s, and p50/p99 of the
# workers' `in D ms` commit durations. Needs target/release/shoal and the release example
# (cargo build --release -p shoal-cli -p shoal-client --example exactly_once_pipeline).
# A row that does not finish in 300 s prints TIMEOUT. KEEP=1 keeps the data directory.
set -uo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
bin="${SHOAL_RELEASE_DIR:-$repo/target/release}"
mode=$1 workers=$2 per_txn=$3 records=$4
port=$((20000 + RANDOM % 20000))
dir=$(mktemp -d "${BENCH_TMP:-/tmp}/shoal-pipeline.XXXX")
"$bin/shoal" serve --data-dir "$dir/data" --listen "127.0.0.1:$port" --set num.partitions=4 \
    > "$dir/broker.log" 2>&1 &
broker=$!
trap 'kill -9 $broker ${pids:-} 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
sleep 2
perf=("$bin/shoal" perf --bootstrap "127.0.0.1:$port" produce --topic in)
"${perf[@]}" --records 1 > /dev/null 2>&1 || true # creates the topic
"${perf[@]}" --records $((records - 1)) > "$dir/fill.json" 2>&1
flag=()
[ "$mode" = alo ] && flag=(--at-least-once)
start=$(date +%s.%N)
pids=""
for i in $(seq 1 "$workers"); do
    "$bin/examples/exactly_once_pipeline" --bootstrap "127.0.0.1:$port" --input in \
        --output out --group g --transactional-id "t$i" --records-per-txn "$per_txn" \
        "${flag[@]}" 2> "$dir/w$i.log" &
    pids="$pids $!"
done
while :; do
    total=0
    for i in $(seq 1 "$workers"); do
        c=$(grep -o 'total [0-9]*' "$dir/w$i.log" | tail -1 | cut -d' ' -f2)
        total=$((total + ${c:-0}))
    done
    [ "$total" -ge "$records" ] && break
    if [ $(($(date +%s) - ${start%.*})) -gt 300 ]; then echo TIMEOUT; break; fi
    sleep 0.2
done
end=$(date +%s.%N)
secs=$(echo "$end - $start" | bc)
latency=$(cat "$dir"/w*.log | grep -o 'in [0-9.]* ms' | awk '{print $2}' | sort -n |
    awk '{a[NR]=$1} END {print "p50_ms", a[int(NR*0.5)+1], "p99_ms", a[int(NR*0.99)+1], "commits", NR}')
echo "$mode workers=$workers per_txn=$per_txn records=$total secs=$secs" \
    "records_per_s=$(echo "$total / $secs" | bc) $latency"
