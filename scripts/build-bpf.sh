#!/usr/bin/env bash
# Builds the BPF objects checked in beside their source, with clang 19 and libbpf-dev's
# helper headers, so that the sampler builds without a C compiler: the eBPF sampler
# (sampler-linux/bpf/sampler.<arch>.bpf.o, one per architecture: it reads the kernel's task
# structure) and the publication hook (sampler-linux/bpf/publications.bpf.o, one for both:
# it reads only a tracepoint's record, the same on every little-endian architecture).
#   bash scripts/build-bpf.sh          rebuild them
#   bash scripts/build-bpf.sh --check  fail when a fresh build differs from them
set -euo pipefail
cd "$(dirname "$0")/../sampler-linux"
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
"$clang" -target bpfel -O2 -g -Wall -Werror -ffile-prefix-map="$PWD"=. \
  -c bpf/publications.bpf.c -o "$out/publications.bpf.o"
if [ "${1:-}" = "--check" ]; then
  for object in sampler.x86_64 sampler.aarch64 publications; do
    if ! cmp -s "$out/$object.bpf.o" "bpf/$object.bpf.o"; then
      echo "sampler-linux/bpf/$object.bpf.o is not what its source builds to:" \
        "run bash scripts/build-bpf.sh and commit the objects" >&2
      exit 1
    fi
  done
  echo "the checked-in BPF objects match their source"
fi
