#!/usr/bin/env bash
# Installs the pinned Codex CLI (npm @openai/codex) into
# <repo>/.ci-work/harness-codex, where the transport-proxy's Codex test looks for it
# (it skips, saying why, when it is missing). Idempotent: does nothing when the pinned version
# is already there. Needs node + npm (Node 20).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="$repo/.ci-work/harness-codex"
pin="0.171.0"
bin="$prefix/node_modules/.bin/codex"

if [ -x "$bin" ] && [ "$("$bin" --version 2>/dev/null | awk '{print $NF}')" = "$pin" ]; then
  echo "ensure-codex: $bin is $pin (already installed)"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "ensure-codex: npm missing; on Debian: apt-get install -y nodejs npm" >&2
  exit 1
fi
mkdir -p "$prefix"
npm install --no-audit --no-fund --prefix "$prefix" "@openai/codex@$pin"
echo "ensure-codex: installed @openai/codex@$pin into $prefix"
