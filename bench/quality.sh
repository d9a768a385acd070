#!/usr/bin/env bash
# Model quality after one pass, three checks:
#  1. Real data: the Criteo sample (../shared/data/criteo/criteo_sample.tsv),
#     first 90% of the lines -> train file, last 10% -> eval file; one pass of
#     `shadowsync train` and of the PyTorch peer with the same hyperparameters,
#     for each interaction (dot: DLRM's pairwise dots; dcn: DCN-v2 cross
#     layers, DCN_LAYERS x DCN_LOW_RANK at learning rate DCN_LR, default 0.01,
#     where it trains best; the peer with TorchRec's LowRankCrossNet formula),
#     each with CRITEO_SEEDS initialisation seeds
#     (default 3: one seed's AUC moves by about 0.001); the means of eval AUC /
#     NE and the gaps (ours - torch, dcn - dot).
#  2. Synthetic data with a planted teacher (`shadowsync gen-data`, 4.4M
#     examples, seed 7, 2 Hogwild threads): ours trained on the first 90%,
#     evaluated on the last 10%; eval NE divided by the teacher's NE (the best
#     achievable; 1.0 = matches it). About 4M training examples are what it
#     takes to come within 1.5% of the teacher.
#  3. The seed grid: GRID_SEEDS seeds (default 20) x {1, 2 threads} x {fp32,
#     bf16} x {batch 256, 512}, on synthetic data (GRID_SYNTH_EXAMPLES
#     training examples, default 200k, plus 50k held out from the same
#     teacher, data seed 7) and on the Criteo split of check 1. Each cell's
#     runs differ only in the initialisation seed. A run is collapsed when its
#     eval NE is more than 1% above its cell's median; seed_spread_ne is the
#     largest relative distance from a cell's median. Calibration (mean
#     prediction / observed rate) should land in [0.9, 1.1]. --grid-seeds 0
#     skips it (it takes about 30 minutes on 2 cores).
#
#   bench/quality.sh [--batch-size 256] [--lr 0.02] [--optimizer adagrad]
#                    [--hash-buckets 1000000] [--seed 1] [--threads 1]
#                    [--train-fraction 0.9] [--data criteo_sample.tsv]
#                    [--synth-examples 4400000] [--synth-seed 7] [--synth-threads 2]
#                    [--precision fp32] [--lr-warmup-steps 100] [--grid-seeds 20] [--grid-synth-examples 200000]
#                    [--criteo-seeds 3] [--dcn-layers 3] [--dcn-low-rank 512] [--dcn-lr 0.01]
#
# Environment variables of the same names work too (BATCH_SIZE, LR, OPTIMIZER,
# HASH_BUCKETS, SEED, THREADS, TRAIN_FRACTION, DATA, SYNTH_EXAMPLES, SYNTH_SEED,
# SYNTH_THREADS, PRECISION, LR_WARMUP_STEPS, GRID_SEEDS, GRID_SYNTH_EXAMPLES,
# GRID_THREADS, CRITEO_SEEDS, DCN_LAYERS, DCN_LOW_RANK, DCN_LR). --synth-examples 0 skips check 2. --precision is
# the MLP GEMMs' (fp32, bf16 or auto): ours gets it as --dense-precision, and
# the peer runs under torch.autocast(bfloat16) whenever ours resolves to bf16.
#
# Default lr 0.02 (also the trainer's default): with one pass over the sample, the
# PyTorch peer's eval AUC at lr 0.05 swung 0.713-0.752 over seeds 1-3, while
# lr 0.005-0.02 gave 0.756-0.758 for every seed (0.1: 0.69), so a gap measured
# at 0.05 would be mostly seed noise.
#
# The last line is machine-readable:
#   RESULT name=quality auc_dot=.. auc_dcn=.. peer_auc_dot=.. peer_auc_dcn=..
#          auc_gap_dot=.. auc_gap_dcn=.. dcn_gain=.. ne_dot=.. ne_dcn=..
#          synth_ne=.. teacher_ne=.. synth_ne_ratio=.. synth_examples=..
#          seed_spread_ne=.. collapsed_runs=.. grid_runs=.. calibration_min=..
#          calibration_max=..
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

BATCH_SIZE="${BATCH_SIZE:-256}"
LR="${LR:-0.02}"
OPTIMIZER="${OPTIMIZER:-adagrad}"
HASH_BUCKETS="${HASH_BUCKETS:-1000000}"
SEED="${SEED:-1}"
THREADS="${THREADS:-1}"
TRAIN_FRACTION="${TRAIN_FRACTION:-0.9}"
DATA="${DATA:-$ROOT/../shared/data/criteo/criteo_sample.tsv}"
SYNTH_EXAMPLES="${SYNTH_EXAMPLES:-4400000}"
SYNTH_SEED="${SYNTH_SEED:-7}"
SYNTH_THREADS="${SYNTH_THREADS:-2}"
PRECISION="${PRECISION:-fp32}"
LR_WARMUP_STEPS="${LR_WARMUP_STEPS:-100}"
GRID_SEEDS="${GRID_SEEDS:-20}"
GRID_THREADS="${GRID_THREADS:-1 2}"  # The grid's thread counts (a subset reruns part of it).
GRID_SYNTH_EXAMPLES="${GRID_SYNTH_EXAMPLES:-200000}"
CRITEO_SEEDS="${CRITEO_SEEDS:-3}"
DCN_LAYERS="${DCN_LAYERS:-3}"
DCN_LOW_RANK="${DCN_LOW_RANK:-512}"
DCN_LR="${DCN_LR:-0.01}"

parse_flags --batch-size --lr --optimizer --hash-buckets --seed --threads --train-fraction \
  --data --synth-examples --synth-seed --synth-threads --precision --grid-seeds \
  --grid-synth-examples --lr-warmup-steps --criteo-seeds --dcn-layers --dcn-low-rank --dcn-lr -- "$@"
SYNTH_THREADS="${SYNTH_THREADS:-$THREADS}"

[[ -f "$DATA" ]] || die "Criteo sample not found at $DATA (expected ../shared/data/criteo/criteo_sample.tsv next to the repository; pass --data FILE to use another)"
need_shadowsync
need_torch

WORK=$(mktemp -d "${TMPDIR:-/tmp}/shadowsync-quality.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$BENCH_TMP/quality"
OUT="$BENCH_TMP/quality"

hp_args=(--batch-size "$BATCH_SIZE" --lr-warmup-steps "$LR_WARMUP_STEPS" --optimizer "$OPTIMIZER"
  --hash-buckets "$HASH_BUCKETS" --preload)
torch_precision=()
case "$PRECISION" in
  fp32) ;;
  bf16) torch_precision=(--bf16) ;;
  auto) ! cpu_has_bf16 || torch_precision=(--bf16) ;;
  *) die "--precision: '$PRECISION' is not one of fp32, bf16, auto" ;;
esac
echo "quality benchmark: one pass, batch=$BATCH_SIZE lr=$LR optimizer=$OPTIMIZER" \
  "hash_buckets=$HASH_BUCKETS seed=$SEED threads=$THREADS train_fraction=$TRAIN_FRACTION" \
  "precision=$PRECISION"

# run_ours TRAIN EVAL THREADS JSON [FLAGS...] / run_torch TRAIN EVAL THREADS JSON [FLAGS...]
run_ours() {
  local log="${4%.json}.log"
  "$SHADOWSYNC" train --data "$1" --eval-data "$2" --threads "$3" "${hp_args[@]}" \
    --dense-precision "$PRECISION" --report-json "$4" "${@:5}" >"$log" 2>&1 || { tail -n 20 "$log" >&2; die "shadowsync train failed (log: $log)"; }
  need_file "$4" "shadowsync report"
}
run_torch() {
  local log="${4%.json}.log"
  "$PY" "$TORCH_PEER" --data "$1" --eval-data "$2" --threads "$3" "${hp_args[@]}" \
    "${torch_precision[@]}" --report-json "$4" "${@:5}" >"$log" 2>&1 || { tail -n 20 "$log" >&2; die "torch peer failed (log: $log)"; }
  need_file "$4" "torch peer report"
}

# ---- 1. Criteo sample, ours vs torch, dot vs dcn
counts=$(split_file "$DATA" "$TRAIN_FRACTION" "$WORK/criteo_train.tsv" "$WORK/criteo_eval.tsv")
read -r ntrain neval <<<"$counts"
echo
echo "1. $DATA: $ntrain train / $neval eval lines; seeds $SEED..$((SEED + CRITEO_SEEDS - 1));" \
  "dcn: $DCN_LAYERS layers, low rank $DCN_LOW_RANK, lr $DCN_LR"
printf '%-6s %-4s %5s %9s %9s %9s %12s %10s\n' program int seed eval_auc eval_ne train_ne eval_logloss "ex/s"
for ((s = SEED; s < SEED + CRITEO_SEEDS; ++s)); do
  for interaction in dot dcn; do
    lr=$LR
    [[ "$interaction" == dot ]] || lr=$DCN_LR
    flags=(--seed "$s" --lr "$lr" --interaction "$interaction" --dcn-layers "$DCN_LAYERS"
      --dcn-low-rank "$DCN_LOW_RANK")
    run_ours "$WORK/criteo_train.tsv" "$WORK/criteo_eval.tsv" "$THREADS" "$OUT/criteo_ours_${interaction}_s$s.json" "${flags[@]}"
    run_torch "$WORK/criteo_train.tsv" "$WORK/criteo_eval.tsv" "$THREADS" "$OUT/criteo_torch_${interaction}_s$s.json" "${flags[@]}"
    for who in ours torch; do
      j="$OUT/criteo_${who}_${interaction}_s$s.json"
      printf '%-6s %-4s %5s %9s %9s %9s %12s %10s\n' "$who" "$interaction" "$s" \
        "$(calc "$(json_get "$j" eval_auc)" .4f)" "$(calc "$(json_get "$j" eval_ne)" .4f)" \
        "$(calc "$(json_get "$j" train_ne)" .4f)" "$(calc "$(json_get "$j" eval_logloss)" .4f)" \
        "$(calc "$(json_get "$j" examples_per_second)" .0f)"
    done
  done
done
# mean WHO INTERACTION KEY: the key's mean over the seeds.
mean() {
  "$PY" - "$OUT" "$1" "$2" "$3" <<'PYEOF'
import glob, json, os, sys
out, who, interaction, key = sys.argv[1:]
values = [json.load(open(p))[key] for p in glob.glob(os.path.join(out, f"criteo_{who}_{interaction}_s*.json"))]
print(f"{sum(values) / len(values):.5f}")
PYEOF
}
auc_dot=$(mean ours dot eval_auc) auc_dcn=$(mean ours dcn eval_auc)
peer_auc_dot=$(mean torch dot eval_auc) peer_auc_dcn=$(mean torch dcn eval_auc)
ne_dot=$(mean ours dot eval_ne) ne_dcn=$(mean ours dcn eval_ne)
auc_gap_dot=$(calc "$auc_dot - $peer_auc_dot" +.5f) auc_gap_dcn=$(calc "$auc_dcn - $peer_auc_dcn" +.5f)
dcn_gain=$(calc "$auc_dcn - $auc_dot" +.5f)
echo "mean eval AUC over $CRITEO_SEEDS seeds: ours dot $auc_dot, dcn $auc_dcn (dcn - dot $dcn_gain);" \
  "peer dot $peer_auc_dot, dcn $peer_auc_dcn (dcn - dot $(calc "$peer_auc_dcn - $peer_auc_dot" +.5f))"
echo "AUC gap (ours - peer): dot $auc_gap_dot, dcn $auc_gap_dcn"

# ---- 2. synthetic data vs the planted teacher
synth_ne=nan teacher_ne=nan synth_ratio=nan synth_examples=0
if [[ "$SYNTH_EXAMPLES" -gt 0 ]]; then
  synth="$BENCH_TMP/synth_${SYNTH_EXAMPLES}_seed${SYNTH_SEED}.tsv"
  if [[ ! -s "$synth" || ! -s "$synth.teacher.json" ]]; then
    note "generating $SYNTH_EXAMPLES synthetic examples (seed $SYNTH_SEED) into $synth"
    "$SHADOWSYNC" gen-data --out "$synth" --examples "$SYNTH_EXAMPLES" --seed "$SYNTH_SEED" >&2
  fi
  counts=$(split_file "$synth" "$TRAIN_FRACTION" "$WORK/synth_train.tsv" "$WORK/synth_eval.tsv")
  read -r strain seval <<<"$counts"
  echo
  echo "2. synthetic ($synth): $strain train / $seval eval lines, threads=$SYNTH_THREADS"
  run_ours "$WORK/synth_train.tsv" "$WORK/synth_eval.tsv" "$SYNTH_THREADS" "$OUT/synth_ours.json" \
    --seed "$SEED" --lr "$LR"
  synth_ne=$(calc "$(json_get "$OUT/synth_ours.json" eval_ne)" .5f)
  synth_examples=$(json_get "$OUT/synth_ours.json" examples)
  teacher_ne=$(calc "$(json_get "$synth.teacher.json" ne)" .5f)
  synth_ratio=$(calc "$synth_ne / $teacher_ne" .4f)
  echo "ours eval NE $synth_ne (AUC $(calc "$(json_get "$OUT/synth_ours.json" eval_auc)" .4f))," \
    "teacher NE $teacher_ne (AUC $(calc "$(json_get "$synth.teacher.json" auc)" .4f)); ratio $synth_ratio" \
    "after $synth_examples training examples"
fi

# ---- 3. the seed grid
grid_result="seed_spread_ne=nan collapsed_runs=nan grid_runs=0 calibration_min=nan calibration_max=nan"
if [[ "$GRID_SEEDS" -gt 0 ]]; then
  grid="$OUT/grid"
  rm -rf "$grid"
  mkdir -p "$grid"
  gsynth="$BENCH_TMP/grid_synth_${GRID_SYNTH_EXAMPLES}.tsv"
  if [[ ! -s "$gsynth" || ! -s "${gsynth%.tsv}.eval.tsv" ]]; then
    note "generating $GRID_SYNTH_EXAMPLES + 50000 held-out synthetic examples into $gsynth"
    "$SHADOWSYNC" gen-data --out "$gsynth" --examples "$GRID_SYNTH_EXAMPLES" \
      --eval-examples 50000 --seed 7 >&2
  fi
  echo
  echo "3. seed grid: $GRID_SEEDS seeds x {1,2 threads} x {fp32,bf16} x {batch 256,512}," \
    "synthetic ($GRID_SYNTH_EXAMPLES examples) and Criteo"
  for data in synth criteo; do
    if [[ "$data" == synth ]]; then
      files=("$gsynth" "${gsynth%.tsv}.eval.tsv")
    else
      files=("$WORK/criteo_train.tsv" "$WORK/criteo_eval.tsv")
    fi
    for threads in $GRID_THREADS; do
      for precision in fp32 bf16; do
        for batch in 256 512; do
          for ((seed = 1; seed <= GRID_SEEDS; ++seed)); do
            j="$grid/$data-t$threads-$precision-b$batch-s$seed.json"
            "$SHADOWSYNC" train --data "${files[0]}" --eval-data "${files[1]}" --threads "$threads" \
              --batch-size "$batch" --lr "$LR" --lr-warmup-steps "$LR_WARMUP_STEPS" \
              --optimizer "$OPTIMIZER" \
              --hash-buckets "$HASH_BUCKETS" --seed "$seed" --dense-precision "$precision" \
              --report-json "$j" >"${j%.json}.log" 2>&1 || die "shadowsync train failed (log: ${j%.json}.log)"
          done
        done
      done
    done
  done
  grid_result=$("$PY" - "$grid" <<'PYEOF'
import glob, json, os, statistics, sys
cells = {}
for path in glob.glob(os.path.join(sys.argv[1], "*.json")):
    name = os.path.basename(path)[:-5]
    cell, seed = name.rsplit("-s", 1)
    r = json.load(open(path))
    cells.setdefault(cell, []).append((int(seed), r["eval_ne"], r["eval_calibration"]))
spread, collapsed, runs, cals = 0.0, 0, 0, []
print(f"{'cell':24} {'median NE':>9} {'max dev':>8} {'collapsed':>9} {'calibration':>13}", file=sys.stderr)
for cell in sorted(cells):
    rows = sorted(cells[cell])
    med = statistics.median(ne for _, ne, _ in rows)
    devs = [(ne - med) / med for _, ne, _ in rows]
    bad = [s for (s, ne, _), d in zip(rows, devs) if d > 0.01]
    c = [cal for _, _, cal in rows]
    spread = max(spread, max(abs(d) for d in devs))
    collapsed += len(bad)
    runs += len(rows)
    cals += c
    print(f"{cell:24} {med:9.4f} {max(abs(d) for d in devs):8.4f} {len(bad):9d} "
          f"{min(c):6.3f}-{max(c):.3f}" + (f"  collapsed seeds {bad}" if bad else ""), file=sys.stderr)
print(f"seed_spread_ne={spread:.4f} collapsed_runs={collapsed} grid_runs={runs} "
      f"calibration_min={min(cals):.3f} calibration_max={max(cals):.3f}")
PYEOF
  )
  echo "$grid_result"
fi

echo "reports and logs: $OUT"
echo "RESULT name=quality auc_dot=$auc_dot auc_dcn=$auc_dcn peer_auc_dot=$peer_auc_dot" \
  "peer_auc_dcn=$peer_auc_dcn auc_gap_dot=$auc_gap_dot auc_gap_dcn=$auc_gap_dcn dcn_gain=$dcn_gain" \
  "ne_dot=$ne_dot ne_dcn=$ne_dcn synth_ne=$synth_ne teacher_ne=$teacher_ne" \
  "synth_ne_ratio=$synth_ratio synth_examples=$synth_examples $grid_result"
