#!/usr/bin/env bash
# Throughput of every dense-sync strategy relative to `none` (issue: distributed
# training with shadow synchronization). The same job runs under each strategy:
# 2 trainers x 1 Hogwild thread, 2 parameter servers, 1 syncer, DLRM-small,
# synthetic teacher data, all processes on loopback; each run trains EXAMPLES
# examples per trainer after preloading its share. fg-* run at k = 1 and 10.
#
#   bench/run.sh sync [--examples N (200000)] [--repeats R (3)] [--threads T]
#                     [--duty-cycle D] [--only label,label] [--dense-precision fp32]
#
# Prints a table per run (examples/s summed over trainers, sync rounds, mean
# round latency, sync gap in local steps, MB sent, seconds training threads
# were blocked) and the median ratio of each strategy to none. Last line:
#   RESULT name=sync none_eps=.. shadow_easgd=.. shadow_ma=.. shadow_bmuf=..
#          fg_ma_k1=.. bsp=.. asp=.. (and the other fg-* variants)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

exit_if_help "$@"
run_sync_script sync.py "$BENCH_TMP/sync/runs" "$@"
