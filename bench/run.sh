#!/usr/bin/env bash
# Runs one benchmark after installing dependencies and building the release
# preset; its output also goes to bench/results/NAME.txt.
#
#   bench/run.sh                 lists the benchmarks
#   bench/run.sh NAME [ARGS...]  runs bench/NAME.sh ARGS, or the C++ benchmark
#                                build/release/bin/NAME_bench ARGS
#
# C++ benchmarks without ARGS get the Criteo sample
# (../shared/data/criteo/criteo_sample.tsv) as their input file.
# SHADOWSYNC_SKIP_BUILD=1 skips dependency installation and the build.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BIN="$ROOT/build/release/bin"
SAMPLE="$ROOT/../shared/data/criteo/criteo_sample.tsv"

# Script benchmarks: bench/*.sh except the runner and the helpers.
script_benches() {
  local f name
  for f in "$ROOT"/bench/*.sh; do
    name=$(basename "$f" .sh)
    [[ "$name" == run || "$name" == lib ]] || echo "$name"
  done
}

# C++ benchmarks: NAME_bench targets declared in bench/CMakeLists.txt, and any built ones.
cc_benches() {
  {
    grep -o 'NAME [A-Za-z0-9_]*_bench' "$ROOT/bench/CMakeLists.txt" 2>/dev/null | sed 's/^NAME //; s/_bench$//' || true
    for f in "$BIN"/*_bench; do
      [[ -x "$f" ]] && basename "$f" _bench
    done
  } | sort -u
}

list() {
  echo "usage: bench/run.sh NAME [ARGS...]"
  echo "script benchmarks (bench/NAME.sh):"
  script_benches | sed 's/^/  /'
  echo "C++ benchmarks (build/release/bin/NAME_bench):"
  cc_benches | sed 's/^/  /'
}

if [[ $# -eq 0 || "$1" == -h || "$1" == --help ]]; then
  list
  exit 0
fi
name="$1"
shift
[[ "$name" =~ ^[A-Za-z0-9_-]+$ ]] || { list >&2; echo "bench/run.sh: bad benchmark name '$name'" >&2; exit 2; }

if [[ "${SHADOWSYNC_SKIP_BUILD:-0}" != 1 ]]; then
  "$ROOT/scripts/install-deps.sh" --bench
  cmake --preset release
  cmake --build --preset release
fi

if [[ -f "$ROOT/bench/$name.sh" ]]; then
  cmd=(bash "$ROOT/bench/$name.sh" "$@")
elif [[ -x "$BIN/${name}_bench" ]]; then
  if [[ $# -eq 0 ]]; then
    [[ -f "$SAMPLE" ]] || { echo "bench/run.sh: input file not found: $SAMPLE" >&2; exit 1; }
    set -- "$SAMPLE"
  fi
  cmd=("$BIN/${name}_bench" "$@")
else
  list >&2
  echo "bench/run.sh: no benchmark named '$name' (no bench/$name.sh, no $BIN/${name}_bench)" >&2
  exit 2
fi

mkdir -p "$ROOT/bench/results"
out="$ROOT/bench/results/$name.txt"
{
  echo "# bench/run.sh $name $*"
  echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo no-commit)$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo '+dirty') on $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$out"
"${cmd[@]}" 2>&1 | tee -a "$out"
echo "# output saved to bench/results/$name.txt" >&2
