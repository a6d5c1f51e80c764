#!/usr/bin/env bash
# Builds the four service images from the workspace's release binaries, without a registry:
#
#   babysitter/journal  babysitter/orchestrator  babysitter/transport-proxy  babysitter/harness-launcher
#
# each tagged with the workspace version (and `--tag` extras). Run `cargo build --release --bins`
# first. Needs a running dockerd; pulls nothing (nothing can be pulled here).
#
#   deploy/images/build.sh [--target-dir DIR] [--profile NAME] [--tag TAG]... [--only NAME,...]
#                          [--harness-dir DIR] [--harnesses LIST] [--no-harnesses] [--rebuild-base]
#
#   --target-dir   cargo's target dir (default $CARGO_TARGET_DIR, else <repo>/target)
#   --profile      the cargo profile whose binaries to use (default release)
#   --tag          an extra tag for every image (repeatable), e.g. --tag test
#   --only         build only these images (journal, orchestrator, transport-proxy, harness-launcher)
#   --harness-dir  where scripts/ensure-*.sh installed the pinned harness CLIs
#                  (default <repo>/.ci-work; the worker image copies harness-<name>/ from there)
#   --harnesses    the harness CLIs the worker image carries, comma-separated (default all:
#                  claude-code,codex,gemini-cli,pi,opencode); a pool that runs one harness gets a
#                  much smaller image, tagged <version>-<harnesses joined by -> (`--no-harnesses`:
#                  <version>-noharness) so the full image keeps its tag
#   --no-harnesses a worker base without the harness CLIs (shell and node tasks only)
#   --rebuild-base rebuild the worker's base image even when it exists
#
# Env: DEBIAN_MIRROR (default http://deb.debian.org/debian), BABYSITTER_IMAGE_CACHE (where the
# debootstrap result is kept, default <repo>/.ci-work/images).
#
# Why it is built this way (deploy/images/README.md has the long form):
# * journal, orchestrator, transport-proxy: FROM scratch + one layer made here: the stripped
#   binary, exactly the shared libraries `ldd` names (copied from this Debian 12 host, glibc 2.36,
#   whose DNS and files NSS modules are inside libc.so.6, so service names resolve without any
#   libnss_*.so), the CA bundle (reqwest 0.13 will not build a client without one), /etc/passwd
#   and /etc/group with the non-root user 65532, and empty /tmp, /data and /home/nonroot.
# * harness-launcher: tasks need a shell, coreutils, git, node and the harness CLIs, so its base
#   is a Debian 12 root filesystem (debootstrap --variant=minbase, plus git and ca-certificates)
#   with this host's node and the pinned CLIs, imported once (`docker import`) as
#   babysitter/worker-base:<key> and reused while node and the pins are unchanged; the worker
#   image is that base plus the binary.
# * The legacy builder (DOCKER_BUILDKIT=0): there is no buildx here.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$repo/target}"
profile=release
tags=()
only="journal,orchestrator,transport-proxy,harness-launcher"
harness_dir="$repo/.ci-work"
all_harnesses="claude-code,codex,gemini-cli,pi,opencode"
harnesses="$all_harnesses"
rebuild_base=0
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
cache="${BABYSITTER_IMAGE_CACHE:-$repo/.ci-work/images}"

while [ "$#" -gt 0 ]; do
  case "$1" in
  --target-dir) target="$2"; shift 2 ;;
  --profile) profile="$2"; shift 2 ;;
  --tag) tags+=("$2"); shift 2 ;;
  --only) only="$2"; shift 2 ;;
  --harness-dir) harness_dir="$2"; shift 2 ;;
  --harnesses) harnesses="$2"; shift 2 ;;
  --no-harnesses) harnesses=""; shift ;;
  --rebuild-base) rebuild_base=1; shift ;;
  -h | --help) sed -n '2,23p' "${BASH_SOURCE[0]}"; exit 0 ;;
  *) echo "build.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

say() { echo "== build.sh: $*" >&2; }
die() { say "FAILED: $*"; exit 1; }

version="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' "$repo/Cargo.toml")"
[ -n "$version" ] || die "no [workspace.package] version in $repo/Cargo.toml"
bindir="$target/$profile"
# The sources' commit (`+dirty` with uncommitted changes): up.sh tells when images are older.
revision="$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)"
if [ "$revision" != unknown ] && ! git -C "$repo" diff --quiet HEAD -- 2>/dev/null; then
  revision="$revision+dirty"
fi
# The harness ids (the launcher's) and where scripts/ensure-<id>.sh installed each: <dir>:<bin>.
harness_home() {
  case "$1" in
  claude-code) echo claude:claude ;;
  codex) echo codex:codex ;;
  gemini-cli) echo gemini:gemini ;;
  pi) echo pi:pi ;;
  opencode) echo opencode:opencode ;;
  *) return 1 ;;
  esac
}
IFS=, read -r -a harness_list <<<"$harnesses"
for h in "${harness_list[@]+"${harness_list[@]}"}"; do
  harness_home "$h" >/dev/null || die "--harnesses: unknown harness \`$h\` (one of $all_harnesses)"
done
# Each service image's tag: the version; a worker with other harnesses than all says which.
tag_of() {
  if [ "$1" != harness-launcher ] || [ "$harnesses" = "$all_harnesses" ]; then
    echo "$version"
  elif [ -z "$harnesses" ]; then
    echo "$version-noharness"
  else
    echo "$version-${harnesses//,/-}"
  fi
}
docker version >/dev/null 2>&1 || die "no dockerd answers (start one: see .ci/run)"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The files every image has: users (root, and nonroot 65532 the images run as), groups, NSS
# config, the CA bundle, and the empty writable-when-mounted directories.
stage_etc() {
  local r="$1"
  mkdir -p "$r/etc/ssl/certs" "$r/tmp" "$r/data" "$r/home/nonroot" "$r/usr/bin"
  chmod 1777 "$r/tmp"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$r/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$r/etc/group"
  printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$r/etc/nsswitch.conf"
  cp /etc/ssl/certs/ca-certificates.crt "$r/etc/ssl/certs/"
  chown 65532:65532 "$r/data" "$r/home/nonroot"
}

# Copies `bin` stripped to /usr/bin/<name> and every library `ldd` names, at the same paths.
stage_binary() {
  local bin="$1" r="$2" name="$3"
  cp "$bin" "$r/usr/bin/$name"
  strip --strip-unneeded "$r/usr/bin/$name"
  local lib
  for lib in $(ldd "$bin" | grep -oE '/[^ ]+'); do
    mkdir -p "$r$(dirname "$lib")"
    cp -L "$lib" "$r$lib"
  done
}

# The legacy builder (no buildx here); its deprecation notice is dropped, its errors are shown.
legacy_build() {
  local image="$1" ctx="$2"
  if ! DOCKER_BUILDKIT=0 docker build -q --label "org.opencontainers.image.version=$version" \
    --label "org.opencontainers.image.revision=$revision" \
    -t "$image" "$ctx" >/dev/null 2>"$ctx.err"; then
    cat "$ctx.err" >&2
    die "docker build of $image failed"
  fi
}

tag_extra() {
  local image="$1" t
  for t in "${tags[@]+"${tags[@]}"}"; do
    docker tag "$image:$(tag_of "${image#babysitter/}")" "$image:$t"
  done
}

# service image name, binary name
build_scratch() {
  local svc="$1" bin="$2"
  local ctx="$work/$svc" r="$work/$svc/rootfs"
  [ -x "$bindir/$bin" ] || die "$bindir/$bin is missing: run cargo build --profile $profile --bins first"
  mkdir -p "$r"
  stage_etc "$r"
  stage_binary "$bindir/$bin" "$r" "$bin"
  tar --numeric-owner -C "$r" -cf "$ctx/rootfs.tar" .
  cp "$here/$svc.Dockerfile" "$ctx/Dockerfile"
  legacy_build "babysitter/$svc:$version" "$ctx"
  tag_extra "babysitter/$svc"
}

# --------------------------------------------------------------- the worker's base image
node_bin="$(readlink -f "$(command -v node || true)" || true)"
pins() {
  # The chosen harnesses' pins, from the scripts that install them: part of the base's key.
  local s
  for s in "${harness_list[@]+"${harness_list[@]}"}"; do
    grep -oE 'ensure-npm-cli.sh" [^ ]+ [^ ]+ [^ ]+' "$repo/scripts/ensure-$s.sh" | cut -d' ' -f2-4
  done
}
base_key() {
  local node_v h
  node_v="$("$node_bin" --version)"
  if [ "${#harness_list[@]}" -gt 0 ]; then
    h="$(pins | sha256sum | cut -c1-12)"
  else
    h=noharness
  fi
  echo "bookworm-node${node_v#v}-$h"
}

build_worker_base() {
  local base="$1" r="$work/worker-base"
  say "building $base (debootstrap minbase + git from $mirror, node, harness CLIs; once)"
  # debootstrap's result is kept in the cache dir: the base is rebuilt when node or a pin moves,
  # and Debian's packages need not be fetched again for that.
  local cached="$cache/debian-bookworm-minbase-git.tar"
  if [ ! -s "$cached" ]; then
    debootstrap --variant=minbase --include=git,ca-certificates bookworm "$r" "$mirror" \
      >"$work/debootstrap.log" 2>&1 || { tail -n 30 "$work/debootstrap.log" >&2; die "debootstrap failed"; }
    mkdir -p "$cache"
    tar --numeric-owner -C "$r" -cf "$cached.part" . && mv "$cached.part" "$cached"
  else
    mkdir -p "$r" && tar --numeric-owner -C "$r" -xf "$cached"
  fi
  rm -rf "$r"/var/cache/apt/archives/*.deb "$r"/var/lib/apt/lists/* "$r"/usr/share/doc/* \
    "$r"/usr/share/man/* "$r"/usr/share/locale/* "$r"/usr/share/info/*
  echo 'nonroot:x:65532:65532:nonroot:/home/nonroot:/bin/sh' >>"$r/etc/passwd"
  echo 'nonroot:x:65532:' >>"$r/etc/group"
  mkdir -p "$r/home/nonroot" "$r/data" && chown 65532:65532 "$r/home/nonroot" "$r/data"
  # node: this host's binary (Node 20, what the harness CLIs are pinned against); its libraries
  # (libstdc++, libgcc_s, libc) are Debian 12's, the same as the base's.
  cp "$node_bin" "$r/usr/local/bin/node"
  strip --strip-unneeded "$r/usr/local/bin/node" 2>/dev/null || true
  if [ "${#harness_list[@]}" -gt 0 ]; then
    local d b h pair
    mkdir -p "$r/opt/harness"
    for h in "${harness_list[@]}"; do
      pair="$(harness_home "$h")"
      d="${pair%%:*}" b="${pair##*:}"
      [ -e "$harness_dir/harness-$d/node_modules/.bin/$b" ] ||
        die "no $b in $harness_dir/harness-$d: run scripts/ensure-*.sh (or --no-harnesses)"
      mkdir -p "$r/opt/harness/$d" && cp -a "$harness_dir/harness-$d/." "$r/opt/harness/$d/"
      ln -s "/opt/harness/$d/node_modules/.bin/$b" "$r/usr/local/bin/$b"
    done
  fi
  # npm leaves identical copies of some native binaries (OpenCode's baseline build is its
  # regular one, 185 MB): hard links, which the layer stores once.
  local sum f first
  declare -A seen=()
  while read -r sum f; do
    first="${seen[$sum]:-}"
    if [ -n "$first" ]; then ln -f "$first" "$f"; else seen[$sum]="$f"; fi
  done < <(find "$r/opt" -type f -size +10M -print0 | xargs -0 -r md5sum)
  tar --numeric-owner -C "$r" -c . |
    docker import -c 'ENV PATH=/usr/local/bin:/usr/bin:/bin' -c 'ENV HOME=/home/nonroot' - "$base" >/dev/null
  rm -rf "$r"
}

build_worker() {
  local bin=harness-launcher ctx="$work/harness-launcher"
  [ -x "$bindir/$bin" ] || die "$bindir/$bin is missing: run cargo build --profile $profile --bins first"
  [ -n "$node_bin" ] || die "no node on PATH: the worker image carries this host's Node 20"
  local base
  base="babysitter/worker-base:$(base_key)"
  if [ "$rebuild_base" = 1 ] || ! docker image inspect "$base" >/dev/null 2>&1; then
    build_worker_base "$base"
  fi
  mkdir -p "$ctx"
  cp "$bindir/$bin" "$ctx/$bin"
  strip --strip-unneeded "$ctx/$bin"
  sed "s|^FROM .*|FROM $base|" "$here/harness-launcher.Dockerfile" >"$ctx/Dockerfile"
  legacy_build "babysitter/harness-launcher:$(tag_of harness-launcher)" "$ctx"
  tag_extra babysitter/harness-launcher
}

IFS=, read -r -a wanted <<<"$only"
for svc in "${wanted[@]}"; do
  started=$(date +%s)
  case "$svc" in
  journal) build_scratch journal journal ;;
  orchestrator) build_scratch orchestrator orchestrator ;;
  transport-proxy) build_scratch transport-proxy babysitter-transport-proxy ;;
  harness-launcher) build_worker ;;
  *) die "unknown image $svc" ;;
  esac
  # A smoke test: the binary starts inside its image (loader, libraries, user).
  image="babysitter/$svc:$(tag_of "$svc")"
  entry="$(docker image inspect -f '{{index .Config.Entrypoint 0}}' "$image")"
  docker run --rm --read-only --network none --entrypoint "$entry" "$image" --version >/dev/null ||
    die "$image does not start ($entry --version)"
  if [ "$svc" = harness-launcher ]; then
    # Each harness CLI the image carries starts in it, as the worker runs it (read-only root,
    # no network, a writable HOME).
    for h in "${harness_list[@]+"${harness_list[@]}"}"; do
      b="$(harness_home "$h")" && b="${b##*:}"
      docker run --rm --read-only --network none --tmpfs /tmp \
        --tmpfs /home/nonroot:uid=65532,gid=65532 --entrypoint "$b" "$image" --version >/dev/null 2>&1 ||
        die "$image: the $h CLI ($b --version) does not start"
    done
  fi
  say "$image built in $(($(date +%s) - started)) s"
done

# Dangling layers of earlier builds of these tags.
docker image prune -f >/dev/null
docker images --format '{{.Repository}}:{{.Tag}}\t{{.Size}}' | grep -E "^babysitter/[a-z-]+:$version\b" >&2 || true
