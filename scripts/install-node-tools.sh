#!/usr/bin/env bash
# Installs the Node tools the deploy tests use, pinned by
# scripts/node-tools/package-lock.json, into <repo>/.tools/node (git-ignored):
# kubernetes-models (Kubernetes API schema validation of rendered manifests),
# js-yaml, and dockerfilelint. npm comes from scripts/install-deps.sh.
# Idempotent: nothing is fetched when the installed lock matches.
set -euo pipefail
cd "$(dirname "$0")/.."

readonly src="$PWD/scripts/node-tools"
readonly dst="$PWD/.tools/node"

if ! command -v npm >/dev/null 2>&1; then
  echo "install-node-tools: npm is missing: run scripts/install-deps.sh first" >&2
  exit 1
fi
if [[ -d "$dst/node_modules" ]] && cmp -s "$src/package-lock.json" "$dst/package-lock.json"; then
  echo "install-node-tools: up to date in $dst"
  exit 0
fi
mkdir -p "$dst"
cp "$src/package.json" "$src/package-lock.json" "$dst/"
(cd "$dst" && npm ci --no-audit --no-fund --loglevel=error)
echo "install-node-tools: installed into $dst"
