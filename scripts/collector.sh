#!/usr/bin/env bash
# Builds the OpenTelemetry Collector the tests send profiles through
# (cli/tests/fleet_otlp.rs): the Collector builder (ocb) from the Go module proxy, then a
# Collector of the OTLP receiver, the batch processor and the OTLP/HTTP and debug
# exporters (what cli/deploy/collector.yaml names), every module at
# one pinned release, into a cache folder outside the clone keyed by the release
# (~/.cache/otel-ctx/collector-<release>, or $OTEL_CTX_CACHE/...), so that only a new
# machine pays for the build; target/collector.path names the binary for the tests. A rerun
# with the same manifest finds the binary and does nothing. Needs Go 1.26 or newer (the machine's own in /usr/local/go,
# ahead of Debian's older golang-go) and the Go module proxy.
set -euo pipefail
cd "$(dirname "$0")/.."
# One Collector release: its v0 modules and the v1 modules released with them.
release=0.165.0
stable=1.71.0
if [ -x /usr/local/go/bin/go ]; then
  export PATH="/usr/local/go/bin:$PATH"
fi
version=$(go env GOVERSION)
minor=$(sed -E 's/^go1\.([0-9]+).*/\1/' <<<"$version")
if [ "$minor" -lt 26 ] 2>/dev/null || ! [[ "$minor" =~ ^[0-9]+$ ]]; then
  echo "scripts/collector.sh: the Collector $release needs Go 1.26 or newer; $(command -v go) is $version" >&2
  exit 1
fi
dir="${OTEL_CTX_CACHE:-$HOME/.cache/otel-ctx}/collector-$release"
mkdir -p "$dir" target
binary="$dir/build/otelcol-otel-ctx-test"
manifest="$dir/manifest.yaml"
cat >"$manifest.new" <<YAML
dist:
  name: otelcol-otel-ctx-test
  description: An OpenTelemetry Collector for the otel-ctx tests
  output_path: $dir/build
receivers:
  - gomod: go.opentelemetry.io/collector/receiver/otlpreceiver v$release
processors:
  - gomod: go.opentelemetry.io/collector/processor/batchprocessor v$release
exporters:
  - gomod: go.opentelemetry.io/collector/exporter/otlphttpexporter v$release
  - gomod: go.opentelemetry.io/collector/exporter/debugexporter v$release
providers:
  - gomod: go.opentelemetry.io/collector/confmap/provider/fileprovider v$stable
  - gomod: go.opentelemetry.io/collector/confmap/provider/envprovider v$stable
YAML
if [ -x "$binary" ] && cmp -s "$manifest.new" "$manifest"; then
  rm "$manifest.new"
else
  mv "$manifest.new" "$manifest"
  GOBIN="$dir/bin" go install "go.opentelemetry.io/collector/cmd/builder@v$release"
  "$dir/bin/builder" --config "$manifest"
  "$binary" components >/dev/null
fi
echo "$binary" >target/collector.path
