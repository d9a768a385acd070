#!/usr/bin/env bash
# Training throughput: `shadowsync train` against the PyTorch peer
# (bench/peers/torch_dlrm.py) on the same DLRM-small model, data, batch size,
# optimiser, learning rate and hash buckets, at 1 and 2 threads, both with the
# data preloaded so only the training loop is timed. Each configuration runs
# REPEATS times and the best examples/s counts (the run least disturbed by
# other processes), for both programs alike.
#
# The trainer picks its fp32 GEMM kernel itself (OpenBLAS as loaded, or
# oneDNN), whatever OPENBLAS_CORETYPE says; the peer's OpenBLAS obeys the
# variable. So the peer runs twice: "as installed", under this environment,
# and "best" (torch_best), with OPENBLAS_CORETYPE set to the core type whose
# sgemm peak `shadowsync bench gemm` measured highest. The ratio is judged
# best against best.
#
# Both programs run at both precisions: fp32 (the headline ratio), and bf16
# MLP GEMMs (`--dense-precision bf16` against the peer's `--bf16`, i.e.
# torch.autocast; fp32 weights and optimizer in both). bf16 runs only where
# the CPU has AVX512-BF16 (elsewhere both would emulate it).
#
#   bench/trainer.sh [--batch-size 512] [--lr 0.02] [--optimizer adagrad]
#                    [--hash-buckets 1000000] [--examples 400000] [--eval-examples 20000]
#                    [--seed 1] [--repeats 3] [--data TRAIN.tsv [--eval-data EVAL.tsv]]
#
# 400k examples by default: in a 100k-example pass at batch 512 each of 2
# Hogwild threads takes only ~100 steps, and such runs can end near the base
# rate; over 400k they end within 1% of 1 thread (docs/decisions.md). Some
# seeds stall the peer too (batch 256, seed 1). So the table's eval NE is
# checked: a WARNING names a run more than 2% off.
#
# Every flag also has an environment variable (BATCH_SIZE, LR, OPTIMIZER,
# HASH_BUCKETS, EXAMPLES, EVAL_EXAMPLES, SEED, REPEATS, DATA, EVAL_DATA).
# Without --data, synthetic data (`shadowsync gen-data`, EXAMPLES+EVAL_EXAMPLES
# examples, split head/tail) is generated once into bench/results/tmp/.
#
# The last line is machine-readable:
#   RESULT name=trainer ours_eps=.. torch_eps=.. ratio=.. roofline_fraction=..
#          ratio_ceiling=.. ours_eps_2t=.. torch_eps_2t=.. ratio_2t=..
#          kernel=.. cpu=.. peak_best_gflops=.. torch_best_eps=.. ratio_best=..
#          ratio_best_2t=.. roofline_fraction_best=..
#          [ours_bf16_eps=.. torch_bf16_eps=.. ratio_bf16=.. ratio_bf16_2t=..
#           ours_bf16_speedup=.. roofline_fraction_bf16=..]
# ratio = ours/torch examples/s (as installed); roofline_fraction = ours 1-thread
# examples/s x flops_per_example / the as-installed OpenBLAS's single-core sgemm
# peak; ratio_ceiling = the 1-thread ratio over torch_best of a trainer whose
# whole step ran at the best kernel's peak. kernel = ours' fp32 GEMM kernel (from its report); cpu = the CPU's
# model name; peak_best_gflops = the best single-core sgemm peak of every
# kernel (`shadowsync bench gemm`); ratio_best = ours/torch_best;
# roofline_fraction_best = roofline_fraction against peak_best_gflops.
# ours_bf16_speedup = ours bf16 / ours fp32 at 1 thread; roofline_fraction_bf16
# is ours bf16 against the best fp32 sgemm peak (bf16 doubles the peak).
# The table's "cores" column is each program's CPU time over its training loop
# divided by the loop's wall time (a WARNING line flags a run above its thread
# count); "others" is how many cores other processes kept busy during the best
# run; above ~0.15 the figures are disturbed and a WARNING line says so.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

BATCH_SIZE="${BATCH_SIZE:-512}"
LR="${LR:-0.02}"
OPTIMIZER="${OPTIMIZER:-adagrad}"
HASH_BUCKETS="${HASH_BUCKETS:-1000000}"
EXAMPLES="${EXAMPLES:-400000}"
EVAL_EXAMPLES="${EVAL_EXAMPLES:-20000}"
SEED="${SEED:-1}"
REPEATS="${REPEATS:-3}"
DATA="${DATA:-}"
EVAL_DATA="${EVAL_DATA:-}"

parse_flags --batch-size --lr --optimizer --hash-buckets --examples --eval-examples --seed \
  --repeats --data --eval-data -- "$@"
[[ "$REPEATS" -ge 1 ]] || die "--repeats must be at least 1"

need_shadowsync
need_torch
mkdir -p "$BENCH_TMP/trainer"
OUT="$BENCH_TMP/trainer"

# ---- data
if [[ -z "$DATA" ]]; then
  total=$((EXAMPLES + EVAL_EXAMPLES))
  synth="$BENCH_TMP/synth_${total}_seed${SEED}.tsv"
  DATA="$OUT/train_${EXAMPLES}_seed${SEED}.tsv"
  EVAL_DATA="$OUT/eval_${EVAL_EXAMPLES}_seed${SEED}.tsv"
  if [[ ! -s "$synth" || ! -s "$synth.teacher.json" ]]; then
    note "generating $total synthetic examples (seed $SEED) into $synth"
    "$SHADOWSYNC" gen-data --out "$synth" --examples "$total" --seed "$SEED" >&2
  fi
  if [[ ! -s "$DATA" || ! -s "$EVAL_DATA" || "$DATA" -ot "$synth" ]]; then
    head -n "$EXAMPLES" "$synth" >"$DATA"
    tail -n "+$((EXAMPLES + 1))" "$synth" >"$EVAL_DATA"
  fi
fi
need_file "$DATA" "training data"
[[ -z "$EVAL_DATA" ]] || need_file "$EVAL_DATA" "eval data"
eval_args=()
[[ -z "$EVAL_DATA" ]] || eval_args=(--eval-data "$EVAL_DATA")

common_args=(--data "$DATA" "${eval_args[@]}" --batch-size "$BATCH_SIZE" --lr "$LR"
  --optimizer "$OPTIMIZER" --hash-buckets "$HASH_BUCKETS" --seed "$SEED" --preload)

echo "trainer benchmark: data=$DATA ($(count_lines "$DATA") lines) eval=${EVAL_DATA:-none}"
echo "  batch=$BATCH_SIZE lr=$LR optimizer=$OPTIMIZER hash_buckets=$HASH_BUCKETS seed=$SEED repeats=$REPEATS (best of)"
echo "  torch: $("$PY" -c 'import torch; print(torch.__version__)') via $PY; machine: $(nproc) cores"
check_load

# ---- single-core sgemm peak, measured first while the machine is quiet
gemm_out=$("$SHADOWSYNC" bench gemm | tail -n 1)
gemm_field() { printf '%s\n' "$gemm_out" | "$PY" -c "import json, sys; j = json.load(sys.stdin); print($1)"; }
gflops=$(calc "$(gemm_field 'j["as_installed"]["gflops"]')" .2f)
peak_best=$(calc "$(gemm_field 'j["best"]["gflops"]')" .2f)
best_core=$(gemm_field 'j["best_openblas"].get("core_type", "")')
echo "  sgemm peak (1 core): as installed (OpenBLAS $(gemm_field 'j["as_installed"]["detail"]')) $gflops GFLOP/s;" \
  "best $(gemm_field 'j["best"]["kernel"] + " " + j["best"]["detail"]') $peak_best GFLOP/s"
gemm_field '"\n".join("    %s %s: %.1f GFLOP/s" % (k["kernel"], k["detail"], k["gflops"]) for k in j["kernels"])'
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1 | tr -s ' ' '_')
echo "  cpu: ${cpu:-unknown}, kernel $(uname -r); OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}; torch_best: OPENBLAS_CORETYPE=${best_core:-as installed}"

programs=(ours torch torch_best)
if cpu_has_bf16; then
  programs+=(ours_bf16 torch_bf16)
else
  echo "  no AVX512-BF16 on this CPU: fp32 only"
fi

# run_one WHO THREADS REP: one training run, its JSON report at $OUT/WHO_tTHREADS_rREP.json
run_one() {
  local who=$1 t=$2 rep=$3 json log
  json="$OUT/${who}_t${t}_r${rep}.json"
  log="$OUT/${who}_t${t}_r${rep}.log"
  rm -f "$json"
  case "$who" in
    ours | ours_bf16)
      local precision=fp32
      [[ "$who" == ours ]] || precision=bf16
      run_measured "${json%.json}.others" "$SHADOWSYNC" train "${common_args[@]}" --threads "$t" \
        --dense-precision "$precision" --report-json "$json" >"$log" 2>&1 ||
        { tail -n 20 "$log" >&2; die "shadowsync train failed (log: $log)"; }
      ;;
    *)
      local bf16=() core=()
      [[ "$who" != torch_bf16 ]] || bf16=(--bf16)
      [[ "$who" != torch_best || -z "$best_core" ]] || core=("OPENBLAS_CORETYPE=$best_core")
      run_measured "${json%.json}.others" env "${core[@]}" "$PY" "$TORCH_PEER" "${common_args[@]}" \
        --threads "$t" "${bf16[@]}" --report-json "$json" >"$log" 2>&1 ||
        { tail -n 20 "$log" >&2; die "torch peer failed (log: $log)"; }
      ;;
  esac
  need_file "$json" "$who report"
}

# best WHO THREADS: the report with the highest examples/s over the repeats.
best() {
  "$PY" - "$OUT" "$1" "$2" "$REPEATS" <<'EOF'
import json, sys
out, who, t, reps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
runs = []
for r in range(reps):
    j = json.load(open(f"{out}/{who}_t{t}_r{r}.json"))
    j["others"] = float(open(f"{out}/{who}_t{t}_r{r}.others").read())
    runs.append(j)
b = max(runs, key=lambda j: j.get("examples_per_second") or 0)
fmt = lambda v, f: "nan" if v is None else format(v, f)
all_eps = "/".join(fmt(j.get("examples_per_second"), ".0f") for j in runs)
print(fmt(b.get("examples_per_second"), ".1f"), all_eps, fmt(b.get("train_ne"), ".4f"),
      fmt(b.get("eval_ne"), ".4f"), fmt(b.get("eval_auc"), ".4f"), b.get("examples"),
      fmt(b["others"], ".2f"), fmt(b.get("flops_per_example"), ".6g"),
      fmt(b["cpu_seconds"] / b["seconds"] if b.get("cpu_seconds") else None, ".2f"))
EOF
}

# Interleave the programs so slow drifts in machine load hit both alike.
for t in 1 2; do
  for ((rep = 0; rep < REPEATS; rep++)); do
    for who in "${programs[@]}"; do
      note "run $who threads=$t repeat $((rep + 1))/$REPEATS"
      run_one "$who" "$t" "$rep"
    done
  done
done

# "cores": the program's own CPU seconds per second of its training loop, which
# shows that a 1-thread run used one core. "others": cores other processes kept
# busy during the best run (see run_measured).
row='%-10s %7s %12s %-22s %9s %9s %9s %9s %6s %7s\n'
# shellcheck disable=SC2059  # the format is a variable on purpose
printf "\n$row" program threads "ex/s(best)" "ex/s(all runs)" train_ne eval_ne eval_auc examples \
  cores others
declare -A eps flops ne
disturbed=0
for t in 1 2; do
  for who in "${programs[@]}"; do
    line=$(best "$who" "$t")
    read -r e all tne ene eauc n others fpe cores <<<"$line"
    eps[$who$t]=$e
    ne[$who$t]=$ene
    flops[$who$t]=$fpe
    # shellcheck disable=SC2059
    printf "$row" "$who" "$t" "$e" "$all" "$tne" "$ene" "$eauc" "$n" "$cores" "$others"
    if "$PY" -c "import sys; sys.exit(0 if float(sys.argv[1]) > 0.15 else 1)" "$others"; then
      disturbed=1
    fi
    if "$PY" -c "import sys; sys.exit(0 if float(sys.argv[1]) > float(sys.argv[2]) + 0.15 else 1)" \
      "$cores" "$t"; then
      echo "WARNING: $who with $t thread(s) used $cores cores; the comparison is not at equal threads"
    fi
  done
done
# Speed is compared at equal work whatever the model learned, but a run that
# ended far from its peer's or its own 1-thread NE is worth a look.
ne_off() { "$PY" -c "import sys; a, b = map(float, sys.argv[1:]); sys.exit(0 if a > b * 1.02 else 1)" "$1" "$2"; }
for who in "${programs[@]}"; do
  if ne_off "${ne[${who}2]}" "${ne[${who}1]}"; then
    echo "WARNING: $who: eval NE ${ne[${who}2]} at 2 threads is over 2% above ${ne[${who}1]} at 1 thread"
  fi
done
for t in 1 2; do
  for pair in "ours torch" "ours torch_best" "ours_bf16 torch_bf16"; do
    read -r a b <<<"$pair"
    [[ -n "${ne[$a$t]:-}" ]] || continue
    if ne_off "${ne[$a$t]}" "${ne[$b$t]}" || ne_off "${ne[$b$t]}" "${ne[$a$t]}"; then
      echo "WARNING: eval NE at $t thread(s): $a ${ne[$a$t]}, $b ${ne[$b$t]} (over 2% apart)"
    fi
  done
done
if [[ $disturbed -eq 1 ]]; then
  echo "WARNING: other processes used CPU during some best runs (others > 0.15 cores); the ratios are unreliable"
fi

ratio=$(calc "${eps[ours1]} / ${eps[torch1]}" .3f)
ratio_2t=$(calc "${eps[ours2]} / ${eps[torch2]}" .3f)
roofline=$(calc "${eps[ours1]} * ${flops[ours1]} / ($gflops * 1e9)" .3f)
ratio_best=$(calc "${eps[ours1]} / ${eps[torch_best1]}" .3f)
ratio_best_2t=$(calc "${eps[ours2]} / ${eps[torch_best2]}" .3f)
roofline_best=$(calc "${eps[ours1]} * ${flops[ours1]} / ($peak_best * 1e9)" .3f)
# The best-vs-best ratio an fp32 trainer would reach if its whole step ran at
# the best sgemm peak: the most any implementation of this model at this
# precision can show here.
ceiling=$(calc "$peak_best * 1e9 / ${flops[ours1]} / ${eps[torch_best1]}" .3f)
kernel=$("$PY" -c 'import json, sys; g = json.load(open(sys.argv[1])).get("gemm", {}); print((g.get("kernel", "?") + ":" + g.get("detail", "")).replace(" ", "_"))' "$OUT/ours_t1_r0.json")
echo
echo "ours/torch at 1 thread: $ratio   at 2 threads: $ratio_2t   (as installed)"
echo "ours/torch_best at 1 thread: $ratio_best   at 2 threads: $ratio_best_2t   (best vs best; ours: $kernel)"
echo "roofline fraction against the best kernel's peak ($peak_best GFLOP/s): $roofline_best"
echo "roofline fraction (ours, 1 thread): $roofline  (${flops[ours1]} FLOP/example, as-installed sgemm peak $gflops GFLOP/s)"
echo "fp32 ceiling of the 1-thread best-vs-best ratio (whole step at the best sgemm peak): $ceiling"
bf16_keys=""
if [[ -n "${eps[ours_bf161]:-}" ]]; then
  ratio_bf16=$(calc "${eps[ours_bf161]} / ${eps[torch_bf161]}" .3f)
  ratio_bf16_2t=$(calc "${eps[ours_bf162]} / ${eps[torch_bf162]}" .3f)
  speedup=$(calc "${eps[ours_bf161]} / ${eps[ours1]}" .3f)
  roofline_bf16=$(calc "${eps[ours_bf161]} * ${flops[ours1]} / ($peak_best * 1e9)" .3f)
  echo "bf16 GEMMs: ours/torch at 1 thread: $ratio_bf16   at 2 threads: $ratio_bf16_2t"
  echo "ours bf16 over ours fp32 (1 thread): $speedup; its fraction of the fp32 sgemm peak: $roofline_bf16"
  bf16_keys="ours_bf16_eps=$(calc "${eps[ours_bf161]}" .1f) torch_bf16_eps=$(calc "${eps[torch_bf161]}" .1f)"
  bf16_keys+=" ratio_bf16=$ratio_bf16 ratio_bf16_2t=$ratio_bf16_2t ours_bf16_speedup=$speedup"
  bf16_keys+=" roofline_fraction_bf16=$roofline_bf16"
fi
echo "reports and logs: $OUT"
echo "RESULT name=trainer ours_eps=$(calc "${eps[ours1]}" .1f) torch_eps=$(calc "${eps[torch1]}" .1f)" \
  "ratio=$ratio roofline_fraction=$roofline ratio_ceiling=$ceiling ours_eps_2t=$(calc "${eps[ours2]}" .1f)" \
  "torch_eps_2t=$(calc "${eps[torch2]}" .1f) ratio_2t=$ratio_2t kernel=$kernel cpu=${cpu:-unknown}" \
  "peak_best_gflops=$peak_best torch_best_eps=$(calc "${eps[torch_best1]}" .1f) ratio_best=$ratio_best" \
  "ratio_best_2t=$ratio_best_2t roofline_fraction_best=$roofline_best${bf16_keys:+ $bf16_keys}"
