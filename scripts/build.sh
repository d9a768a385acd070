#!/usr/bin/env bash
# Configures and builds one CMake preset (default: release) into build/<preset>.
#   scripts/build.sh [preset] [extra cmake --build args...]
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
shift || true
# Configure when no configure has completed: a failed one leaves CMakeCache.txt
# behind without build.ninja, and a build from that state can never succeed.
if [[ ! -f "build/${preset}/build.ninja" ]]; then
  cmake --preset "${preset}" >/dev/null
fi
cmake --build --preset "${preset}" "$@"
