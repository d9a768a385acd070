#!/usr/bin/env bash
# Does added network latency cost training throughput? Runs none, shadow-*,
# fg-ma (k = 10) and bsp with 2 trainers, 2 ps and 1 syncer, once directly and
# once with the trainers reaching the syncer through bench/latency_proxy.py,
# which delays every byte by DELAY ms each way (this machine's kernel has no
# sch_netem, so `tc netem` is unavailable). Parameter-server traffic is not
# delayed: it is the same under every strategy, and the question is what
# sync costs.
#
#   bench/run.sh sync-latency [--delay-ms 5] [--examples N] [--repeats R]
#
# Last line: RESULT name=sync-latency delay_ms=.. none=.. shadow_easgd=..
#   shadow_ma=.. shadow_bmuf=.. fg_ma_k10=.. bsp=..  (throughput with / without)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

exit_if_help "$@"
run_sync_script sync_latency.py "$BENCH_TMP/sync/latency-runs" "$@"
