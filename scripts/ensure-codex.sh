#!/usr/bin/env bash
# The pinned Codex CLI (npm @openai/codex) into .ci-work/harness-codex.
exec "$(dirname "${BASH_SOURCE[0]}")/ensure-npm-cli.sh" codex @openai/codex 0.171.0 codex
