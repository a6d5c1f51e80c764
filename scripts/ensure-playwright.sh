#!/usr/bin/env bash
# Installs what the dashboard's browser tests drive: Chromium from Debian's packages (apt
# chromium) and Playwright for Python (pinned) into <repo>/.ci-work/venv-playwright. The tests
# launch the system Chromium (executable_path=/usr/bin/chromium): `playwright install` is never
# run, nothing is downloaded at test time. Idempotent.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$repo/.ci-work/venv-playwright"
pin="playwright==1.65.3"

if ! [ -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null
  else
    echo "ensure-playwright: /usr/bin/chromium missing; as root: apt-get install -y chromium" >&2
    exit 1
  fi
fi

if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c \
  'from importlib.metadata import version; import sys; sys.exit(0 if version("playwright") == "1.65.3" else 1)' 2>/dev/null; then
  echo "ensure-playwright: $venv has $pin (already installed); chromium at /usr/bin/chromium"
  exit 0
fi
mkdir -p "$repo/.ci-work"
if ! python3 -m venv "$venv"; then
  echo "ensure-playwright: 'python3 -m venv' failed; on Debian: apt-get install -y python3-venv" >&2
  exit 1
fi
"$venv/bin/pip" install --disable-pip-version-check -q "$pin"
echo "ensure-playwright: installed $pin into $venv; chromium at /usr/bin/chromium"
