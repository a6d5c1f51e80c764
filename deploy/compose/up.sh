#!/usr/bin/env bash
# One command for the compose stack (compose.yaml): builds the images that are missing, makes
# the tokens and TLS material on first start, brings the stack up and waits for the
# orchestrator to answer on 127.0.0.1.
#
#   deploy/compose/up.sh            # up (BABYSITTER_WORKERS=N for N workers, default 2)
#   deploy/compose/up.sh down       # stop and remove the containers (volumes kept)
#   deploy/compose/up.sh down -v    # ... and SeaweedFS's data volume
#
# Env: BABYSITTER_WORKERS (2), BABYSITTER_PORT (50052, the orchestrator's on 127.0.0.1),
# BABYSITTER_PROXY_PORT (8787), BABYSITTER_DASHBOARD_PORT (7420), BABYSITTER_PROJECT (compose project, `babysitter`),
# BABYSITTER_SECRETS (an absolute path instead of deploy/compose/.secrets).
#
# Secrets go to deploy/compose/.secrets/ (gitignored, mode 700), each file mode 600:
#   client.token         the CLI's token (BABYSITTER_TOKEN_FILE), owned by you
#   svc/*.token, svc/tls the copies the containers read, owned by uid 65532 (their user)
#   tls/                 `babysitter tls:generate`: a private CA, a certificate per service
#                        (journal, orchestrator, transport-proxy: also valid for localhost and
#                        127.0.0.1), the workers' and the CLI's (client.crt)
# It prints the CLI's environment: `eval "$(deploy/compose/up.sh)"`.
# Images: babysitter/* by deploy/images/build.sh (after `cargo build --release --bins`, run here
# when the binaries are missing), local/seaweedfs-mini:4.48 by deploy/seaweedfs/build-image.sh.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$here"
say() { echo "== up.sh: $*" >&2; }
die() { say "FAILED: $*"; exit 1; }

if docker compose version >/dev/null 2>&1; then
  compose=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
  compose=(docker-compose)
else
  die "neither \`docker compose\` nor docker-compose: apt-get install -y docker-compose"
fi
compose+=(-p "${BABYSITTER_PROJECT:-babysitter}" -f "$here/compose.yaml")

if [ "${1:-}" = down ]; then
  shift
  exec "${compose[@]}" down "$@"
fi

version="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' "$repo/Cargo.toml")"
export BABYSITTER_VERSION="$version"

# ------------------------------------------------------------------ images
target="${CARGO_TARGET_DIR:-$repo/target}"
missing=()
for svc in journal orchestrator transport-proxy harness-launcher; do
  docker image inspect "babysitter/$svc:$version" >/dev/null 2>&1 || missing+=("$svc")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ ! -x "$target/release/orchestrator" ]; then
    say "building the release binaries (cargo build --release --bins)"
    (cd "$repo" && cargo build --release --bins) >&2
  fi
  say "building images: ${missing[*]}"
  "$repo/deploy/images/build.sh" --target-dir "$target" --only "$(IFS=,; echo "${missing[*]}")" >&2
fi
# Images built from other sources than these (build.sh labels each with its commit) still run:
# say so, with how to rebuild.
head="$(git -C "$repo" rev-parse HEAD 2>/dev/null || true)"
if [ -n "$head" ]; then
  for svc in journal orchestrator transport-proxy harness-launcher; do
    built="$(docker image inspect -f '{{index .Config.Labels "org.opencontainers.image.revision"}}' \
      "babysitter/$svc:$version" 2>/dev/null || true)"
    if [ "$built" != "$head" ]; then
      say "note: babysitter/$svc:$version was built from ${built:-an unknown commit}, not $head:" \
        "cargo build --release --bins && deploy/images/build.sh to rebuild"
    fi
  done
fi
babysitter="$target/release/babysitter"
[ -x "$babysitter" ] || babysitter="$(command -v babysitter || true)"
[ -x "$babysitter" ] || die "no babysitter CLI on PATH or in $target/release (cargo build --release --bins)"
if ! docker image inspect local/seaweedfs-mini:4.48 >/dev/null 2>&1; then
  "$repo/scripts/ensure-weed.sh" >&2
  "$repo/deploy/seaweedfs/build-image.sh" >&2
fi

# ------------------------------------------------------------------ secrets, first start only
secrets="${BABYSITTER_SECRETS:-$here/.secrets}"
export BABYSITTER_SECRETS="$secrets"
umask 077
mkdir -p "$secrets/svc" "$secrets/tls"
for t in journal client worker proxy-admin launcher-admin; do
  if [ ! -s "$secrets/$t.token" ]; then
    head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$secrets/$t.token"
    say "made $t.token"
  fi
done
if [ ! -s "$secrets/tls/client.crt" ]; then
  # A private CA and a certificate per service name (each also valid for localhost/127.0.0.1),
  # a worker's and the CLI's (client).
  "$babysitter" tls:generate --out "$secrets/tls" journal orchestrator transport-proxy worker client >&2
  say "made TLS material in $secrets/tls"
fi
# The containers run as uid 65532 and read their copies; the originals stay yours.
for t in journal client worker proxy-admin launcher-admin; do cp "$secrets/$t.token" "$secrets/svc/"; done
mkdir -p "$secrets/svc/tls"
for f in ca.crt journal.crt journal.key orchestrator.crt orchestrator.key transport-proxy.crt \
  transport-proxy.key worker.crt worker.key; do
  cp "$secrets/tls/$f" "$secrets/svc/tls/"
done
if [ "$(id -u)" = 0 ]; then
  chown -R 65532:65532 "$secrets/svc"
else
  docker run --rm --user 0 --network none -v "$secrets/svc:/s" --entrypoint chown \
    "babysitter/harness-launcher:$version" -R 65532:65532 /s
fi

# ------------------------------------------------------------------ up
"${compose[@]}" up -d --remove-orphans >&2
port="${BABYSITTER_PORT:-50052}"
for _ in $(seq 1 300); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    say "the orchestrator answers on 127.0.0.1:$port"
    say "the dashboard: https://127.0.0.1:${BABYSITTER_DASHBOARD_PORT:-7420} (CA $secrets/tls/ca.crt; sign in with the token in $secrets/client.token)"
    "${compose[@]}" ps >&2
    echo "export BABYSITTER_SERVER=https://127.0.0.1:$port BABYSITTER_TOKEN_FILE=$secrets/client.token" \
      "BABYSITTER_TLS_CA_FILE=$secrets/tls/ca.crt BABYSITTER_TLS_CERT_FILE=$secrets/tls/client.crt" \
      "BABYSITTER_TLS_KEY_FILE=$secrets/tls/client.key"
    exit 0
  fi
  sleep 0.2
done
"${compose[@]}" logs --tail 30 >&2
die "the orchestrator did not answer on 127.0.0.1:$port within 60 s (logs above)"
