# Shared helpers for the bench/*.sh scripts; source it, do not run it.
# Needs ROOT (the repository root) set by the caller. JSON reading and
# arithmetic go through Python (no jq needed).
# shellcheck shell=bash disable=SC2034  # variables used by the scripts sourcing this file

: "${ROOT:?ROOT must be set before sourcing bench/lib.sh}"

# The interpreter with Debian's python3-torch (not a pyenv python3 on PATH).
PY="${TORCH_PYTHON:-/usr/bin/python3}"
SHADOWSYNC="${SHADOWSYNC_BIN:-$ROOT/build/release/bin/shadowsync}"
TORCH_PEER="$ROOT/bench/peers/torch_dlrm.py"
# Cache for generated data (git-ignored).
BENCH_TMP="$ROOT/bench/results/tmp"

die() {
  echo "$(basename "$0"): $*" >&2
  exit 1
}

note() { echo "# $*" >&2; }

# usage: prints the calling script's header comment (its help text). A script
# whose header holds more than its help defines its own after sourcing this.
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }

# exit_if_help ARG...: prints the usage and exits when the first ARG asks for help.
exit_if_help() {
  if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
    usage
    exit 0
  fi
}

# parse_flags FLAG... -- ARG...: each "--flag VALUE" among ARGs sets the
# variable named after the flag in upper case with '-' as '_' (--batch-size
# sets BATCH_SIZE); -h/--help prints the usage. Any other ARG is an error.
parse_flags() {
  local -A known=()
  while [[ "$1" != -- ]]; do
    known["$1"]=1
    shift
  done
  shift
  local var
  while [[ $# -gt 0 ]]; do
    exit_if_help "$1"
    if [[ -z "${known[$1]:-}" ]]; then
      usage >&2
      die "unknown argument: $1"
    fi
    [[ $# -ge 2 ]] || die "$1 needs a value"
    var="${1#--}"
    var="${var^^}"
    printf -v "${var//-/_}" '%s' "$2"
    shift 2
  done
}

need_file() {  # need_file PATH WHAT
  [[ -f "$1" ]] || die "$2 not found: $1"
}

need_shadowsync() {
  [[ -x "$SHADOWSYNC" ]] || die "$SHADOWSYNC not built; run bench/run.sh $(basename "$0" .sh) (or set SHADOWSYNC_BIN)"
}

need_torch() {
  "$PY" -c 'import torch, numpy' 2>/dev/null ||
    die "$PY cannot import torch and numpy; run scripts/install-deps.sh --bench"
}

# json_get FILE KEY: prints the value (numbers as given, null/missing as nan).
json_get() {
  "$PY" - "$1" "$2" <<'EOF'
import json, sys
with open(sys.argv[1]) as f:
    v = json.load(f).get(sys.argv[2])
print("nan" if v is None else v)
EOF
}

# json_from_output TEXT KEY: the KEY of the last JSON object line in TEXT
# (for commands printing JSON on stdout, possibly after other lines).
json_from_output() {
  printf '%s\n' "$1" | "$PY" -c '
import json, sys
v = None
for line in reversed(sys.stdin.read().splitlines()):
    line = line.strip()
    if line.startswith("{"):
        try:
            v = json.loads(line).get(sys.argv[1])
            break
        except ValueError:
            pass
print("nan" if v is None else v)
' "$2"
}

# calc EXPR [FMT]: evaluates a Python arithmetic expression (nan-safe: any
# error, e.g. nan input or division by zero, prints nan); FMT defaults to .4g.
calc() {
  "$PY" - "$1" "${2:-.4g}" <<'EOF'
import math, sys
nan = float("nan")
try:
    v = float(eval(sys.argv[1], {"__builtins__": {}}, {"nan": nan, "inf": math.inf, "max": max, "min": min}))
except (ZeroDivisionError, ValueError, TypeError, OverflowError, NameError, SyntaxError):
    v = nan
print("nan" if math.isnan(v) else format(v, sys.argv[2]))
EOF
}

# count_lines FILE: lines, counting a last line without '\n'.
count_lines() { awk 'END { print NR }' "$1"; }

# Whether the CPU has AVX512-BF16: what `--dense-precision auto` resolves to bf16 on.
cpu_has_bf16() { grep -qw avx512_bf16 /proc/cpuinfo; }

# split_file IN TRAIN_FRACTION TRAIN_OUT EVAL_OUT: the first floor(n*F) lines
# to TRAIN_OUT, the rest to EVAL_OUT (as the peer's --train-fraction does).
split_file() {
  local n keep
  n=$(count_lines "$1")
  keep=$("$PY" -c "import sys; print(int(int(sys.argv[1]) * float(sys.argv[2])))" "$n" "$2")
  head -n "$keep" "$1" >"$3"
  tail -n "+$((keep + 1))" "$1" >"$4"
  echo "$keep $((n - keep))"
}

# sync_data: the synthetic training file of the sync benchmarks (400k
# examples, seed 7), generated once into $BENCH_TMP/sync; prints its path.
sync_data() {
  local dir="$BENCH_TMP/sync" data
  data="$dir/train.tsv"
  mkdir -p "$dir"
  if [[ ! -s "$data" ]]; then
    note "generating synthetic data into $data"
    "$SHADOWSYNC" gen-data --out "$data.tmp" --examples 400000 --seed 7 >&2
    mv "$data.tmp" "$data"
    mv "$data.tmp.teacher.json" "$data.teacher.json" 2>/dev/null || true
  fi
  echo "$data"
}

# run_sync_script SCRIPT WORKDIR ARG...: runs bench/SCRIPT (a sync benchmark
# driver) on sync_data with its runs in WORKDIR, passing ARGs on; replaces
# this shell.
run_sync_script() {
  need_shadowsync
  local data
  data="$(sync_data)"
  check_load
  exec "$PY" "$ROOT/bench/$1" --bin "$SHADOWSYNC" --data "$data" --workdir "$2" "${@:3}"
}

# Other processes on the machine distort timings; say so.
check_load() {
  local load cores
  load=$(cut -d' ' -f1 /proc/loadavg)
  cores=$(nproc)
  if "$PY" -c "import sys; sys.exit(0 if float(sys.argv[1]) > 0.5 else 1)" "$load"; then
    note "warning: 1-minute load average is $load on $cores cores before starting; timings may be disturbed"
  fi
}

# run_measured FILE CMD...: runs CMD, then writes to FILE how many cores other
# processes kept busy meanwhile (system-wide busy CPU time from /proc/stat minus
# CMD's own, divided by the wall time). Above ~0.1 the timing is disturbed.
# Returns CMD's exit status.
run_measured() {
  local file=$1
  shift
  "$PY" -c '
import os, resource, subprocess, sys, time
def busy():
    v = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return sum(v) - v[3] - v[4]  # all but idle and iowait
b0, w0 = busy(), time.monotonic()
rc = subprocess.call(sys.argv[2:])
b1, w1 = busy(), time.monotonic()
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
other = ((b1 - b0) / os.sysconf("SC_CLK_TCK") - ru.ru_utime - ru.ru_stime) / max(w1 - w0, 1e-9)
with open(sys.argv[1], "w") as f:
    f.write("%.2f\n" % max(other, 0.0))
sys.exit(rc)
' "$file" "$@"
}
