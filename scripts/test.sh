#!/usr/bin/env bash
# The one command that sets up and runs every test, exiting non-zero on any
# failure: installs dependencies, checks formatting, builds the release
# preset and runs its tests, then runs them again under ThreadSanitizer (the
# `tsan` preset).
#
#   scripts/test.sh              everything CI runs
#   SHADOWSYNC_SKIP_SANITIZERS=1 scripts/test.sh   release suites only (quick local loop)
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

echo "== format check (clang-format, .clang-format)"
mapfile -t sources < <(git ls-files '*.cc' '*.h' 2>/dev/null || find . -name '*.cc' -o -name '*.h' -not -path './build/*')
if ! clang-format --dry-run --Werror "${sources[@]}"; then
  echo "format check failed: run clang-format -i on the files above" >&2
  exit 1
fi

echo "== release build and tests"
scripts/build.sh release
ctest --preset release

if [[ "${SHADOWSYNC_SKIP_SANITIZERS:-0}" != "1" ]]; then
  # Every suite again under ThreadSanitizer: Hogwild training, the embedding
  # store and the parallel reader share memory between threads on purpose.
  echo "== tsan build and tests"
  scripts/build.sh tsan
  ctest --preset tsan
fi
echo "scripts/test.sh: all tests passed"
