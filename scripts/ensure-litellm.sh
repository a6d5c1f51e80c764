#!/usr/bin/env bash
# Installs LiteLLM 1.106.12 with its proxy extra (the transport-proxy benchmark's baseline,
# toolchain.md §8) into <repo>/.ci-work/venv-litellm. ~2.5 min and ~750 MB, so only the
# benchmark needs it: `cargo bench -p babysitter-transport-proxy --bench proxy` runs without it
# and says so. Idempotent. Never use 1.107.x (compromised release, absent from PyPI).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$repo/.ci-work/venv-litellm"
pin="1.106.12"

if [ -x "$venv/bin/litellm" ] && "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(0 if m.version('litellm') == '$pin' else 1)" 2>/dev/null; then
  echo "ensure-litellm: $venv has litellm $pin (already installed)"
  exit 0
fi
mkdir -p "$repo/.ci-work"
python3 -m venv "$venv"
"$venv/bin/pip" install --disable-pip-version-check -q "litellm[proxy]==$pin"
echo "ensure-litellm: installed litellm[proxy]==$pin into $venv"
