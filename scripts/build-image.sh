#!/usr/bin/env bash
# Builds the ShadowSync image from the Dockerfile with docker or podman,
# whichever runs here (docs/container.md), and prints its size.
#
#   scripts/build-image.sh [TAG]        default shadowsync:0.1.0
#
# A base image (the Dockerfile's FROM lines) that is neither present nor
# pullable is made from Debian's archive: `debootstrap --variant=minbase
# bookworm`, trimmed like Debian's -slim images for a -slim tag, imported under
# the name the Dockerfile expects. Such a base is today's Debian 12 point
# release, which the script prints; both stages come from the same root, so the
# libraries the build stage links are the ones the runtime stage installs.
#
# SHADOWSYNC_CONTAINER_ENGINE=docker|podman picks the engine; podman runs with
# scripts/containers.conf unless CONTAINERS_CONF is set. The packages:
# scripts/install-deps.sh --containers.
set -euo pipefail
cd "$(dirname "$0")/.."
readonly repo="$PWD"
readonly tag="${1:-shadowsync:0.1.0}"
readonly mirror="${SHADOWSYNC_DEBIAN_MIRROR:-http://deb.debian.org/debian}"

log() { echo "build-image: $*" >&2; }

engine="${SHADOWSYNC_CONTAINER_ENGINE:-}"
if [[ -z "$engine" ]]; then
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    engine=docker
  elif command -v podman >/dev/null 2>&1; then
    engine=podman
  else
    log "neither a running Docker engine nor podman: run scripts/install-deps.sh --containers"
    exit 1
  fi
fi
build_flags=()
if [[ "$engine" == podman ]]; then
  export CONTAINERS_CONF="${CONTAINERS_CONF:-$repo/scripts/containers.conf}"
  # The build's RUN steps fetch packages: the host's network, no bridge needed.
  build_flags+=(--network host)
fi

tmp="$(mktemp -d)"
trap 'rm -rf --one-file-system "$tmp"' EXIT

# Makes $1 (a Debian 12 tag, -slim or not) from Debian's archive.
bootstrapped=""
make_debian_base() {
  local image=$1 dir="$tmp/base"
  if [[ -z "$bootstrapped" ]]; then
    [[ $(id -u) -eq 0 ]] || { log "making $image needs root (debootstrap)"; exit 1; }
    command -v debootstrap >/dev/null 2>&1 ||
      { log "making $image needs debootstrap: scripts/install-deps.sh --containers"; exit 1; }
    log "debootstrap --variant=minbase bookworm ($mirror)"
    debootstrap --variant=minbase bookworm "$dir/full" "$mirror" >"$tmp/debootstrap.log" 2>&1 ||
      { tail -n 30 "$tmp/debootstrap.log" >&2; log "debootstrap failed"; exit 1; }
    local security="${mirror%/debian}/debian-security"
    printf 'deb %s bookworm main\ndeb %s bookworm-updates main\ndeb %s bookworm-security main\n' \
      "$mirror" "$mirror" "$security" >"$dir/full/etc/apt/sources.list"
    rm -rf "$dir"/full/var/lib/apt/lists/* "$dir"/full/var/cache/apt/*.bin
    # What -slim drops, and keeps dropping for packages installed later.
    cp -a "$dir/full" "$dir/slim"
    cat >"$dir/slim/etc/dpkg/dpkg.cfg.d/slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
    find "$dir/slim/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
    rm -rf "$dir"/slim/usr/share/{man,info}/* "$dir"/slim/usr/share/locale/*/
    bootstrapped="$(cat "$dir/full/etc/debian_version")"
  fi
  local variant=full
  [[ "$image" == *-slim ]] && variant=slim
  tar -C "$dir/$variant" --numeric-owner -c . |
    "$engine" import --change 'CMD ["bash"]' - "docker.io/library/$image" >/dev/null
  log "made $image locally from Debian's archive (Debian $bootstrapped, $variant)"
}

# The bases: every FROM image that is not an earlier stage's name.
mapfile -t bases < <(awk 'toupper($1) == "FROM" {
    img = $2; if (img ~ /^--/) img = $3
    if (!(img in stage)) print img
    for (i = 3; i < NF; i++) if (toupper($i) == "AS") stage[$(i + 1)] = 1
  }' Dockerfile | sort -u)
for image in "${bases[@]}"; do
  if "$engine" image inspect "$image" >/dev/null 2>&1; then
    continue
  fi
  log "pulling $image"
  if timeout 120 "$engine" pull -q "$image" >/dev/null 2>&1; then
    continue
  fi
  log "cannot pull $image (no registry reachable)"
  make_debian_base "$image"
done

log "$engine build -t $tag"
start=$SECONDS
"$engine" build "${build_flags[@]}" -t "$tag" .
bytes=$("$engine" image inspect "$tag" --format '{{.Size}}')
log "built $tag in $((SECONDS - start)) s: $(((bytes + 500000) / 1000000)) MB"
