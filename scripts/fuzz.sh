#!/usr/bin/env bash
# Builds the libFuzzer targets (the `asan` configure preset: clang-14 with ASan
# and UBSan; the `fuzz` build preset) and runs each one: first over its kept crash regressions
# (tests/fuzz/regressions/<target>/, must all pass), then fuzzing from its seed
# corpus (tests/fuzz/corpus/<target>/) for SECONDS.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]   default: 300 s each, every target
#
# CI runs it with 30 s (scripts/test.sh); bench/run.sh fuzz with the default.
# New corpus entries go to build/asan/corpus/<target> (not the committed seeds);
# a crash leaves its input in build/asan/artifacts/<target>/ and fails the run:
# fix it, then copy the input into tests/fuzz/regressions/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-300}
shift || true
[[ "$seconds" =~ ^[0-9]+$ ]] || { echo "fuzz.sh: SECONDS must be a whole number, got '$seconds'" >&2; exit 2; }

cmake --preset asan >/dev/null
cmake --build --preset fuzz -j"$(nproc)"

targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
  targets=($(sed -n 's/^shadowsync_fuzz_target(\([a-z_]*\) .*/\1/p' tests/fuzz/CMakeLists.txt))
fi

work=build/asan
total_execs=0
failed=()
for t in "${targets[@]}"; do
  bin=$work/bin/$t
  [[ -x "$bin" ]] || { echo "fuzz.sh: no target '$t' ($bin)" >&2; exit 2; }
  corpus=$work/corpus/$t
  artifacts=$work/artifacts/$t
  mkdir -p "$corpus" "$artifacts"
  regressions=tests/fuzz/regressions/$t
  if compgen -G "$regressions/*" >/dev/null; then
    echo "== $t: replaying $(ls "$regressions" | wc -l) regression inputs"
    if ! "$bin" -runs=1 "$regressions"/* >"$artifacts/replay.log" 2>&1; then
      tail -n 40 "$artifacts/replay.log"
      failed+=("$t (regression)")
      continue
    fi
  fi
  seeds=("tests/fuzz/corpus/$t")
  [[ "$t" == fuzz_job_spec ]] && seeds+=(deploy/examples deploy/examples/sync)
  echo "== $t: fuzzing for ${seconds}s"
  log=$artifacts/fuzz.log
  if "$bin" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=4096 -max_len=16384 \
      -print_final_stats=1 -artifact_prefix="$artifacts/" "$corpus" "${seeds[@]}" >"$log" 2>&1; then
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
    cov=$(grep -ao 'cov: [0-9]*' "$log" | tail -n1 | cut -d' ' -f2)
    echo "   ${execs:-0} inputs, coverage ${cov:-?} edges, corpus $(ls "$corpus" | wc -l) files"
    total_execs=$((total_execs + ${execs:-0}))
  else
    tail -n 60 "$log"
    echo "fuzz.sh: $t found a failure; its input is in $artifacts/" >&2
    failed+=("$t")
  fi
done

echo "RESULT name=fuzz targets=${#targets[@]} seconds_each=$seconds execs=$total_execs failures=${#failed[@]}"
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzz.sh: failed: ${failed[*]}" >&2
  exit 1
fi
