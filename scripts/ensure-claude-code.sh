#!/usr/bin/env bash
# Installs the pinned Claude Code CLI (npm @anthropic-ai/claude-code) into
# <repo>/.ci-work/harness-claude, where the transport-proxy's Claude Code test looks for it
# (it skips, saying why, when it is missing). Idempotent: does nothing when the pinned version
# is already there. Needs node + npm (Node 20).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="$repo/.ci-work/harness-claude"
pin="2.1.197"
bin="$prefix/node_modules/.bin/claude"

if [ -x "$bin" ] && [ "$("$bin" --version 2>/dev/null | cut -d' ' -f1)" = "$pin" ]; then
  echo "ensure-claude-code: $bin is $pin (already installed)"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "ensure-claude-code: npm missing; on Debian: apt-get install -y nodejs npm" >&2
  exit 1
fi
mkdir -p "$prefix"
npm install --no-audit --no-fund --prefix "$prefix" "@anthropic-ai/claude-code@$pin"
echo "ensure-claude-code: installed @anthropic-ai/claude-code@$pin into $prefix"
