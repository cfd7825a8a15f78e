#!/usr/bin/env bash
# One row of the exactly-once pipeline benchmark (issue 12, 5a and 5b).
#
#   bench/pipeline.sh eos|alo|java WORKERS RECORDS_PER_TXN RECORDS
#   bench/pipeline.sh ckpt WORKERS CHECKPOINTS_PER_MINUTE RECORDS
#
# eos:  WORKERS exactly_once_pipeline processes (share group g, one transactional id each)
#       on a fresh `shoal serve` (durable defaults, num.partitions=4, random loopback port),
#       after RECORDS 1 KiB records were produced to topic `in` (shoal perf produce), until
#       their commit lines add up to RECORDS;
# alo:  the same with the example's --at-least-once baseline (explicit non-transactional
#       acknowledgements);
# ckpt: WORKERS checkpointed_source processes (issue 32: one prepared KIP-939 transaction per
#       checkpoint carrying the outputs and the acknowledgements, its token in a checkpoint
#       file) checkpointing CHECKPOINTS_PER_MINUTE times a minute, on a broker with
#       transaction.two.phase.commit.enable=true; latency is each checkpoint's prepare +
#       checkpoint file + commit (the workers' `in D ms` lines);
# java: what a Kafka user runs for exactly-once today, bench/java/EosPipelineBench.java:
#       WORKERS threads, each a KafkaConsumer (consumer group, read_committed) and a
#       transactional KafkaProducer with sendOffsetsToTransaction, on 4 partitions; against
#       Shoal (default) or, with BROKER=kafka, the reference Apache Kafka 4.4 (single-node
#       KRaft from tests/interop/kafka_ref/fetch.sh, its defaults: no fsync per write; with
#       KAFKA_FSYNC=1, log.flush.interval.messages=1).
#
# Prints one line: records, seconds (from the workers' start, so it includes their start-up
# and joining the group), records/s, the steady rate (records committed after the first
# commit, over the time from the first commit to the last; sampled every 0.2 s, eos/alo
# only), p50/p99 of the commit durations (the workers' `in D ms` lines; for java,
# sendOffsetsToTransaction + commitTransaction) and, for java, the read_committed count of
# `out`; for eos/alo also the CPU seconds the broker and the workers used (the broker's
# include the fill). Needs target/release/shoal and the release example (cargo build --release -p
# shoal-cli, then cargo build --release -p shoal-client --example exactly_once_pipeline: one
# command with --example builds only the example); java needs javac and Maven.
# A row that does not finish in 300 s ($LIMIT_S) prints TIMEOUT. KEEP=1 keeps the data directory.
# WORKER=py (eos/alo) runs the Python package's twin of the example instead,
# crates/python/examples/exactly_once_pipeline.py, with $PYTHON (default python3), which must
# have shoal-queues installed (crates/python/tests/run.sh installs it in tests/interop/.venv).
set -uo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
bin="${SHOAL_RELEASE_DIR:-$repo/target/release}"
mode=$1 workers=$2 per_txn=$3 records=$4
broker_kind=${BROKER:-shoal}
port=$((20000 + RANDOM % 20000))
dir=$(mktemp -d "${BENCH_TMP:-/tmp}/shoal-pipeline.XXXX")
pids=""
trap 'kill -9 ${broker:-} $pids 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT

start_shoal() {
    [ -x "$bin/shoal" ] || { echo "no $bin/shoal (cargo build --release -p shoal-cli)" >&2; exit 1; }
    local extra=()
    [ "$mode" = ckpt ] && extra=(--set transaction.two.phase.commit.enable=true)
    "$bin/shoal" serve --data-dir "$dir/data" --listen "127.0.0.1:$port" \
        --set num.partitions=4 "${extra[@]}" > "$dir/broker.log" 2>&1 &
    broker=$!
}

start_kafka() {
    local cport=$((port + 1)) cp
    cp="$libs/*"
    cat > "$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir/data
num.partitions=4
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
PROPS
    [ -n "${KAFKA_FSYNC:-}" ] && echo "log.flush.interval.messages=1" >> "$dir/server.properties"
    local jvm=(java -Xms256m -Xmx1g -XX:+UseG1GC -cp "$cp")
    "${jvm[@]}" kafka.tools.StorageTool format --cluster-id="$(python3 -c 'import base64, uuid
print(base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="))')" -c "$dir/server.properties" --standalone \
        > "$dir/format.log" 2>&1 || { cat "$dir/format.log" >&2; exit 1; }
    "${jvm[@]}" kafka.Kafka "$dir/server.properties" > "$dir/broker.log" 2>&1 &
    broker=$!
}

if [ "$mode" = java ]; then
    libs=$("$repo/tests/interop/kafka_ref/fetch.sh") || exit 1
    mkdir -p "$dir/classes"
    javac -d "$dir/classes" -cp "$libs/*" "$repo/bench/java/EosPipelineBench.java" || exit 1
fi
case $broker_kind in
    shoal) start_shoal ;;
    kafka) [ "$mode" = java ] || { echo "BROKER=kafka runs the java mode only" >&2; exit 2; }
           start_kafka ;;
    *) echo "BROKER: shoal or kafka" >&2; exit 2 ;;
esac
for _ in $(seq 1 120); do
    (echo > "/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.5
done
sleep 1

if [ "$mode" = java ]; then
    out=$(timeout 600 java -cp "$libs/*:$dir/classes" EosPipelineBench "127.0.0.1:$port" 4 \
        "$workers" "$per_txn" "$records" 1024 "bench-$$" 300 2> "$dir/java.log") ||
        { tail -30 "$dir/java.log" >&2; exit 1; }
    echo "java broker=$broker_kind${KAFKA_FSYNC:+ (fsync)} workers=$workers per_txn=$per_txn $out"
    exit 0
fi

perf=("$bin/shoal" perf --bootstrap "127.0.0.1:$port" produce --topic in)
"${perf[@]}" --records 1 > /dev/null 2>&1 || true # creates the topic
"${perf[@]}" --records $((records - 1)) > "$dir/fill.json" 2>&1
flag=()
[ "$mode" = alo ] && flag=(--at-least-once)
start=$(date +%s.%N)
worker=("$bin/examples/exactly_once_pipeline")
[ "${WORKER:-rust}" = py ] &&
    worker=("${PYTHON:-python3}" "$repo/crates/python/examples/exactly_once_pipeline.py")
for i in $(seq 1 "$workers"); do
    if [ "$mode" = ckpt ]; then
        "$bin/examples/checkpointed_source" --bootstrap "127.0.0.1:$port" --input in \
            --output out --group g --transactional-id "t$i" \
            --checkpoint-ms $((60000 / per_txn)) --checkpoint-file "$dir/checkpoint-$i" \
            2> "$dir/w$i.log" &
    else
        "${worker[@]}" --bootstrap "127.0.0.1:$port" --input in \
            --output out --group g --transactional-id "t$i" --records-per-txn "$per_txn" \
            "${flag[@]}" 2> "$dir/w$i.log" &
    fi
    pids="$pids $!"
done
first="" first_total=0
while :; do
    total=0
    for i in $(seq 1 "$workers"); do
        c=$(grep -o 'total [0-9]*' "$dir/w$i.log" | tail -1 | cut -d' ' -f2)
        total=$((total + ${c:-0}))
    done
    if [ -z "$first" ] && [ "$total" -gt 0 ]; then first=$(date +%s.%N) first_total=$total; fi
    [ "$total" -ge "$records" ] && break
    if [ $(($(date +%s) - ${start%.*})) -gt "${LIMIT_S:-300}" ]; then echo TIMEOUT; break; fi
    sleep 0.2
done
end=$(date +%s.%N)
# CPU seconds (user + system) used so far by the broker and by all workers together.
cpu() { local t=0 p; for p in "$@"; do
    t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0))); done
    echo "scale=2; $t / $(getconf CLK_TCK)" | bc; }
cpu_broker=$(cpu "$broker") cpu_workers=$(cpu $pids)
secs=$(echo "$end - $start" | bc)
steady=$(echo "($total - $first_total) / ($end - $first)" | bc)
latency=$(cat "$dir"/w*.log | grep -o 'in [0-9.]* ms' | awk '{print $2}' | sort -n |
    awk '{a[NR]=$1} END {print "p50_ms", a[int(NR*0.5)+1], "p99_ms", a[int(NR*0.99)+1], "commits", NR}')
knob="per_txn=$per_txn"
[ "$mode" = ckpt ] && knob="checkpoints_per_min=$per_txn"
echo "$mode${WORKER:+ worker=$WORKER} workers=$workers $knob records=$total secs=$secs" \
    "records_per_s=$(echo "$total / $secs" | bc) steady_per_s=$steady" \
    "first_commit_s=$(echo "$first - $start" | bc) $latency" \
    "cpu_s_broker=$cpu_broker cpu_s_workers=$cpu_workers"
