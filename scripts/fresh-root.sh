#!/usr/bin/env bash
# Runs a command in this checkout inside a brand-new Debian 12 root, built from
# Debian's archive for this run alone, so that nothing installed on the host
# earlier can hide a package missing from scripts/install-deps.sh.
#
#   scripts/fresh-root.sh -- scripts/quickstart.sh      what a new user runs
#   SHADOWSYNC_FRESH_ROOT_KEEP=1 scripts/fresh-root.sh -- bash   keep the root to look at
#
# What the root gets from the host is network set-up only: /etc/resolv.conf
# (and an /etc/hosts naming localhost, which an installed Debian has),
# and the host's CA bundle read-only at /etc/ssl/host-ca.crt with
# NPM_CONFIG_CAFILE pointing at it (these machines reach the npm registry
# through TLS that only the host's bundle trusts). The checkout's parent
# directory is bind-mounted at the same path, so ../shared/data is where the
# tests look for it, and build/ lands in the checkout.
#
# The command runs as root with a clean environment (OPENBLAS_* passed through
# unchanged), in a private mount and PID namespace: its mounts and every
# process it leaves behind end with it. The root is deleted afterwards unless
# SHADOWSYNC_FRESH_ROOT_KEEP=1.
#
# Needs root and debootstrap (`scripts/install-deps.sh --fresh-root`).
# SHADOWSYNC_FRESH_ROOT (default /var/tmp/shadowsync-fresh-root) is where the
# root is built; SHADOWSYNC_DEBIAN_MIRROR (default http://deb.debian.org/debian)
# is the archive.
set -euo pipefail
cd "$(dirname "$0")/.."
readonly repo="$PWD"
readonly root="${SHADOWSYNC_FRESH_ROOT:-/var/tmp/shadowsync-fresh-root}"
readonly mirror="${SHADOWSYNC_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
readonly host_ca="${SHADOWSYNC_HOST_CA:-/etc/ssl/certs/ca-certificates.crt}"

log() { echo "fresh-root: $*" >&2; }

[[ "${1:-}" == "--" ]] && shift
if [[ $# -eq 0 ]]; then
  echo "usage: scripts/fresh-root.sh -- COMMAND [ARGS...]" >&2
  exit 2
fi
if [[ $(id -u) -ne 0 ]]; then
  log "must run as root (debootstrap, chroot and mount need it)"
  exit 1
fi
if ! command -v debootstrap >/dev/null 2>&1; then
  log "debootstrap is missing: run scripts/install-deps.sh --fresh-root"
  exit 1
fi
# The root is deleted: it must neither hold the checkout nor lie inside it.
if [[ "$repo/" == "${root%/}/"* || "$root" == "$repo"/* ]]; then
  log "refusing SHADOWSYNC_FRESH_ROOT=$root: it holds or lies in the checkout $repo"
  exit 1
fi

# The root's mounts live in a private namespace and vanish with it; still,
# never delete a tree that has anything mounted under it.
remove_root() {
  [[ -e "$root" ]] || return 0
  if findmnt -rn -o TARGET | awk -v r="$root" '$0 == r || index($0, r "/") == 1 { f = 1 } END { exit !f }'; then
    log "something is still mounted under $root; not deleting it"
    return 1
  fi
  rm -rf --one-file-system "$root"
}

remove_root
mkdir -p "$(dirname "$root")"
start=$SECONDS
log "debootstrap --variant=minbase bookworm $root ($mirror)"
if ! debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.debootstrap.log" 2>&1; then
  tail -n 30 "$root.debootstrap.log" >&2
  log "debootstrap failed (full log: $root.debootstrap.log)"
  exit 1
fi
log "base system in $((SECONDS - start)) s"

# The sources a Debian 12 installation has: the release, its updates, security.
security="${mirror%/debian}/debian-security"
cat >"$root/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb $security bookworm-security main
EOF
cp /etc/resolv.conf "$root/etc/resolv.conf"
# What an installed system has and debootstrap does not write: localhost's name.
[[ -f "$root/etc/hosts" ]] || printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
mkdir -p "$root/etc/ssl" "$root$(dirname "$repo")"
touch "$root/etc/ssl/host-ca.crt"

# Inside the new namespaces: mount, chroot, run. PID 1 of the namespace is the
# unshare child, so when the command ends every process it started ends too.
inner=$(
  cat <<'EOS'
set -euo pipefail
root=$1 repo=$2 host_ca=$3
shift 3
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys" && mount --make-rslave "$root/sys"
mount --rbind /dev "$root/dev" && mount --make-rslave "$root/dev"
mount -t tmpfs -o mode=1777 tmpfs "$root/dev/shm"
mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
mount --bind "$(dirname "$repo")" "$root$(dirname "$repo")"
if [[ -r "$host_ca" ]]; then
  mount --bind "$host_ca" "$root/etc/ssl/host-ca.crt"
  mount -o remount,bind,ro "$root/etc/ssl/host-ca.crt"
fi
env_vars=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
  LANG=C.UTF-8 TERM="${TERM:-dumb}" NPM_CONFIG_CAFILE=/etc/ssl/host-ca.crt)
for v in CI OPENBLAS_CORETYPE OPENBLAS_L2_SIZE SHADOWSYNC_SKIP_SANITIZERS SHADOWSYNC_SKIP_FUZZ; do
  [[ -n "${!v+x}" ]] && env_vars+=("$v=${!v}")
done
exec chroot "$root" /usr/bin/env -i "${env_vars[@]}" /bin/bash -c 'cd "$0" && exec "$@"' "$repo" "$@"
EOS
)

set +e
unshare --mount --propagation private --pid --fork \
  bash -c "$inner" inner "$root" "$repo" "$host_ca" "$@"
rc=$?
set -e
log "command exited $rc after $((SECONDS - start)) s"
if [[ "${SHADOWSYNC_FRESH_ROOT_KEEP:-0}" == "1" ]]; then
  log "kept $root"
else
  remove_root
  rm -f "$root.debootstrap.log"
fi
exit "$rc"
