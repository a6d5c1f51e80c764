#!/usr/bin/env bash
# The reference babysitter CLI (npm @a5c-ai/babysitter-sdk, pinned) into <repo>/.ci-work/ref-cli,
# where the compatibility tests that compare with it (cli/tests/compat_*.rs) and the CLI
# benchmark (cli/benches/vs_reference.rs) look for it; the tests skip, saying why, when it is
# missing. Idempotent: does nothing when the pinned version is already there. Needs node + npm.
set -euo pipefail

pin="0.0.187"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="$repo/.ci-work/ref-cli"
pkg_json="$prefix/node_modules/@a5c-ai/babysitter-sdk/package.json"

if [ -x "$prefix/node_modules/.bin/babysitter" ] && [ -f "$pkg_json" ] \
  && grep -q "\"version\": \"$pin\"" "$pkg_json"; then
  echo "ensure-reference-cli: @a5c-ai/babysitter-sdk $pin already installed in $prefix"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "ensure-reference-cli: npm missing; on Debian: apt-get install -y nodejs npm" >&2
  exit 1
fi
mkdir -p "$prefix"
npm install --no-audit --no-fund --prefix "$prefix" "@a5c-ai/babysitter-sdk@$pin"
echo "ensure-reference-cli: installed @a5c-ai/babysitter-sdk@$pin into $prefix"
