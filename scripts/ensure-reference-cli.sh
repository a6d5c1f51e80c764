#!/usr/bin/env bash
# The reference babysitter CLI (npm @a5c-ai/babysitter-sdk, pinned) into <repo>/.ci-work/ref-cli,
# where the compatibility tests that compare with it (cli/tests/compat_*.rs) and the CLI
# benchmark (cli/benches/vs_reference.rs) look for it; the tests skip, saying why, when it is
# missing. Its `babysitter --version` prints the package version.
exec "$(dirname "${BASH_SOURCE[0]}")/ensure-npm-cli.sh" reference @a5c-ai/babysitter-sdk 0.0.187 babysitter ref-cli
