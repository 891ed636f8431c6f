#!/usr/bin/env bash
# Every test: installs the broker the integration tests start when it is missing (once per
# machine, scripts/install-broker.sh), then runs the workspace's tests. Extra arguments go to
# `cargo test` (e.g. `bash scripts/test.sh -p baton-core`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-broker.sh
cargo test --workspace "$@"
