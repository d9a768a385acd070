#!/usr/bin/env bash
# Faults during live resharding (issue 30): a local job (2 trainers pushing
# throughout, 2 <-> 3 parameter servers, shadow-easgd, synthetic data) runs
# once undisturbed, then again while every round reshards it and, during the
# reshard, either kills the launcher at a reshard kill point (then resumes
# it) or SIGKILLs a parameter server. It must finish with every embedding key
# stored exactly once, on the server owning its slot, and the same key set as
# the undisturbed run (bench/reshard_chaos.py, bench/chaos_check.cc).
#
#   bench/run.sh reshard-chaos [--rounds 30] [--launcher-share 0.5] [--seed 1]
#
# Last line: RESULT name=reshard-chaos rounds=.. faults=.. launcher_kills=..
#            ps_kills=.. completed=.. rows_lost=.. double_owned=.. misplaced=.. pass=..
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
need_shadowsync
need_file "$ROOT/build/release/bin/chaos_check" "chaos_check"
exec "$PY" "$ROOT/bench/reshard_chaos.py" --bin "$SHADOWSYNC" \
  --check "$ROOT/build/release/bin/chaos_check" --workdir "$BENCH_TMP/reshard-chaos" "$@"
