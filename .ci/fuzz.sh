#!/usr/bin/env bash
# Builds the cargo-fuzz targets under fuzz/ and runs each for a bounded time.
#
#   bash .ci/fuzz.sh                    # every target, FUZZ_SECONDS (default 30) each
#   FUZZ_SECONDS=300 bash .ci/fuzz.sh request_decode
#
# Env: FUZZ_SECONDS   seconds per target (libFuzzer -max_total_time), default 30
#      FUZZ_TOOLCHAIN rustup toolchain for the build (e.g. nightly); default: the default one
#      FUZZ_SANITIZER cargo-fuzz --sanitizer (address|none|...), default address
#
# Works on the stable toolchain: cargo-fuzz passes -Z flags (-Zsanitizer=address, sancov
# passes), which stable rustc accepts with RUSTC_BOOTSTRAP=1; the stable x86_64-linux std ships
# the ASan runtime. No nightly toolchain is needed. FUZZ_SANITIZER=none needs no -Z flag (not
# even RUSTC_BOOTSTRAP) and runs request_decode ~40x faster (ASan makes every huge-capacity
# allocation expensive), but then -malloc_limit_mb is not enforced, only -rss_limit_mb.
#
# Exits non-zero if a target crashes (panic, ASan report, timeout, OOM) and prints the
# reproducer path; reproduce with
#   RUSTC_BOOTSTRAP=1 cargo fuzz run <target> <reproducer>
# The growing corpus goes to fuzz/corpus/<target> (git-ignored); fuzz/seeds/<target> is the
# small committed seed corpus, read-only here.
set -euo pipefail
cd "$(dirname "$0")/.."

FUZZ_SECONDS="${FUZZ_SECONDS:-30}"
FUZZ_SANITIZER="${FUZZ_SANITIZER:-address}"
export RUSTC_BOOTSTRAP="${RUSTC_BOOTSTRAP:-1}"
cargo=(cargo)
if [[ -n "${FUZZ_TOOLCHAIN:-}" ]]; then cargo=(cargo "+$FUZZ_TOOLCHAIN"); fi

if ! "${cargo[@]}" fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked
fi

targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
    mapfile -t targets < <("${cargo[@]}" fuzz list)
fi

# Per-target libFuzzer limits.
#
# -rss_limit_mb=2048: real memory use (resident pages) above 2 GiB is a finding.
# -malloc_limit_mb:   libFuzzer reports any single malloc of this size or more as OOM. It only
#   sees malloc (via the sanitizer's malloc hooks; with FUZZ_SANITIZER=none it sees nothing).
#   request_decode: kafka-protocol does Vec::with_capacity(n) for wire-supplied n, so a tiny
#   frame asks for up to ~150 GB. The target installs shoal_protocol::alloc::ReserveLazily, as
#   the broker does: allocations >= 1 GiB become mmap(MAP_NORESERVE) and never reach malloc, so
#   the hook does not see them; what remains are untouched mallocs below 1 GiB (e.g. 0.3 GB from
#   a 16-byte Metadata frame), harmless in the broker and not what we look for. The limit is
#   therefore set to 2048 (> 1 GiB, so it never fires on that path); RSS is the real guard.
#   Note -malloc_limit_mb=0 does NOT disable the check: 0 means "same as -rss_limit_mb".
#   record_batch_validate / metadata_record_decode: storage and core promise every size read
#   from input is bounded (decompression budget 8 MiB here, plus codec windows such as zstd's
#   128 MiB maximum), so a tighter 512 / 64 MiB limit turns an unbounded allocation into a crash.
malloc_limit_mb() {
    case "$1" in
        request_decode) echo 2048 ;;
        record_batch_validate) echo 512 ;;
        metadata_record_decode) echo 64 ;;
        sasl_handshake) echo 2048 ;;
        oauthbearer) echo 64 ;;
        *) echo 2048 ;;
    esac
}

start=$SECONDS
echo "fuzz.sh: building ${targets[*]} (sanitizer $FUZZ_SANITIZER)" >&2
for t in "${targets[@]}"; do
    "${cargo[@]}" fuzz build --sanitizer "$FUZZ_SANITIZER" "$t"
done
echo "fuzz.sh: build took $((SECONDS - start)) s" >&2

failed=()
for t in "${targets[@]}"; do
    corpus="fuzz/corpus/$t"
    artifacts="fuzz/artifacts/$t"
    mkdir -p "$corpus" "$artifacts"
    marker=$(mktemp)
    seeds=()
    if [[ -d "fuzz/seeds/$t" ]]; then seeds=("fuzz/seeds/$t"); fi
    echo "fuzz.sh: running $t for ${FUZZ_SECONDS}s" >&2
    t0=$SECONDS
    status=0
    "${cargo[@]}" fuzz run --sanitizer "$FUZZ_SANITIZER" "$t" "$corpus" "${seeds[@]}" -- \
        -max_total_time="$FUZZ_SECONDS" \
        -rss_limit_mb=2048 \
        -malloc_limit_mb="$(malloc_limit_mb "$t")" \
        -timeout=10 \
        -print_final_stats=1 \
        >"fuzz/artifacts/$t.log" 2>&1 || status=$?
    grep -E '^#[0-9]+[[:space:]]+DONE' \
        "fuzz/artifacts/$t.log" >&2 || true
    echo "fuzz.sh: $t exited $status after $((SECONDS - t0)) s" >&2
    if [[ $status -ne 0 ]]; then
        failed+=("$t")
        tail -n 60 "fuzz/artifacts/$t.log" >&2
        while IFS= read -r f; do
            echo "fuzz.sh: REPRODUCER $t: $f" >&2
            echo "fuzz.sh:   hex: $(od -An -tx1 -v "$f" | tr -d ' \n' | head -c 2048)" >&2
        done < <(find "$artifacts" -type f -newer "$marker")
    fi
    rm -f "$marker"
done

echo "fuzz.sh: total $((SECONDS - start)) s" >&2
if [[ ${#failed[@]} -ne 0 ]]; then
    echo "fuzz.sh: FAILED: ${failed[*]} (full logs: fuzz/artifacts/<target>.log)" >&2
    exit 1
fi
echo "fuzz.sh: ${#targets[@]} targets ran ${FUZZ_SECONDS}s each without a crash" >&2
