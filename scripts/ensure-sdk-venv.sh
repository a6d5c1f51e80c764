#!/usr/bin/env bash
# Installs the official Python SDKs (anthropic, openai, google-genai) into <repo>/.ci-work/venv-sdk, where the
# transport-proxy's SDK tests look for them (they skip, saying why, when it is missing), and the
# official MCP SDK (mcp), the client of the CLI's `mcp:serve` test.
# Idempotent: does nothing when the pinned versions are already there.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$repo/.ci-work/venv-sdk"
pins=("anthropic==2.14.0" "openai==3.57.0" "google-genai==3.6.1" "mcp==2.3.0")

if [ -x "$venv/bin/python" ] && "$venv/bin/python" - <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
import anthropic, openai, mcp
from google import genai
sys.exit(0 if (anthropic.__version__, openai.__version__, genai.__version__, version("mcp"))
         == ("2.14.0", "3.57.0", "3.6.1", "2.3.0") else 1)
PY
then
  echo "ensure-sdk-venv: $venv has ${pins[*]} (already installed)"
  exit 0
fi

mkdir -p "$repo/.ci-work"
if ! python3 -m venv "$venv"; then
  echo "ensure-sdk-venv: 'python3 -m venv' failed; on Debian: apt-get install -y python3-venv" >&2
  exit 1
fi
"$venv/bin/pip" install --disable-pip-version-check -q "${pins[@]}"
echo "ensure-sdk-venv: installed ${pins[*]} into $venv"
