#!/usr/bin/env bash
# What a new user does: a fresh `cargo new` project outside the workspace, set up as the
# README's "Rust, with `tracing`" section says, verbatim (its Cargo.toml dependencies,
# build.rs and src/main.rs, taken from the README itself), with the crates by path; it
# builds, runs, and `otel-ctx check` passes it. Needs root (the check stops threads).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cargo build --quiet --manifest-path "$root/Cargo.toml" -p otel-ctx
otel_ctx="${CARGO_TARGET_DIR:-$root/target}/debug/otel-ctx"

cd "$work"
cargo new --quiet --bin app
cd app
python3 - "$root" <<'PY'
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1])
readme = (root / "README.md").read_text()

def block(marker):
    match = re.search(re.escape(f"<!-- {marker} -->") + r"\n```\w*\n(.*?)```", readme, re.S)
    if not match:
        sys.exit(f"README.md has no block marked {marker!r}")
    return match.group(1)

manifest = block("checked: scripts/fresh-project.sh")
# The crates are not published: the same dependencies, by path.
paths = {
    "otel-ctx-tracing": root / "integrations/tracing",
    "otel-ctx-export": root / "writer-linux/export",
}
for name, path in paths.items():
    manifest, n = re.subn(rf'^{re.escape(name)} = "[^"]*"$', f'{name} = {{ path = "{path}" }}',
                          manifest, flags=re.M)
    if n != 1:
        sys.exit(f"the README's Cargo.toml has no line {name} = \"<version>\"")
cargo = pathlib.Path("Cargo.toml")
cargo.write_text(cargo.read_text().replace("[dependencies]\n", "") + manifest)
pathlib.Path("build.rs").write_text(block("compiled: examples/build.rs"))
pathlib.Path("src/main.rs").write_text(block("compiled: examples/src/bin/tracing_service.rs"))
PY
cargo build --quiet
OTEL_SERVICE_NAME=fresh-project "$otel_ctx" check --observe 1s -- ./target/debug/app
echo "a fresh project set up as the README says passes otel-ctx check"
