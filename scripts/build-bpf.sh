#!/usr/bin/env bash
# Builds the eBPF sampler's BPF objects checked in beside their source
# (reader-linux/bpf/sampler.<arch>.bpf.o), with clang 19 and libbpf-dev's helper headers,
# so that the reader builds without a C compiler.
#   bash scripts/build-bpf.sh          rebuild them
#   bash scripts/build-bpf.sh --check  fail when a fresh build differs from them
set -euo pipefail
cd "$(dirname "$0")/../reader-linux"
clang="${OTEL_CTX_BPF_CLANG:-clang-19}"
out=bpf
if [ "${1:-}" = "--check" ]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
for arch in x86_64 aarch64; do
  define="OTEL_CTX_ARCH_$(echo "$arch" | tr a-z A-Z)"
  "$clang" -target bpf -O2 -g -Wall -Werror -D"$define" -ffile-prefix-map="$PWD"=. \
    -c bpf/sampler.bpf.c -o "$out/sampler.$arch.bpf.o"
done
if [ "${1:-}" = "--check" ]; then
  for arch in x86_64 aarch64; do
    if ! cmp -s "$out/sampler.$arch.bpf.o" "bpf/sampler.$arch.bpf.o"; then
      echo "reader-linux/bpf/sampler.$arch.bpf.o is not what bpf/sampler.bpf.c builds to:" \
        "run bash scripts/build-bpf.sh and commit the objects" >&2
      exit 1
    fi
  done
  echo "the checked-in BPF objects match their source"
fi
