#!/usr/bin/env bash
# Installs one pinned harness CLI from npm into <repo>/.ci-work/harness-<dir>, where the
# real-harness tests (transport-proxy, harness-launcher) look for it and skip, saying why, when
# it is missing. Idempotent: does nothing when the pinned version already answers --version
# (on stdout or stderr). Needs node + npm (Node 20). Called by the scripts/ensure-<cli>.sh
# wrappers, which hold the pins.
#
#   scripts/ensure-npm-cli.sh <dir> <npm package> <version> <bin> [<folder under .ci-work>]
#
# The folder defaults to harness-<dir>.
set -euo pipefail

[ "$#" -eq 4 ] || [ "$#" -eq 5 ] || {
  echo "usage: $0 <dir> <npm package> <version> <bin> [<folder under .ci-work>]" >&2
  exit 2
}
dir="$1" pkg="$2" pin="$3" name="$4" folder="${5:-harness-$1}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="$repo/.ci-work/$folder"
bin="$prefix/node_modules/.bin/$name"
tag="ensure-$dir"

if [ -x "$bin" ] && [ "$("$bin" --version 2>&1 | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' | head -n1)" = "$pin" ]; then
  echo "$tag: $bin is $pin (already installed)"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "$tag: npm missing; on Debian: apt-get install -y nodejs npm" >&2
  exit 1
fi
mkdir -p "$prefix"
npm install --no-audit --no-fund --prefix "$prefix" "$pkg@$pin"
echo "$tag: installed $pkg@$pin into $prefix"
