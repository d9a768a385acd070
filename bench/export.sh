#!/usr/bin/env bash
# The model export at scale: a job with ROWS embedding rows (default 10 M) on
# 2 parameter servers. build/release/bin/make_export writes a synthetic export
# of that size; `shadowsync run` warm-starts a 2-trainer job from it (the
# import: rows/s from the report's `init`), and while the job trains,
# `shadowsync export RUN_DIR` exports every row again, EXPORTS times, each
# after GAP seconds of training alone (rows/s and MB/s: over those exports).
# The job's own progress samples give the training throughput during the
# exports against the gaps between them: interleaved windows, so that the
# host's drift over the run (a shared VM) weighs on both alike. The export at
# completion (training stopped) is reported too.
#
#   bench/export.sh [--rows 10000000] [--examples 4000000] [--exports 3] [--gap 12]
#
# The last line is machine-readable:
#   RESULT name=export export_rows_per_s=.. import_rows_per_s=.. train_ratio_during_export=..
#          export_mb_per_s=.. idle_export_rows_per_s=.. rows=..
# export_rows_per_s is the export taken while training runs; idle_... the one
# at completion. Targets (issue 26): >= 500k rows/s each way, train ratio >= 0.8.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

ROWS=10000000
EXAMPLES=4000000
EXPORTS=3
GAP=12
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rows) ROWS="$2"; shift 2 ;;
    --examples) EXAMPLES="$2"; shift 2 ;;
    --exports) EXPORTS="$2"; shift 2 ;;
    --gap) GAP="$2"; shift 2 ;;
    -h | --help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1" ;;
  esac
done
need_shadowsync
MAKE_EXPORT="$ROOT/build/release/bin/make_export"
[[ -x "$MAKE_EXPORT" ]] || die "$MAKE_EXPORT not built; run bench/run.sh export"

work="$BENCH_TMP/export"
rm -rf "$work"
mkdir -p "$work"
cat >"$work/job.yaml" <<EOF
apiVersion: shadowsync.io/v1alpha1
kind: ShadowSyncJob
metadata: {name: export-bench}
spec:
  model: {criteoTables: {hashBuckets: 1000000}}
  data: {format: synthetic, synthetic: {examples: $EXAMPLES, evalExamples: 20000, seed: 1}}
  trainer: {replicas: 2, threads: 1, batchSize: 256}
  parameterServer: {replicas: 2, cacheBytes: 256Mi}
  syncer: {replicas: 1}
  sync: {algorithm: shadow-easgd}
EOF
note "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), kernel $(uname -r)"
note "writing a synthetic export of $ROWS rows"
"$MAKE_EXPORT" --config "$work/job.yaml" --rows "$ROWS" --out "$work/model" >&2
echo "  init: {fromModel: $work/model}" >>"$work/job.yaml"

run="$work/run"
"$SHADOWSYNC" run "$work/job.yaml" --out "$run" --progress-interval 0.5 >"$work/run.out" 2>"$work/run.log" &
launcher=$!
trap 'kill $launcher 2>/dev/null || true' EXIT
# The import first; then training alone for 5 s of warm-up plus GAP before
# each export.
for _ in $(seq 1 1200); do
  [[ -f "$run/trainer-1.ready" ]] && break
  kill -0 $launcher 2>/dev/null || { cat "$work/run.log" >&2; die "the job failed"; }
  sleep 0.5
done
[[ -f "$run/trainer-1.ready" ]] || die "the trainers never started; see $work/run.log"
sleep 5
for i in $(seq 1 "$EXPORTS"); do
  sleep "$GAP"
  note "export $i of $EXPORTS while the job trains"
  "$SHADOWSYNC" export "$run" --json >"$work/export-$i.json" 2>"$work/export.err" ||
    { cat "$work/export.err" >&2; die "export $i failed"; }
done
note "the job trains on, then ends with its own export"
wait $launcher || { cat "$work/run.log" >&2; die "the job failed"; }
trap - EXIT
tail -n 8 "$work/run.out" >&2

"$PY" - "$run/report.json" "$GAP" "$work"/export-*.json <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
gap = float(sys.argv[2])
live = [json.load(open(f)) for f in sys.argv[3:]]
samples = [(p["seconds"], p["examples_per_second"]) for p in r["progress"]]
last = samples[-1][0]
# Samples are rates over the interval before them (0.5 s): one counts for an
# export if it ends inside it, for training alone if it ends in the gap
# before an export or in as long a stretch after the last, 1 s from either
# end.
windows = [e["job_seconds"] for e in live]
gaps = [(a - gap + 1, a - 1) for a, _ in windows]
gaps.append((windows[-1][1] + 1, min(windows[-1][1] + gap, last - 2)))
def within(t, spans, lead):
    return any(a + lead <= t <= b for a, b in spans)
during = [v for t, v in samples if within(t, windows, 0.5)]
alone = [v for t, v in samples if within(t, gaps, 0)]
mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")
ratio = mean(during) / mean(alone)
seconds = sum(e["seconds"] for e in live)
rate = sum(e["rows"] for e in live) / seconds
mb = sum(e["bytes"] for e in live) / 1e6 / seconds
print(f"# import (warm start): {r['init']['rows']} rows in {r['init']['seconds']:.1f} s = "
      f"{r['init']['rows_per_second']:.0f} rows/s onto {r['init']['parameter_servers']} servers")
for i, e in enumerate(live, 1):
    a, b = e["job_seconds"]
    print(f"# export {i} while training: {e['rows']} rows in {e['seconds']:.1f} s "
          f"(job time {a:.1f}-{b:.1f} s) = {e['rows_per_second']:.0f} rows/s")
print(f"# exports while training: {rate:.0f} rows/s, {mb:.0f} MB/s")
print(f"# export at completion (idle): {r['export']['rows']} rows, "
      f"{r['export']['rows_per_second']:.0f} rows/s")
print(f"# training: {mean(during):.0f} ex/s during the exports ({len(during)} samples), "
      f"{mean(alone):.0f} ex/s in the gaps before and after them ({len(alone)} samples)")
print(f"RESULT name=export export_rows_per_s={rate:.0f} "
      f"import_rows_per_s={r['init']['rows_per_second']:.0f} train_ratio_during_export={ratio:.3f} "
      f"export_mb_per_s={mb:.0f} idle_export_rows_per_s={r['export']['rows_per_second']:.0f} "
      f"rows={live[-1]['rows']} exports={len(live)}")
EOF
