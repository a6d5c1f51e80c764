#!/usr/bin/env bash
# The pinned Pi coding agent (npm @mariozechner/pi-coding-agent) into .ci-work/harness-pi.
exec "$(dirname "${BASH_SOURCE[0]}")/ensure-npm-cli.sh" pi @mariozechner/pi-coding-agent 0.73.1 pi
