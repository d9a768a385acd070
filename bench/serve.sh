#!/usr/bin/env bash
# Online scoring (issue 27): a real `shadowsync serve` over loopback against
# the same model scored in-process by PyTorch, on the same cores.
#
# 1. Trains DLRM-small (the trainer's default shapes) on the Criteo sample
#    but its last EVAL lines, twice: model-000001 on half the examples, then
#    model-000002 warm-started from it on all of them (two versions to swap).
# 2. build/release/bin/serve_bench sends the held-out lines as `dense` and
#    `sparse` tensors from keep-alive HTTP clients: 1, 8 and 64 clients with 1
#    and 64 examples per request (SECONDS_PER_POINT each); SWAPS hot swaps under 64
#    clients of 64 examples; LOAD_SECONDS of 64 clients with 20% invalid
#    requests, serve's memory checked flat over the second half (the first lets
#    the allocator settle).
# 3. The peer: bench/peers/torch_dlrm.py --inference-seconds, the same shapes
#    and held-out lines in batches of 64, THREADS threads, in one process: the
#    floor of any server built on it. Its weights are its own initialisation
#    (the arithmetic does not depend on them).
#
# 4. Rows on disk: 64 clients x 64 examples once more against serve
#    --cache-bytes CACHE_BYTES (a RAM cache about a quarter of the rows' size),
#    with where the rows came from (serve's shadowsync_serve_rows_total).
#
#   bench/run.sh serve [--threads 2] [--seconds-per-point 10] [--swaps 10] [--load-seconds 120]
#                      [--hash-buckets 100000] [--eval 10000] [--cache-bytes 2097152] [--smoke 1]
#
# --smoke 1: a tiny synthetic model, short phases and no peer (the ctest
# serve_bench_smoke, with SHADOWSYNC_BIN, SERVE_BENCH and SERVE_SMOKE_DIR set),
# to keep this script working.
# The last line is machine-readable:
#   RESULT name=serve qps_c64_b64=.. p99_ms_c64_b64=.. ratio_vs_torch_inprocess=..
#          swap_failed_requests=.. eps_c64_b64=.. torch_eps_b64=.. p99_ms_c8_b1=.. ...
# Targets: ratio_vs_torch_inprocess >= 1.5, p99_ms_c8_b1 < 20, swap_failed_requests = 0,
# load_valid_failed = 0.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

THREADS=2
SECONDS_PER_POINT=10
SWAPS=10
LOAD_SECONDS=120
HASH_BUCKETS=100000
EVAL=10000
CACHE_BYTES=2097152
SMOKE=0
parse_flags --threads --seconds-per-point --swaps --load-seconds --hash-buckets --eval --cache-bytes \
  --smoke -- "$@"
need_shadowsync
SERVE_BENCH="${SERVE_BENCH:-$ROOT/build/release/bin/serve_bench}"
[[ -x "$SERVE_BENCH" ]] || die "$SERVE_BENCH not built; run bench/run.sh serve"

work="$BENCH_TMP/serve"
[[ "$SMOKE" == 1 ]] && work="${SERVE_SMOKE_DIR:-$BENCH_TMP/serve-smoke}"
rm -rf "$work"
mkdir -p "$work/exports"

if [[ "$SMOKE" == 1 ]]; then
  "$SHADOWSYNC" gen-data --out "$work/all.tsv" --examples 4000 --eval-examples 500 --seed 3 >/dev/null
  train="$work/all.tsv"
  requests="$work/all.eval.tsv"
  model_flags=(--bottom-mlp 32,16 --top-mlp 32 --embedding-dim 8 --hash-buckets 5000)
  half=2000
  # p50 bound: a request must not wait out a delayed ACK (40 ms), as one did
  # when the server wrote head and body apart.
  bench_flags=(--points 1x1,4x8 --seconds 1 --warmup-seconds 0.5 --swaps 2 --swap-point 4x8
    --load-seconds 3 --load-clients 8 --max-rss-growth 0.5 --max-p50-ms 20)
else
  SAMPLE="$ROOT/../shared/data/criteo/criteo_sample.tsv"
  need_file "$SAMPLE" "the Criteo sample"
  need_torch
  total=$(count_lines "$SAMPLE")
  train="$work/train.tsv"
  requests="$work/requests.tsv"
  head -n "$((total - EVAL))" "$SAMPLE" >"$train"
  tail -n "$EVAL" "$SAMPLE" >"$requests"
  model_flags=(--hash-buckets "$HASH_BUCKETS")
  half=$(((total - EVAL) / 2))
  bench_flags=(--seconds "$SECONDS_PER_POINT" --swaps "$SWAPS" --load-seconds "$LOAD_SECONDS")
fi

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1 | tr -s ' ' '_')
echo "serve benchmark: $(nproc) cores, ${cpu:-unknown}, kernel $(uname -r); serve --threads $THREADS"
note "training model-000001 ($half examples) and model-000002 (warm-started, all)"
"$SHADOWSYNC" train --data "$train" "${model_flags[@]}" --threads 2 --max-examples "$half" \
  --save-model "$work/exports/model-000001" >"$work/train1.log" 2>&1 || die "training failed: $work/train1.log"
"$SHADOWSYNC" train --data "$train" "${model_flags[@]}" --threads 2 \
  --init-model "$work/exports/model-000001" --save-model "$work/exports/model-000002" \
  >"$work/train2.log" 2>&1 || die "training failed: $work/train2.log"

[[ "$SMOKE" == 1 ]] || check_load
bench_out="$work/serve_bench.txt"
set +e
"$SERVE_BENCH" --shadowsync "$SHADOWSYNC" --exports "$work/exports" --data "$requests" \
  --work-dir "$work" --threads "$THREADS" "${bench_flags[@]}" 2>"$work/serve_bench.log" |
  tee "$bench_out"
bench_rc=${PIPESTATUS[0]}
set -e
result=$(grep '^RESULT name=serve_http' "$bench_out" | tail -n 1)
[[ -n "$result" ]] || die "serve_bench printed no RESULT (exit $bench_rc): $(tail -n 5 "$work/serve_bench.log")"
field() { printf '%s\n' "$result" | tr ' ' '\n' | sed -n "s/^$1=//p"; }

if [[ "$SMOKE" == 1 ]]; then
  echo "RESULT name=serve smoke=1 swap_failed_requests=$(field swap_failed_requests)" \
    "load_valid_failed=$(field load_valid_failed) checks=$(field checks)"
  exit "$bench_rc"
fi

note "peer: torch in-process, batches of 64, $THREADS threads"
"$PY" "$TORCH_PEER" --data "$requests" --batch-size 64 --threads "$THREADS" \
  --hash-buckets "$HASH_BUCKETS" --inference-seconds "$SECONDS_PER_POINT" --quiet \
  --report-json "$work/torch.json" | tee "$work/torch.txt"
torch_eps=$(json_get "$work/torch.json" examples_per_second)

note "rows on disk: serve --cache-bytes $CACHE_BYTES, 64 clients x 64 examples"
cache_out="$work/serve_bench_cache.txt"
"$SERVE_BENCH" --shadowsync "$SHADOWSYNC" --exports "$work/exports" --data "$requests" \
  --work-dir "$work/cache" --threads "$THREADS" --points 64x64 --seconds "$SECONDS_PER_POINT" \
  --swaps 0 --load-seconds 0 --serve-arg="--cache-bytes=$CACHE_BYTES" \
  --serve-arg="--cache-dir=$work/cache" 2>"$work/serve_bench_cache.log" | tee "$cache_out" ||
  bench_rc=1
cache_result=$(grep '^RESULT name=serve_http' "$cache_out" | tail -n 1)
cache_field() { printf '%s\n' "$cache_result" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
cache_eps=$(cache_field eps_c64_b64)
rows_cache=$(cache_field rows_cache)
rows_disk=$(cache_field rows_disk)
hit_ratio=$(calc "$rows_cache / ($rows_cache + $rows_disk)" .3f)
eps=$(field eps_c64_b64)
ratio=$(calc "$eps / $torch_eps" .3f)
echo "ours: $eps examples/s at 64 clients x 64 examples over HTTP; torch in-process: $torch_eps" \
  "examples/s in batches of 64; ratio $ratio (target >= 1.5)"
echo "RESULT name=serve qps_c64_b64=$(field qps_c64_b64) p99_ms_c64_b64=$(field p99_ms_c64_b64)" \
  "ratio_vs_torch_inprocess=$ratio swap_failed_requests=$(field swap_failed_requests)" \
  "eps_c64_b64=$eps torch_eps_b64=$(calc "$torch_eps" .1f)" \
  "p99_ms_c8_b1=$(field p99_ms_c8_b1) qps_c1_b1=$(field qps_c1_b1) p50_ms_c1_b1=$(field p50_ms_c1_b1)" \
  "load_valid_failed=$(field load_valid_failed) load_invalid_not_refused=$(field load_invalid_not_refused)" \
  "load_rss_growth=$(field load_rss_growth) load_rss_second_half_growth=$(field load_rss_second_half_growth)" \
  "eps_c64_b64_cache=$cache_eps" \
  "cache_bytes=$CACHE_BYTES cache_hit_ratio=$hit_ratio threads=$THREADS checks=$(field checks)" \
  "cpu=${cpu:-unknown}"
exit "$bench_rc"
