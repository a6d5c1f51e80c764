#!/bin/sh
# babysitter-rs hook shim: every hook of this plugin is `babysitter-hook.sh <harness> <phase>`,
# one call into `babysitter hooks:invoke`, which reads the harness's payload on stdin and answers
# in the harness's own format.
#
# The binary: $BABYSITTER_BIN, else the one `harness:install-plugin` recorded beside this script
# (babysitter-bin), else `babysitter` on PATH. When none is found the hook says so on stderr and
# answers "allow" ({}): a missing binary never blocks the session. Nothing here installs or calls
# any other babysitter.
harness="$1"
phase="$2"
here=$(dirname "$0")
bin="${BABYSITTER_BIN:-}"
if [ -z "$bin" ] && [ -r "$here/babysitter-bin" ]; then
  bin=$(cat "$here/babysitter-bin")
fi
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
  bin=$(command -v babysitter 2>/dev/null || true)
fi
if [ -z "$bin" ]; then
  echo "babysitter hook ($harness $phase): no babysitter binary (set BABYSITTER_BIN or put babysitter on PATH); allowing" >&2
  cat >/dev/null
  echo '{}'
  exit 0
fi
exec "$bin" hooks:invoke --harness "$harness" --phase "$phase"
