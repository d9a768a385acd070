#!/usr/bin/env bash
# Every dense-sync strategy of the product with and without a straggler
# (issue: DS-Sync, Sync-Switch, SSP and PS+). 4 trainers x 1 Hogwild thread,
# 2 parameter servers, 1 syncer, DLRM-small, synthetic teacher data, all on
# loopback; in the straggler runs the last trainer's steps last FACTOR (4)
# times as long (`shadowsync worker --straggle-factor`). Each trainer trains
# EXAMPLES (100000) examples of its share after preloading it, then scores its
# replica on 20k held-out examples. Then ps-plus and asp run again with the
# straggler, alternating, LATENCY_REPEATS (3) times each, against a syncer
# that holds every reply 15 ms and then 5 ms (`shadowsync syncer
# --reply-delay-ms`, a timer): the network time a blocking pull pays between
# machines and loopback lacks, which is what ps-plus's eager pull hides
# (15 ms: this job's 1.9 MB push and pull at 2 Gb/s). About 35 minutes on 2
# cores.
#
#   bench/run.sh stragglers [--examples N] [--factor F] [--only label,label]
#                           [--json FILE] [--syncer-delay-ms D]
#                           [--latency-ms L1,L2] [--latency-repeats R] [--latency-only]
#
# Writes bench/results/stragglers.md (the table), stragglers.svg (the plot) and
# stragglers.json (every figure, the latency pairs' runs included).
# Prints one row per strategy and condition: examples/s summed over trainers,
# eval NE, MB sent + received, time per iteration, seconds blocked on sync,
# rounds. Last line:
#   RESULT name=stragglers syncswitch_vs_bsp=.. psplus_vs_asp_iter=..
#          psplus_vs_asp_iter_5ms=.. psplus_vs_asp_iter_loopback=..
#          dssync_vs_bsp=.. ne_gap_syncswitch=..
# (all with the straggler: sync-switch online / bsp throughput, ps-plus / asp
# time per iteration with replies held 15 ms (median of the pairs), 5 ms, and
# on plain loopback, ds-sync / bsp throughput, sync-switch's eval NE / bsp's - 1).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

exit_if_help "$@"

need_shadowsync
OUT="$BENCH_TMP/stragglers"
mkdir -p "$OUT"
if [[ ! -s "$OUT/eval20k.tsv" ]]; then
  note "generating 500000 + 20000 synthetic examples (one teacher) into $OUT"
  "$SHADOWSYNC" gen-data --out "$OUT/all.tsv" --examples 520000 --seed 11 >&2
  head -n 500000 "$OUT/all.tsv" > "$OUT/train.tsv"
  tail -n +500001 "$OUT/all.tsv" > "$OUT/eval20k.tsv.tmp"
  mv "$OUT/eval20k.tsv.tmp" "$OUT/eval20k.tsv"
  rm -f "$OUT/all.tsv"
fi
check_load
exec "$PY" "$ROOT/bench/stragglers.py" --bin "$SHADOWSYNC" --data "$OUT/train.tsv" \
  --eval-data "$OUT/eval20k.tsv" --workdir "$OUT/runs" --report "$ROOT/bench/results/stragglers" \
  --json "$ROOT/bench/results/stragglers.json" "$@"
