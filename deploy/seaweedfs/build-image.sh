#!/usr/bin/env bash
# Builds the FROM-scratch SeaweedFS image `local/seaweedfs-mini:4.48` (toolchain.md §6.2).
#
# Usage: deploy/seaweedfs/build-image.sh [WEED_BIN]
#   WEED_BIN defaults to $BABYSITTER_WEED_BIN, then <repo>/.ci-work/venv-seaweed/bin/weed
#   (installed by scripts/ensure-weed.sh). Needs a running dockerd; pulls nothing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
image="${SEAWEED_IMAGE:-local/seaweedfs-mini:4.48}"
weed="${1:-${BABYSITTER_WEED_BIN:-$repo/.ci-work/venv-seaweed/bin/weed}}"

if [ ! -x "$weed" ]; then
  echo "build-image.sh: no weed binary at $weed; run scripts/ensure-weed.sh first" >&2
  exit 1
fi
if ! "$weed" version 2>/dev/null | grep -q ' 4\.48 '; then
  echo "build-image.sh: $weed is not SeaweedFS 4.48: $("$weed" version 2>&1 | head -n 1)" >&2
  exit 1
fi

ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT

cp "$here/Dockerfile" "$here/s3.json" "$ctx/"
# hard link when possible (same filesystem), the binary is 153 MB
ln "$weed" "$ctx/weed" 2>/dev/null || cp "$weed" "$ctx/weed"
mkdir "$ctx/rootfs-tmp"
chmod 1777 "$ctx/rootfs-tmp"

# No buildx plugin on the machines: the legacy builder (deprecation notice expected).
DOCKER_BUILDKIT=0 docker build -q -t "$image" "$ctx"
echo "build-image.sh: built $image"
