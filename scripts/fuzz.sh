#!/usr/bin/env bash
# Builds every fuzz target in fuzz/ and runs each for a bounded time.
#
# Usage: scripts/fuzz.sh [seconds per target, default 20] [target...]
#
# Installs what it needs (the nightly toolchain and cargo-fuzz) when missing, writes
# the seed corpora (fuzz/make_seeds.py), then runs each target on them and on the
# committed regression inputs in fuzz/seeds/<target>/. Prints the executions each
# target ran and exits non-zero if any target crashed, failed an assertion, timed out
# or ran out of memory; the input that did it is in fuzz/artifacts/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-20}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(protobuf_decode attrs_decode header_validate maps_line elf_tls)
fi

start=$(date +%s)
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    rustup toolchain install nightly --profile minimal
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

python3 fuzz/make_seeds.py
cargo +nightly fuzz build
built=$(date +%s)
echo "fuzz: built in $((built - start)) s"

failed=()
summary=()
for target in "${targets[@]}"; do
    corpora=("fuzz/corpus/$target")
    if [ -d "fuzz/seeds/$target" ]; then
        corpora+=("fuzz/seeds/$target")
    fi
    log="fuzz/artifacts/$target.log"
    mkdir -p fuzz/artifacts
    echo "fuzz: $target for $seconds s"
    # -timeout: an input that runs over 10 s is a hang, and fails the run.
    status=0
    cargo +nightly fuzz run "$target" "${corpora[@]}" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 >"$log" 2>&1 || status=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
    if [ "$status" -ne 0 ]; then
        failed+=("$target")
        summary+=("$target: FAILED (exit $status) after ${runs:-?} runs")
        echo "fuzz: $target failed; the end of its log ($log):"
        tail -n 60 "$log"
    else
        summary+=("$target: ${runs:-?} runs (${rate:-?}/s), no crash")
    fi
done

echo
echo "fuzz: $(($(date +%s) - start)) s in all ($((built - start)) s of setup and build)"
for line in "${summary[@]}"; do
    echo "fuzz: $line"
done
echo "fuzz: $((${#targets[@]} - ${#failed[@]})) passed, ${#failed[@]} failed"
[ ${#failed[@]} -eq 0 ]
