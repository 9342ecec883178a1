#!/usr/bin/env bash
# Builds the example program without libc (writer-linux/examples/nolibc) for x86_64 (the
# default) or aarch64, with the stable toolchain and its own lld, and prints the path of the
# executable on the last line.
#
#   bash scripts/build-nolibc.sh [x86_64|aarch64]
#
# aarch64 needs the rustup target aarch64-unknown-linux-gnu and gcc-aarch64-linux-gnu (its
# driver runs the link); run the result with qemu-aarch64.
set -euo pipefail
cd "$(dirname "$0")/../writer-linux/examples/nolibc"

arch=${1:-x86_64}
case "$arch" in
  x86_64|aarch64) ;;
  *) echo "usage: bash scripts/build-nolibc.sh [x86_64|aarch64]" >&2; exit 2 ;;
esac
target=$arch-unknown-linux-gnu
# Its own target directory by default: the example is a workspace of its own, built with
# flags the main workspace must not get.
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
# The package's .cargo/config.toml holds the flags; --target keeps them off build scripts
# and proc-macros, which run on the host with its C library.
cargo build --release --locked --target "$target" >&2
echo "$CARGO_TARGET_DIR/$target/release/otel-ctx-nolibc"
