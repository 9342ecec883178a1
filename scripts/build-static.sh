#!/usr/bin/env bash
# Builds otel-ctx, with its eBPF sampler, as one static executable: musl's C library linked
# in, no libgcc_s, nothing loaded at run time, so that it can be copied into a container or
# onto a host as it is. Prints the executable's path last.
#
# Needs the rustup target x86_64-unknown-linux-musl (rustup target add
# x86_64-unknown-linux-musl) and musl-gcc (Debian's musl-tools): ring, under rustls for
# `--otlp https://`, compiles C and assembly, and musl-gcc is the C compiler that targets
# musl. The BPF objects are checked in: no clang. A release build from scratch takes
# several minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

target=x86_64-unknown-linux-musl
if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
  echo "build-static.sh: the Rust target $target is missing: rustup target add $target" >&2
  exit 2
fi
if [ -z "${CC_x86_64_unknown_linux_musl:-}" ]; then
  if ! command -v musl-gcc >/dev/null; then
    echo "build-static.sh: musl-gcc is missing: apt-get install musl-tools" >&2
    exit 2
  fi
  export CC_x86_64_unknown_linux_musl=musl-gcc
fi

cargo build --locked --release --target "$target" -p otel-ctx --features ebpf
realpath "${CARGO_TARGET_DIR:-target}/$target/release/otel-ctx"
