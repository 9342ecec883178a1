#!/usr/bin/env bash
# What a new user does, with the README's blocks run as they are written:
#   1. its install block, in this checkout, for a user whose home is a scratch folder:
#      `cargo install --locked ...`, then the shell completions and the manual pages;
#   2. a new project beside a clone of this repository (here, a link to this checkout
#      named `otel-ctx`), set up as "Rust, with `tracing`" says: its Cargo.toml lines,
#      build.rs and src/main.rs; it builds and serves until stopped, `otel-ctx ps` finds it,
#      `otel-ctx check` passes it and `otel-ctx profile` profiles it;
#   3. another set up as "Rust, with the OpenTelemetry SDK" says, which `otel-ctx check`
#      passes.
# Needs root (the check stops threads, the profile loads BPF programs).
#
# The install builds in release mode; unless CARGO_PROFILE_RELEASE_OPT_LEVEL says
# otherwise, without optimizations (0): this checks what the line installs, not how fast
# the tool runs, at a third of the build's time. CARGO_PROFILE_RELEASE_OPT_LEVEL=3 builds
# it as a user gets it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'kill "${service:-}" 2>/dev/null || true; rm -rf "$work"' EXIT

# The README's fenced block of kind $1 that contains $2, as it is.
block() {
  python3 - "$root/README.md" "$1" "$2" <<'PY'
import re
import sys

readme, kind, needle = open(sys.argv[1]).read(), sys.argv[2], sys.argv[3]
found = [b for b in re.findall(r"```" + kind + r"\n(.*?)```", readme, re.S) if needle in b]
if len(found) != 1:
    sys.exit(f"README.md: {len(found)} {kind} blocks contain {needle!r}, not 1")
sys.stdout.write(found[0])
PY
}

# 1. Install, as a user whose home is $work/home, with the toolchain and the registry
# cache of this machine.
export CARGO_HOME="${CARGO_HOME:-$HOME/.cargo}" RUSTUP_HOME="${RUSTUP_HOME:-$HOME/.rustup}"
export HOME="$work/home" CARGO_INSTALL_ROOT="$work/home/.cargo"
export PATH="$CARGO_INSTALL_ROOT/bin:$PATH"
export CARGO_PROFILE_RELEASE_OPT_LEVEL="${CARGO_PROFILE_RELEASE_OPT_LEVEL:-0}"
mkdir -p "$HOME"
install=$(block sh "cargo install")
(cd "$root" && bash -euo pipefail -c "$install")
[ "$(command -v otel-ctx)" = "$CARGO_INSTALL_ROOT/bin/otel-ctx" ]
man -w otel-ctx >/dev/null
test -s "$HOME/.local/share/bash-completion/completions/otel-ctx"
echo "the README's install block installed otel-ctx, its completions and its manual pages"

# A new project named $1 beside the clone, set up with the README's Cargo.toml block that
# contains $2, build.rs and the src/main.rs of $3; built into a target folder the two
# projects share.
project() {
  cd "$work"
  cargo new --quiet --bin "$1"
  cd "$1"
  block toml "$2" >>Cargo.toml
  python3 - <<'PY'
# `cargo new` wrote an empty [dependencies] table; the README's block has its own.
import pathlib
manifest = pathlib.Path("Cargo.toml")
manifest.write_text(manifest.read_text().replace("[dependencies]\n", "", 1))
PY
  block rust "otel_ctx_export::export_tls_symbol" >build.rs
  block rust "$3" >src/main.rs
  CARGO_TARGET_DIR="$work/target" cargo build --quiet
}

# 2. "Rust, with `tracing`": a clone beside the project, as the README's paths assume.
ln -s "$root" "$work/otel-ctx"
project checkout otel-ctx-tracing "otel_ctx_tracing::ThreadContextLayer"
# A shell script's background commands ignore Ctrl-C, and so does everything started
# from a shell that ignores it (a background job): the service gets SIGINT's default
# disposition back, as it has when a user starts it from a terminal.
OTEL_SERVICE_NAME=fresh-project env --default-signal=INT "$work/target/debug/checkout" </dev/null >/dev/null &
service=$!
pid=
for _ in $(seq 100); do
  pid=$(otel-ctx ps --json 2>/dev/null | python3 -c '
import json, sys
print(*[p["pid"] for p in json.load(sys.stdin)["processes"] if p["service.name"] == "fresh-project"])')
  [ -n "$pid" ] && break
  sleep 0.1
done
[ "$pid" = "$service" ] || { echo "otel-ctx ps did not list the service ($service): ${pid:-none}" >&2; exit 1; }
otel-ctx check "$pid"
otel-ctx profile "$pid" --duration 2s -o "$work/svc.svg" --by http.route 2>"$work/summary"
grep -q "(eBPF)" "$work/summary" || { cat "$work/summary" >&2; exit 1; }
grep -q "/checkout" "$work/svc.svg"
# It serves until stopped: Ctrl-C.
kill -INT "$service"
for _ in $(seq 100); do
  kill -0 "$service" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$service" 2>/dev/null; then
  echo "the service did not stop within 10 s of SIGINT" >&2
  exit 1
fi
status=0
wait "$service" || status=$?
[ "$status" -eq 130 ] || { echo "the service ended with $status, not by SIGINT" >&2; exit 1; }
service=
echo "a fresh project set up as the README says runs until Ctrl-C, and otel-ctx ps, check and profile work on it"

# 3. "Rust, with the OpenTelemetry SDK".
project checkout-sdk otel-ctx-opentelemetry "ProcessContextProcessor::new()"
otel-ctx check --observe 1s -- "$work/target/debug/checkout-sdk"
echo "a fresh project set up with the OpenTelemetry SDK as the README says passes otel-ctx check"
