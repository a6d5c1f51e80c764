#!/usr/bin/env bash
# The pinned OpenCode CLI (npm opencode-ai; a native binary via opencode-linux-x64) into .ci-work/harness-opencode.
exec "$(dirname "${BASH_SOURCE[0]}")/ensure-npm-cli.sh" opencode opencode-ai 1.18.33 opencode
