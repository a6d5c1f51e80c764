#!/usr/bin/env bash
# The pinned Gemini CLI (npm @google/gemini-cli) into .ci-work/harness-gemini.
exec "$(dirname "${BASH_SOURCE[0]}")/ensure-npm-cli.sh" gemini @google/gemini-cli 0.61.0 gemini
