#!/usr/bin/env bash
# The project's whole test suite: formatting, lints, docs, every crate's tests on
# x86_64, the cross targets (aarch64 under qemu-user, musl, no_std), and the vectors.
set -euo pipefail
cd "$(dirname "$0")/.."

# What a test expects is set by the test itself: none of these, inherited, may change it
# (a service's name, an exporter's destination, a debuginfod server, a proxy in front of
# loopback, the dynamic linker's TLS, the Python service's workers, man's search path).
unset OTEL_SERVICE_NAME OTEL_RESOURCE_ATTRIBUTES DEBUGINFOD_URLS GLIBC_TUNABLES \
  SERVICE_WORKERS MANPATH http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
while read -r name; do unset "$name"; done < <(compgen -e | grep -E '^OTEL_EXPORTER_OTLP_' || true)

log=$(mktemp)
trap 'rm -f "$log"' EXIT
# Each heading, and the closing line, say how long the suite has run: where its time
# goes, from any log.
elapsed() { printf '%dm%02ds' $((SECONDS / 60)) $((SECONDS % 60)); }
step() { printf '\n=== %s (at %s)\n' "$*" "$(elapsed)"; }
run_tests() { "$@" 2>&1 | tee -a "$log"; }

# --quick: what needs neither root nor the cross toolchains (lints, docs, unit tests, the
# vectors, the README's blocks).
if [ "${1:-}" = "--quick" ]; then
  step "quick: format, lints, docs"
  cargo fmt --all -- --check
  cargo clippy --workspace --all-targets -- -D warnings
  RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps -q
  step "quick: unit tests, the vectors, the README's blocks"
  cargo test --workspace --lib --bins
  cargo test -p otel-ctx-codec
  python3 spec-vectors/generate.py --check
  python3 scripts/readme-blocks.py
  exit 0
fi

step "format, lints, docs"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo clippy -p otel-ctx-writer --no-default-features -- -D warnings
cargo clippy -p otel-ctx-writer --no-default-features --features alloc -- -D warnings
(cd writer-linux/examples/nolibc && cargo fmt -- --check &&
  cargo clippy -q --release --target x86_64-unknown-linux-gnu -- -D warnings)
# The fuzz targets' crate is outside the workspace: it follows the reader's API here, not
# only when the fuzzers run at the end.
(cd fuzz && cargo clippy -q --all-targets -- -D warnings)
cargo clippy -p otel-ctx-opentelemetry --features context-observer --all-targets -- -D warnings
cargo clippy -p otel-ctx --features demo --all-targets -- -D warnings
# The profile layer for an embedder that writes files only: no exporter.
cargo clippy -p otel-ctx-profile --no-default-features --all-targets -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps -q

step "dependency rules (ARCHITECTURE.md)"
# The lines of the tracked files `$1` names, each up to its `#[cfg(test)]` module.
lines_before_tests() {
  git ls-files "$1" | while read -r f; do
    awk '/^#\[cfg\(test\)\]/ { n = NR - 1; exit } { n = NR } END { print n }' "$f"
  done | awk '{ s += $1 } END { print s + 0 }'
}
# The reader is a library a profiler embeds: no command line, no JSON, no writer.
reader_tree=$(cargo tree -q -p otel-ctx-reader -e normal --prefix none)
for banned in clap serde otel-ctx-writer; do
  if grep -q "^$banned v" <<<"$reader_tree"; then
    echo "otel-ctx-reader depends on $banned" >&2
    exit 1
  fi
done
# The reader stays lean for the profilers that embed it: no unwinder, no symbolizer, no
# output format; those are the profile layer's (otel-ctx-profile), which sits above it.
for banned in framehop addr2line gimli inferno prost flate2 otel-ctx-profile; do
  if grep -q "^$banned v" <<<"$reader_tree"; then
    echo "otel-ctx-reader depends on $banned (the profile layer's)" >&2
    exit 1
  fi
done
# The reader reads contexts: sampling at a rate, the BPF programs and the CPython walker
# are the sampler's (otel-ctx-sampler), which sits on it.
for banned in aya otel-ctx-sampler fastrand; do
  if grep -q "^$banned v" <<<"$reader_tree"; then
    echo "otel-ctx-reader depends on $banned (the sampler's)" >&2
    exit 1
  fi
done
if [ -e reader-linux/bpf ] || git ls-files 'reader-linux/src/*' | grep -qE '/(ebpf|python|sampler)(/|\.rs)'; then
  echo "reader-linux holds an eBPF, Python or sampler module (the sampler's)" >&2
  exit 1
fi
sampler_tree=$(cargo tree -q -p otel-ctx-sampler -e normal --features ebpf --prefix none)
for banned in clap serde otel-ctx-writer framehop addr2line gimli inferno prost flate2 otel-ctx-profile otel-ctx-conformance; do
  if grep -q "^$banned v" <<<"$sampler_tree"; then
    echo "otel-ctx-sampler depends on $banned" >&2
    exit 1
  fi
done
if ! grep -q "^otel-ctx-reader v" <<<"$sampler_tree"; then
  echo "otel-ctx-sampler is not on top of the reader" >&2
  exit 1
fi
if ! cargo tree -q -p otel-ctx-profile -e normal --prefix none | grep -q "^otel-ctx-sampler v"; then
  echo "otel-ctx-profile is not on top of the sampler" >&2
  exit 1
fi
# The reader is the thin one: at most 6,000 lines before its tests.
reader_lines=$(lines_before_tests 'reader-linux/src/*.rs')
if [ "$reader_lines" -gt 6000 ]; then
  echo "reader-linux/src has $reader_lines lines before its tests (at most 6000)" >&2
  exit 1
fi
# Its exporter (feature `http`) is the only way to an HTTP client or TLS: an embedder that
# turns the feature off links neither.
profile_bare=$(cargo tree -q -p otel-ctx-profile -e normal --no-default-features --prefix none)
for banned in ureq rustls; do
  if grep -q "^$banned v" <<<"$profile_bare"; then
    echo "otel-ctx-profile without default features depends on $banned" >&2
    exit 1
  fi
done
# The read-side tool, in its default build, carries no writer: the demo service (writer,
# tokio, the OpenTelemetry SDK) is its feature `demo`, and it exports no TLS slot.
cli_tree=$(cargo tree -q -p otel-ctx -e normal --prefix none)
for banned in otel-ctx-writer otel-ctx-tracing tokio; do
  if grep -q "^$banned v" <<<"$cli_tree"; then
    echo "otel-ctx's default build depends on $banned" >&2
    exit 1
  fi
done
# opentelemetry-proto, whose generated OTLP types the profile layer writes, names the
# OpenTelemetry SDK as a dependency (none of its features, none of it used): the SDK is in
# the tool's default build through it, and through nothing else.
sdk_dependents=$(cargo tree -q -p otel-ctx -e normal -i opentelemetry_sdk --depth 1 --prefix none 2>/dev/null |
  tail -n +2 | awk '{print $1}' | sort -u | tr '\n' ' ')
if [ -n "$sdk_dependents" ] && [ "$sdk_dependents" != "opentelemetry-proto " ]; then
  echo "otel-ctx's default build reaches opentelemetry_sdk through: $sdk_dependents" >&2
  exit 1
fi
cargo build -q -p otel-ctx
if nm -D --defined-only target/debug/otel-ctx | grep -q otel_thread_ctx_v1; then
  echo "otel-ctx's default build exports otel_thread_ctx_v1" >&2
  exit 1
fi
# The codec without features: zerocopy, micropb, heapless and their own dependencies.
codec_direct=$(cargo tree -q -p otel-ctx-codec -e normal --no-default-features --depth 1 --prefix none | tail -n +2 | awk '{print $1}' | sort -u | tr '\n' ' ')
if [ "$codec_direct" != "heapless micropb zerocopy " ]; then
  echo "otel-ctx-codec depends on: $codec_direct" >&2
  exit 1
fi
# Every unsafe block of the reader is in its system-call module.
if grep -rlE "unsafe *(\{|fn |impl )" reader-linux/src | grep -v "^reader-linux/src/sys/"; then
  echo "unsafe outside reader-linux/src/sys/" >&2
  exit 1
fi
# The writer without default features: no allocator, and no libc (rustix's raw backend).
writer_tree=$(cargo tree -q -p otel-ctx-writer -e normal --no-default-features --prefix none)
if grep -q "^libc v" <<<"$writer_tree"; then
  echo "otel-ctx-writer without default features depends on libc" >&2
  exit 1
fi
# No library source file over 800 lines before its tests (tests, benches, examples and
# fuzz targets aside).
long=$(git ls-files '*.rs' | grep -vE '/(tests|benches|examples|fuzz)/' | while read -r f; do
  awk -v f="$f" '/^#\[cfg\(test\)\]/ { n = NR - 1; exit } { n = NR } END { if (n > 800) print n, f }' "$f"
done)
if [ -n "$long" ]; then
  echo "source files over 800 lines before their tests:" >&2
  echo "$long" >&2
  exit 1
fi
# The tool is clap and rendering: at most 3,100 lines before its tests, and it leaves
# sampling, following processes and delivery to the libraries.
cli_lines=$(lines_before_tests 'cli/src/*.rs')
if [ "$cli_lines" -gt 3100 ]; then
  echo "cli/src has $cli_lines lines before its tests (at most 3100)" >&2
  exit 1
fi
# BENCHMARKS.md holds the current figures against their targets, then the method; what
# they were before is in git.
bench_lines=$(wc -l <BENCHMARKS.md)
if [ "$bench_lines" -gt 450 ]; then
  echo "BENCHMARKS.md has $bench_lines lines (at most 450)" >&2
  exit 1
fi
if git grep -nE 'EbpfSampler|sample_with_stack_into|sample_into|read_all\(|ureq::' -- 'cli/src/*.rs'; then
  echo "the tool calls the eBPF sampler, a thread reader's sampling or the HTTP client itself" >&2
  exit 1
fi
# The reader's root: at most 30 names (modules and re-exports), what a profiler author
# needs; the rest is in named modules.
root_names=$(python3 - <<'PY'
import re
lib = open("reader-linux/src/lib.rs").read()
names = re.findall(r"^pub mod (\w+);", lib, re.M)
for group in re.findall(r"^pub use [\w:]+::\{([^}]*)\};", lib, re.M | re.S):
    names += [n.strip() for n in group.split(",") if n.strip()]
names += re.findall(r"^pub use [\w:]+::(\w+);", lib, re.M)
print(len(names))
PY
)
if [ "$root_names" -gt 30 ]; then
  echo "the reader's root exports $root_names names (at most 30)" >&2
  exit 1
fi
# On the reading side, /proc/<pid>/stat, comm and status are parsed in one file.
procfs_readers=$(git grep -lE '/(stat|comm|status)"|task/\{[a-z]+\}/(stat|comm)' -- \
  'reader-linux/src/*.rs' 'sampler-linux/src/*.rs' 'profile/src/*.rs' 'conformance/src/*.rs' 'cli/src/*.rs' |
  grep -v '^reader-linux/src/procfs.rs$' || true)
if [ -n "$procfs_readers" ]; then
  echo "/proc's stat, comm or status parsed outside reader-linux/src/procfs.rs:" >&2
  echo "$procfs_readers" >&2
  exit 1
fi
# No circle of files within a crate: no two files, and no ring of files, import each other
# (by `use`, a re-export or an inline path), in every crate of the workspace.
python3 scripts/import-cycles.py
echo "dependency rules hold"

step "the crates meant for crates.io package, and build from their tarballs"
# Cargo unpacks the tarballs of its temporary registry under CARGO_HOME, in a folder named
# after the clone's path, and does not unpack them again when that folder exists: a second
# clone at the same path would build the first one's sources. Those folders (the only ones
# of a registry without a name, hence the leading dash) go before every packaging.
rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*
cargo package --workspace --allow-dirty --exclude otel-ctx-conformance-helpers \
  --exclude otel-ctx-examples --exclude otel-ctx-ffi-bench 2>&1 | grep -v "^warning: ignoring"

step "no_std codec and cross builds"
cargo build -q -p otel-ctx-codec --target x86_64-unknown-none
cargo build -q -p otel-ctx-codec --features alloc --target x86_64-unknown-none
cargo build -q -p otel-ctx-codec --target aarch64-unknown-linux-gnu
cargo build -q -p otel-ctx-writer --no-default-features --target x86_64-unknown-linux-musl
# The integrations and the writer's future wrappers build (and do nothing) outside Linux.
for target in x86_64-apple-darwin x86_64-unknown-freebsd; do
  cargo check -q --target "$target" -p otel-ctx-writer -p otel-ctx-tracing -p otel-ctx-opentelemetry \
    --features otel-ctx-tracing/demo-service,otel-ctx-opentelemetry/context-observer
done

step "spec vectors are up to date, the README's code is compiled code"
python3 spec-vectors/generate.py --check
python3 scripts/readme-blocks.py

step "workspace tests (x86_64)"
run_tests cargo test --workspace
# The observer tests need the feature that installs a process-wide context observer.
run_tests cargo test -p otel-ctx-opentelemetry --features context-observer
# The tool with its demo service (the default build is tested above).
run_tests cargo test -p otel-ctx --features demo
cargo build -q -p otel-ctx-profile --target aarch64-unknown-linux-gnu

step "the README's install block, and fresh projects set up as it says (crates by path)"
bash scripts/fresh-project.sh

step "eBPF sampler (feature ebpf: root, BTF, tracefs; clang 19 to check the checked-in objects)"
bash scripts/build-bpf.sh --check
cargo clippy -p otel-ctx-sampler -p otel-ctx --all-targets --features otel-ctx/ebpf,otel-ctx/demo -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc -p otel-ctx-sampler --features ebpf --no-deps -q
cargo build -q -p otel-ctx-sampler --features ebpf --examples
cargo build -q -p otel-ctx-sampler --features ebpf --target aarch64-unknown-linux-gnu
run_tests cargo test -p otel-ctx-sampler --features ebpf --lib --test ebpf_matrix --test sampler --test python_frames --test cpu_time
# With them: where profiles are written, the README's recipe, and the static binary of
# scripts/build-static.sh (musl, with the eBPF sampler), built by that script (an
# unoptimized release build: see the test).
run_tests cargo test -p otel-ctx --features ebpf,demo --bin otel-ctx --test watch_ebpf --test profile_cli --test fleet_otlp \
  --test python_profile --test python_module_level --test python_hostile \
  --test symbols_cli --test perf_maps_cli --test profile_outputs --test readme_recipe --test static_binary \
  --test java_agent --test otlp_tls --test off_cpu
# Every test of the tool that builds only with `ebpf` is in that list: one left out would
# run nowhere.
for t in $(grep -l '^#!\[cfg(feature = "ebpf")\]' cli/tests/*.rs); do
  name=$(basename "$t" .rs)
  grep -q -- "--test $name\b" scripts/test.sh || { echo "cli/tests/$name.rs needs ebpf and the eBPF step does not run it" >&2; exit 1; }
done

step "codec and writers on aarch64 (qemu-user: no ptrace, no seccomp)"
# Property tests under emulation: fewer cases (all 256 run natively above).
run_tests env PROPTEST_CASES=32 cargo test -p otel-ctx-codec --target aarch64-unknown-linux-gnu
run_tests cargo test -p otel-ctx-writer --target aarch64-unknown-linux-gnu --lib --test 'process_*' --test 'thread_*' --test no_alloc

step "thread-context writer on musl"
run_tests cargo test -p otel-ctx-writer --target x86_64-unknown-linux-musl --test 'thread_*'

step "thread-context reader: in-process resolver check on aarch64, and without spare static TLS"
run_tests cargo test -p otel-ctx-reader --target aarch64-unknown-linux-gnu --test tls_selfcheck
no_static_tls=GLIBC_TUNABLES=glibc.rtld.optional_static_tls=0
run_tests env "$no_static_tls" cargo test -p otel-ctx-reader --target aarch64-unknown-linux-gnu --test tls_selfcheck
run_tests env "$no_static_tls" cargo test -p otel-ctx-reader --test tls_selfcheck

step "loom models of the publication protocols (release, at most 3 preemptions)"
run_tests env LOOM_MAX_PREEMPTIONS=3 RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
  cargo test -p otel-ctx-writer --release --lib loom

step "miri on the codec"
bash scripts/miri.sh 2>&1 | tee -a "$log"

step "fuzzing: every target for a short bounded time"
bash scripts/fuzz.sh

# Sum every test binary's result line into one closing line.
passed=$(grep -Eo '^test result: [a-zA-Z]+\. [0-9]+ passed' "$log" | grep -Eo '[0-9]+ passed' | awk '{s+=$1} END {print s+0}')
failed=$(grep -Eo '^test result: [a-zA-Z]+\. [0-9]+ passed; [0-9]+ failed' "$log" | grep -Eo '[0-9]+ failed' | awk '{s+=$1} END {print s+0}')
printf '\n%s passed, %s failed, in %s\n' "$passed" "$failed" "$(elapsed)"
[ "$failed" -eq 0 ]
