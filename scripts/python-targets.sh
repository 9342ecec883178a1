#!/usr/bin/env bash
# Installs the Python targets of the Python profiling tests, cached under target/python
# (a rerun finds them and does nothing):
#   - Debian bookworm's python3.11 (apt), on this machine's root, and its libpython3.11.so
#     with the headers a C program embeds it with (python3.11-dev);
#   - CPython 3.13 from Debian trixie (with its debug build) and 3.14 from Debian sid,
#     each in a folder of its own (debootstrap --variant=minbase), started with chroot by
#     the tests;
#   - ddtrace 4.16 (it publishes OTEP 4947 thread contexts) and py-spy 0.4.3 (the
#     comparison) from PyPI, for CPython 3.11, in target/python/py311.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=target/python
mkdir -p "$dir"
missing=()
for p in python3.11 python3.11-dev python3-pip debootstrap gcc; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# suite, the packages, the interpreter that says they are there. trixie's debug build
# (python3.13d) keeps its symbol table: its _Py_tss_tstate is found by the TLS resolver.
for target in trixie:python3.13,python3.13-dbg:python3.13d sid:python3.14:python3.14; do
  IFS=: read -r suite packages python <<<"$target"
  if [ ! -x "$dir/$suite/usr/bin/$python" ]; then
    rm -rf "${dir:?}/$suite"
    # debootstrap's default mirror.
    debootstrap --variant=minbase --include="$packages" "$suite" "$dir/$suite" \
      >"$dir/$suite.log" 2>&1 ||
      { tail -20 "$dir/$suite.log" >&2; exit 1; }
  fi
done
if [ ! -x "$dir/py311/bin/py-spy" ] || [ ! -d "$dir/py311/ddtrace" ]; then
  /usr/bin/python3.11 -m pip install --quiet --disable-pip-version-check \
    --root-user-action=ignore --upgrade --target "$dir/py311" ddtrace==4.16.0 py-spy==0.4.3
fi
echo "Python targets in $dir: 3.11 (/usr/bin), 3.13 (trixie), 3.14 (sid), ddtrace and py-spy"
