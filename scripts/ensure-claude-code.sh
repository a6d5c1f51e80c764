#!/usr/bin/env bash
# The pinned Claude Code CLI (npm @anthropic-ai/claude-code) into .ci-work/harness-claude.
exec "$(dirname "${BASH_SOURCE[0]}")/ensure-npm-cli.sh" claude @anthropic-ai/claude-code 2.1.197 claude
