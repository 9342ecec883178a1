#!/usr/bin/env bash
# Runs every benchmark of this project side by side with its peers, then prints a table
# of medians and ratios (ours / peer). See BENCHMARKS.md for the method and the rows.
#
#   scripts/bench.sh [RUNS]      RUNS: how many times the whole set runs (default 10)
#
# Each run measures the rows in pairs: our binary and the peer's binary, one right after
# the other, restricted to the same rows with a criterion filter (odd runs ours first, even
# runs the peer first). The machine's speed drifts (other work, clock boost), so a ratio
# is only taken between measurements made seconds apart. The table gives, per row, the
# median over the runs of each side's criterion median and of the per-run ratios. Many
# short measurements (criterion's own defaults in the benches are 2 s; here 1 s after a
# 0.3 s warm-up, set with BENCH_CRITERION_ARGS) sample the machine's states better than a
# few long ones.
#
# As root, each binary runs with SCHED_FIFO priority pinned to the last CPU
# (`chrt -f 50 taskset -c N`), so that other processes on the machine do not preempt it
# mid-sample; BENCH_PIN=0 turns that off. The run needs libclang (Debian's
# `libclang-dev`) to build custom-labels.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=${1:-10}
if ! [[ "$runs" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: scripts/bench.sh [RUNS]   (RUNS: a positive number, default 10)" >&2
  exit 2
fi
read -r -a criterion_args <<<"${BENCH_CRITERION_ARGS:---warm-up-time 0.3 --measurement-time 1}"
benches=(thread_writes thread_writes_libdd thread_writes_custom_labels process_publish process_publish_libdd)
results=target/bench-results
target_dir=${CARGO_TARGET_DIR:-$PWD/target}
criterion_dir=$target_dir/criterion

pin=()
if [ "${BENCH_PIN:-1}" != 0 ] && [ "$(id -u)" = 0 ] && command -v chrt >/dev/null &&
  command -v taskset >/dev/null; then
  pin=(chrt -f 50 taskset -c "$(($(nproc) - 1))")
fi

if ! ldconfig -p | grep 'libclang[-.0-9]*\.so' >/dev/null; then
  echo "bench.sh: custom-labels needs libclang to build (Debian: apt-get install -y libclang-dev)" >&2
  exit 1
fi

bench_args=()
for b in "${benches[@]}"; do bench_args+=(--bench "$b"); done
# Build once, then run the bench binaries themselves: pinned at a real-time priority, a
# cargo process that waits for anything (a lock, a build) could starve the pinned CPU.
declare -A bin
while IFS=' ' read -r name path; do
  bin[$name]=$path
done < <(cargo bench -q -p otel-ctx-writer "${bench_args[@]}" --no-run --message-format=json |
  python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and "bench" in m["target"]["kind"]:
        print(m["target"]["name"], m["executable"])
')
for b in "${benches[@]}"; do
  [ -n "${bin[$b]:-}" ] || { echo "bench.sh: cargo built no binary for $b" >&2; exit 1; }
done

rm -rf "$results"
mkdir -p "$results"
{
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) CPUs"
  echo "kernel: $(uname -r)"
  echo "rustc: $(rustc --version)"
  echo "pinned: ${pin[*]:-no}"
  echo "criterion: ${criterion_args[*]}"
} | tee "$results/machine.txt"

# Pairs measured together: our binary, the peer's binary, the criterion filter (a regex
# on the benchmark ids).
pairs=(
  "thread_writes thread_writes_libdd ^attach_detach/"
  "thread_writes thread_writes_libdd ^swap/"
  "thread_writes thread_writes_libdd ^update[a-z_]*/[^/]*/0$"
  "thread_writes thread_writes_libdd ^update[a-z_]*/[^/]*/2$"
  "thread_writes thread_writes_libdd ^update[a-z_]*/[^/]*/8$"
  "thread_writes thread_writes_custom_labels ^with_labels_2/"
  "process_publish process_publish_libdd ^process_publish_unpublish/"
  "process_publish process_publish_libdd ^process_update/"
)

for run in $(seq 1 "$runs"); do
  echo "run $run/$runs: start $(uptime | sed 's/.*load average/load average/')" | tee -a "$results/machine.txt"
  rm -rf "$criterion_dir"
  for pair in "${pairs[@]}"; do
    read -r ours peer filter <<<"$pair"
    order=("$ours" "$peer")
    [ $((run % 2)) = 0 ] && order=("$peer" "$ours")
    for b in "${order[@]}"; do
      log="$results/run-$run.log"
      echo "== $b $filter" >>"$log"
      # Criterion finds its output folder through CARGO_TARGET_DIR (else by running cargo).
      (cd writer-linux && CARGO_TARGET_DIR="$target_dir" \
        "${pin[@]}" "${bin[$b]}" --bench "${criterion_args[@]}" "$filter") \
        >>"$log" 2>&1 || {
        cat "$log" >&2
        exit 1
      }
    done
  done
  echo "run $run/$runs: end   $(uptime | sed 's/.*load average/load average/')" | tee -a "$results/machine.txt"
  python3 - "$criterion_dir" "$results/run-$run.json" <<'EOF'
import json, pathlib, sys
criterion, out = pathlib.Path(sys.argv[1]), sys.argv[2]
medians = {}
for bench in criterion.rglob("new/benchmark.json"):
    full_id = json.loads(bench.read_text())["full_id"]
    estimates = json.loads((bench.parent / "estimates.json").read_text())
    medians[full_id] = estimates["median"]["point_estimate"]
pathlib.Path(out).write_text(json.dumps(medians, indent=1, sort_keys=True))
EOF
done

python3 - "$results" "$runs" <<'EOF'
import json, statistics, sys

results, runs = sys.argv[1], int(sys.argv[2])
medians = [json.load(open(f"{results}/run-{i}.json")) for i in range(1, runs + 1)]

LIBDD_T = "libdd-otel-thread-ctx"
LIBDD_P = "libdd-library-config"
OURS = "otel-ctx-writer"
# (row, our benchmark, peer benchmark, whether the 0.8 target applies)
rows = [
    ("attach+detach", f"attach_detach/{OURS}", f"attach_detach/{LIBDD_T}", True),
    ("swap", f"swap/{OURS}", f"swap/{LIBDD_T}", True),
]
for n in (0, 2, 8):
    rows.append((f"update, {n} attrs (libdd also writes its root entry)", f"update/{OURS}/{n}", f"update/{LIBDD_T}/{n}", True))
for n in (0, 2, 8):
    rows.append((f"update, same bytes, root + {n} attrs", f"update_same_bytes/{OURS}/{n}", f"update/{LIBDD_T}/{n}", True))
for n in (0, 2, 8):
    rows.append((f"update, same bytes, root + {n} attrs, caller's hex by table", f"update_same_bytes_hex_table/{OURS}/{n}", f"update/{LIBDD_T}/{n}", False))
rows += [
    ("with_labels 2: append + truncate", f"with_labels_2/{OURS}/append", "with_labels_2/custom-labels", True),
    ("with_labels 2: new context", f"with_labels_2/{OURS}/new", "with_labels_2/custom-labels", False),
    ("with_labels 2: reused context", f"with_labels_2/{OURS}/reuse", "with_labels_2/custom-labels", False),
    ("process publish+unpublish", f"process_publish_unpublish/{OURS}", f"process_publish_unpublish/{LIBDD_P}", False),
    ("process update, 298-byte payload", f"process_update/{OURS}/300B", f"process_update/{LIBDD_P}/300B", False),
    ("process update, 256-name key map", f"process_update/{OURS}/key_map_256", f"process_update/{LIBDD_P}/key_map_256", False),
]

def fmt(ns):
    if ns is None:
        return "-"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"

def peer(name):
    return "custom-labels" if "custom-labels" in name else (LIBDD_P if name.startswith("process") else LIBDD_T)

print()
print(f"Medians over {runs} run(s); ratio = ours / peer, per run and their median; target <= 0.8.")
print()
print("| row | peer | ours | peer time | ratio per run | median ratio | <= 0.8 |")
print("|---|---|---|---|---|---|---|")
missing = []
for label, ours, theirs, target in rows:
    a = [m.get(ours) for m in medians]
    b = [m.get(theirs) for m in medians]
    if None in a or None in b:
        missing.append(label)
        continue
    ratios = [x / y for x, y in zip(a, b)]
    ratio = statistics.median(ratios)
    verdict = ("yes" if ratio <= 0.8 else "NO") if target else "(no target)"
    print(f"| {label} | {peer(theirs)} | {fmt(statistics.median(a))} | {fmt(statistics.median(b))} "
          f"| {' '.join(f'{r:.2f}' for r in ratios)} | {ratio:.2f} | {verdict} |")
if missing:
    print(f"\nmissing measurements for: {', '.join(missing)}", file=sys.stderr)
    sys.exit(1)
EOF
