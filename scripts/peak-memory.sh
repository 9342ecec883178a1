#!/usr/bin/env bash
# Peak resident memory (the kernel's maxrss, by GNU time) of a profile, side by side on one
# target in one run:
#
# - the tests' Python service (`sampler-linux/tests/python/service.py` under Debian's
#   python3.11, three CPU-bound workers, publishing through the C ABI), profiled for
#   SECONDS at 99 Hz by `otel-ctx profile` (eBPF), `otel-ctx profile --ptrace`,
#   `perf record --call-graph dwarf` and `py-spy record` (when target/python has it);
# - `otel-ctx profile --all` for SECONDS beside three copies of the `busy_routes` bench
#   target (four threads under their own routes), and nothing else that publishes.
#
# Each tool runs ROUNDS times in turn; the script prints each run's peak. With BEFORE set
# to another build of the tool (a path to its `otel-ctx`), that build runs beside this one.
#
#   scripts/peak-memory.sh [SECONDS]     SECONDS: each profile's duration (default 8)
#
# As root (eBPF, perf). Builds the tool (release, with eBPF), the C ABI library and the
# target. Environment: ROUNDS (default 3), BEFORE, MEMORY_DIR (scratch directory, default a
# new one under /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-8}
rounds=${ROUNDS:-3}
for value in "$seconds" "$rounds"; do
  if ! [[ "$value" =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: scripts/peak-memory.sh [SECONDS]   (SECONDS and ROUNDS: positive whole numbers, not '$value')" >&2
    exit 2
  fi
done
if [ "$(id -u)" != 0 ]; then
  echo "peak-memory.sh: the profiles sample with eBPF and perf; run as root" >&2
  exit 2
fi
if [ -n "${BEFORE:-}" ] && [ ! -x "$BEFORE" ]; then
  echo "peak-memory.sh: BEFORE=$BEFORE is not an executable" >&2
  exit 2
fi
dir=${MEMORY_DIR:-$(mktemp -d /tmp/otel-ctx-memory.XXXXXX)}
mkdir -p "$dir"
target_dir=${CARGO_TARGET_DIR:-$PWD/target}

cargo build --release -q -p otel-ctx --features ebpf -p otel-ctx-ffi
tool=$target_dir/release/otel-ctx
lib=$target_dir/release/libotel_ctx_ffi.so
gcc -O2 -g -fomit-frame-pointer -pthread -I ffi/include -o "$dir/busy_routes" \
  cli/benches/fixtures/busy_routes.c "$lib" "-Wl,-rpath,$(dirname "$lib")"
py_spy=$PWD/target/python/py311/bin/py-spy

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

# The targets run until their standard input ends; a FIFO opened for reading and writing
# never ends. Each prints "ready PID ..." once it publishes.
mkfifo "$dir/stdin"
exec 3<>"$dir/stdin"
ready() {
  for _ in $(seq 100); do
    grep -q '^ready' "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "peak-memory.sh: $1 never said ready" >&2
  exit 1
}

# peak NAME COMMAND...: runs COMMAND under GNU time, prints its peak in MiB.
peak() {
  local name=$1
  shift
  /usr/bin/time -f '%M' -o "$dir/time" "$@" >/dev/null 2>"$dir/stderr" || {
    echo "peak-memory.sh: $name failed:" >&2
    cat "$dir/stderr" >&2
    exit 1
  }
  printf '%-44s %6.1f MiB\n' "$name" "$(awk '{print $1 / 1024}' "$dir/time")"
}

tools=("$tool")
[ -n "${BEFORE:-}" ] && tools+=("$BEFORE")
label() { [ "$1" = "$tool" ] && echo "now" || echo "before"; }

SERVICE_WORKERS=3 /usr/bin/python3.11 sampler-linux/tests/python/service.py ffi "$lib" \
  <&3 >"$dir/service.out" 2>&1 &
service=$!
pids+=("$service")
ready "$dir/service.out"
echo "the Python service (pid $service), ${seconds}s at 99 Hz, $rounds rounds; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
for round in $(seq "$rounds"); do
  for t in "${tools[@]}"; do
    peak "otel-ctx profile, eBPF ($(label "$t"))" \
      "$t" profile "$service" --hz 99 --duration "${seconds}s" -o "$dir/out.pb.gz"
    peak "otel-ctx profile --ptrace ($(label "$t"))" \
      "$t" profile "$service" --ptrace --hz 99 --duration "${seconds}s" -o "$dir/out.pb.gz"
  done
  peak "perf record --call-graph dwarf" \
    perf record -q -F 99 --call-graph dwarf -p "$service" -o "$dir/perf.data" -- sleep "$seconds"
  if [ -x "$py_spy" ]; then
    peak "py-spy record" "$py_spy" record -r 99 -f raw -d "$seconds" -p "$service" -o "$dir/py-spy.txt"
  fi
done
# The DWARF the eBPF profile kept and parsed, in its own words.
"$tool" profile "$service" --hz 99 --duration 2s -o "$dir/out.pb.gz" 2>&1 | grep -o 'DWARF of .*' || true
kill "$service"
wait "$service" 2>/dev/null || true

for n in 1 2 3; do
  "$dir/busy_routes" <&3 >"$dir/busy.$n.out" 2>&1 &
  pids+=($!)
  ready "$dir/busy.$n.out"
done
echo "profile --all beside three busy_routes, ${seconds}s at 99 Hz, $rounds rounds"
for round in $(seq "$rounds"); do
  for t in "${tools[@]}"; do
    rm -rf "$dir/all" && mkdir "$dir/all"
    peak "otel-ctx profile --all ($(label "$t"))" \
      "$t" profile --all --hz 99 --duration "${seconds}s" -o "$dir/all/"
  done
done
