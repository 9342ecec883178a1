#!/usr/bin/env bash
# A long run of `otel-ctx profile --all --otlp`: does the tool's memory stay flat while
# processes come and go? Three publishers (the `busy_routes` bench target: four threads
# under their own routes) run throughout, a fourth is started and stopped every CHURN
# seconds, and a receiver on 127.0.0.1 takes the requests (a request every 10 s). Every
# SAMPLE seconds (read between churns, so no more often than CHURN) the script prints the
# tool's resident memory (VmRSS) and peak (VmHWM); at the end, the tool's own summary
# (SIGUSR1, then SIGTERM and its final flush).
#
#   scripts/soak.sh [MINUTES]     MINUTES: how long (default 60)
#
# As root (eBPF). Builds the tool (release, with eBPF), the C ABI library and the target.
# Environment: CHURN (seconds, default 20), SAMPLE (seconds, default 60), SOAK_DIR
# (scratch directory, default a new one under /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."

# positive NAME VALUE: exits with a usage message unless VALUE is a positive whole number.
positive() {
  if ! [[ "$2" =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: scripts/soak.sh [MINUTES]   ($1 must be a positive whole number, not '$2')" >&2
    exit 2
  fi
}
minutes=${1:-60}
churn=${CHURN:-20}
sample=${SAMPLE:-60}
positive MINUTES "$minutes"
positive CHURN "$churn"
positive SAMPLE "$sample"
if [ "$(id -u)" != 0 ]; then
  echo "soak.sh: profile --all samples with eBPF; run as root" >&2
  exit 2
fi
dir=${SOAK_DIR:-$(mktemp -d /tmp/otel-ctx-soak.XXXXXX)}
mkdir -p "$dir"
target_dir=${CARGO_TARGET_DIR:-$PWD/target}

cargo build --release -q -p otel-ctx --features ebpf -p otel-ctx-ffi
tool=$target_dir/release/otel-ctx
lib=$target_dir/release/libotel_ctx_ffi.so
gcc -O2 -g -fomit-frame-pointer -pthread -I ffi/include -o "$dir/busy_routes" \
  cli/benches/fixtures/busy_routes.c "$lib" "-Wl,-rpath,$(dirname "$lib")"

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

# The receiver: answers every POST with 200 and counts the requests and their bytes.
python3 - "$dir/port" >"$dir/receiver.log" 2>&1 <<'EOF' &
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    requests = 0
    body = 0
    def do_POST(self):
        n = int(self.headers.get("Content-Length", 0))
        self.rfile.read(n)
        H.requests += 1
        H.body += n
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()
        print(f"requests {H.requests} bytes {H.body}", flush=True)
    def log_message(self, *a):
        pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
open(sys.argv[1], "w").write(str(s.server_port))
s.serve_forever()
EOF
pids+=($!)
for _ in $(seq 50); do [ -s "$dir/port" ] && break; sleep 0.1; done
port=$(cat "$dir/port")

# The publishers: the target runs until its standard input ends; a FIFO opened for reading
# and writing never ends.
mkfifo "$dir/stdin"
exec 3<>"$dir/stdin"
for _ in 1 2 3; do
  "$dir/busy_routes" <&3 >/dev/null &
  pids+=($!)
done

"$tool" profile --all --hz 99 --duration 0 --export-interval 10s \
  --otlp="http://127.0.0.1:$port" >"$dir/tool.out" 2>"$dir/tool.err" &
tool_pid=$!
pids+=("$tool_pid")

mem() {
  awk '/^VmHWM/ {peak = $2} /^VmRSS/ {rss = $2}
    END {printf "resident %.2f MiB, peak %.2f MiB", rss / 1024, peak / 1024}' "/proc/$tool_pid/status"
}
start=$(date +%s)
end=$((start + minutes * 60))
next_sample=$((start + 20))
churned=0
printf '%6s  %s\n' "elapsed" "memory of the tool"
while [ "$(date +%s)" -lt "$end" ]; do
  "$dir/busy_routes" <&3 >/dev/null &
  churn_pid=$!
  churned=$((churned + 1))
  sleep "$churn"
  kill "$churn_pid" 2>/dev/null || true
  wait "$churn_pid" 2>/dev/null || true
  now=$(date +%s)
  if [ "$now" -ge "$next_sample" ]; then
    printf '%5ds  %s\n' "$((now - start))" "$(mem)"
    next_sample=$((next_sample + sample))
  fi
  kill -0 "$tool_pid" 2>/dev/null || { echo "soak.sh: the tool exited" >&2; cat "$dir/tool.err" >&2; exit 1; }
done

kill -USR1 "$tool_pid"
sleep 1
kill -TERM "$tool_pid"
wait "$tool_pid" || true
echo "churned processes: $churned"
echo "receiver: $(tail -1 "$dir/receiver.log")"
echo "the tool's summary (stderr):"
cat "$dir/tool.err"
