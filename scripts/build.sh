#!/usr/bin/env bash
# Configures and builds one CMake preset (default: release) into build/<preset>.
#   scripts/build.sh [preset] [extra cmake --build args...]
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
shift || true
if [[ ! -f "build/${preset}/CMakeCache.txt" ]]; then
  cmake --preset "${preset}" >/dev/null
fi
cmake --build --preset "${preset}" "$@"
