#!/usr/bin/env bash
# Installs the Kafka-compatible broker the integration tests start: nisshi 0.8.1 from crates.io.
# It needs rustc >= 1.96, so it builds with a nightly toolchain. Installed once per machine
# under $BATON_BROKER_ROOT (default /opt/baton/nisshi-0.8.1); later runs skip the build.
set -euo pipefail
root="${BATON_BROKER_ROOT:-/opt/baton/nisshi-0.8.1}"
bin="$root/bin/nisshi"
if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "0.8.1"; then
  echo "broker: $bin is installed"
  exit 0
fi
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  echo "broker: installing a nightly toolchain (nisshi needs rustc >= 1.96)"
  rustup toolchain install nightly --profile minimal
fi
echo "broker: building nisshi 0.8.1 into $root (about 20-40 minutes on 2 cores, once per machine)"
cargo +nightly install nisshi --version 0.8.1 --locked --no-default-features \
  --features dynostore,libsql --root "$root"
"$bin" --version
