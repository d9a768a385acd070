#!/usr/bin/env bash
# ShadowSync in real containers (bench/containers.mjs): the image, read-only;
# the operator and every pod it creates as podman containers of it; the
# quickstart to Succeeded; a parameter server killed and the servers scaled
# out mid-run; real Prometheus and every dashboard query. Needs root, podman
# and the image (built here by scripts/build-image.sh when missing).
#
#   bench/run.sh containers [--image IMAGE] [--keep]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
"$ROOT/scripts/install-deps.sh" --containers
"$ROOT/scripts/install-kube-tools.sh" >/dev/null
"$ROOT/scripts/install-node-tools.sh" >/dev/null
image=shadowsync:0.1.0
for ((i = 1; i <= $#; ++i)); do [[ "${!i}" == --image ]] && { j=$((i + 1)); image="${!j}"; }; done
export CONTAINERS_CONF="${CONTAINERS_CONF:-$ROOT/scripts/containers.conf}"
podman image exists "$image" || "$ROOT/scripts/build-image.sh" "$image"
echo "# $(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2- | sed "s/^ //"), kernel $(uname -r), podman $(podman --version | cut -d" " -f3)"
exec node "$ROOT/bench/containers.mjs" --bin-dir "$ROOT/build/release/bin" "$@"
