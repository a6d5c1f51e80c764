#!/usr/bin/env bash
# Installs the pinned Gemini CLI (npm @google/gemini-cli) into
# <repo>/.ci-work/harness-gemini, where the transport-proxy's Gemini CLI test looks for it
# (it skips, saying why, when it is missing). Idempotent: does nothing when the pinned version
# is already there. Needs node + npm (Node 20).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="$repo/.ci-work/harness-gemini"
pin="0.61.0"
bin="$prefix/node_modules/.bin/gemini"

if [ -x "$bin" ] && [ "$("$bin" --version 2>/dev/null | awk '{print $NF}')" = "$pin" ]; then
  echo "ensure-gemini-cli: $bin is $pin (already installed)"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "ensure-gemini-cli: npm missing; on Debian: apt-get install -y nodejs npm" >&2
  exit 1
fi
mkdir -p "$prefix"
npm install --no-audit --no-fund --prefix "$prefix" "@google/gemini-cli@$pin"
echo "ensure-gemini-cli: installed @google/gemini-cli@$pin into $prefix"
