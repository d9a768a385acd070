#!/usr/bin/env bash
# Every dense-sync strategy of the product with and without a straggler
# (issue: DS-Sync, Sync-Switch, SSP and PS+). 4 trainers x 1 Hogwild thread,
# 2 parameter servers, 1 syncer, DLRM-small, synthetic teacher data, all on
# loopback; in the straggler runs the last trainer's steps last FACTOR (4)
# times as long (`shadowsync worker --straggle-factor`). Each trainer trains
# EXAMPLES (100000) examples of its share after preloading it, then scores its
# replica on 20k held-out examples. About 25 minutes on 2 cores.
#
#   bench/run.sh stragglers [--examples N] [--factor F] [--only label,label]
#                           [--json FILE] [--syncer-delay-ms D]
#
# Writes bench/results/stragglers.md (the table) and stragglers.svg (the plot).
# Prints one row per strategy and condition: examples/s summed over trainers,
# eval NE, MB sent + received, time per iteration, seconds blocked on sync,
# rounds. Last line:
#   RESULT name=stragglers syncswitch_vs_bsp=.. psplus_vs_asp_iter=..
#          dssync_vs_bsp=.. ne_gap_syncswitch=..
# (all with the straggler: sync-switch online / bsp throughput, ps-plus / asp
# time per iteration, ds-sync / bsp throughput, sync-switch's eval NE / bsp's - 1).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
[[ "${1:-}" == "-h" || "${1:-}" == "--help" ]] && { usage; exit 0; }

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
  --eval-data "$OUT/eval20k.tsv" --workdir "$OUT/runs" --report "$ROOT/bench/results/stragglers" "$@"
