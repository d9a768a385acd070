#!/usr/bin/env bash
# bench/run.sh load [ARGS...]: 64 concurrent clients with valid and invalid
# requests against one parameter server, then one syncer, 60 s each after a
# 10 s warm-up (bench/load_bench.cc). Fails if a valid request fails, an
# invalid one gets another status than it should, or resident memory grows
# more than 10% after warm-up. ARGS go to load_bench (e.g. --seconds 20).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec "$ROOT/build/release/bin/load_bench" --work-dir "$ROOT/bench/results/tmp/load" \
  --shadowsync "$ROOT/build/release/bin/shadowsync" "$@"
