#!/usr/bin/env bash
# Parameter-server throughput: `shadowsync ps` against Redis (Debian's
# redis-server, persistence off, pipelined MGET/MSET through hiredis) on the
# same precomputed stream of training steps: Lookup then PushGradients of
# 26 tables x 256 ids, Zipf(1.1) over 10M ids, dim-16 Adagrad rows, one server
# on loopback, 1 and 2 client threads. Both servers are child processes of
# build/release/bin/ps_bench, which also runs the cache-off (RocksDB only)
# figure, the hit ratio against cache size, and a 10M-row load with resident
# memory and restart times. bench/peers/README.md describes the Redis peer.
#
# Memory: Redis holds every row in RAM, so the main runs give our server a RAM
# cache that holds the stream's working set as well (576 MiB: 2.96 M rows x
# 185 B = 521 MiB, plus 10%), for a comparison at comparable resident memory;
# both RSS figures are printed ("working set: ... RSS"). The cache-off runs and
# the hit ratio against cache size (16, 64, 256 MiB) show the other sizes; the
# 10M-row load keeps the server's default 256 MiB (--load-cache-mib).
#
#   bench/ps.sh [--seconds 10] [--repeats 3] [--batches 2048] [--load-rows 10000000]
#               [--quick] [ps_bench flags...]
#
# Environment: PS_SECONDS, PS_REPEATS, PS_BATCHES, PS_LOAD_ROWS set the same
# defaults. --quick = --seconds 2 --repeats 1 --batches 256 --load-rows 1000000
# (a smoke run; its figures are not the reported ones). Other flags go to
# ps_bench as they are (build/release/bin/ps_bench --help lists them).
#
# Timed runs of ours and Redis are interleaved, the order alternating per
# repeat; the median of the repeats counts. The last line is machine-readable:
#   RESULT name=ps ours_rows_per_s=.. redis_rows_per_s=.. ratio=.. hit_ratio=.. [key=value ...]
# rows/s = (unique rows looked up + unique rows pushed) per second at 1 client
# thread; ratio = ours/redis; hit_ratio = our RAM cache's hits / probes during
# the 1-thread runs.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

PS_BENCH="${PS_BENCH_BIN:-$ROOT/build/release/bin/ps_bench}"
REDIS_SERVER="${REDIS_SERVER:-$(command -v redis-server || echo /usr/bin/redis-server)}"
SECONDS_PER_RUN="${PS_SECONDS:-10}"
REPEATS="${PS_REPEATS:-3}"
BATCHES="${PS_BATCHES:-2048}"
LOAD_ROWS="${PS_LOAD_ROWS:-10000000}"

usage() { sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; }
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seconds) SECONDS_PER_RUN="$2"; shift 2 ;;
    --repeats) REPEATS="$2"; shift 2 ;;
    --batches) BATCHES="$2"; shift 2 ;;
    --load-rows) LOAD_ROWS="$2"; shift 2 ;;
    --quick) SECONDS_PER_RUN=2; REPEATS=1; BATCHES=256; LOAD_ROWS=1000000; shift ;;
    -h | --help) usage; exit 0 ;;
    *) extra+=("$1"); shift ;;
  esac
done

need_shadowsync
[[ -x "$PS_BENCH" ]] ||
  die "$PS_BENCH not built (it needs libhiredis-dev: scripts/install-deps.sh --bench, then bench/run.sh ps)"
[[ -x "$REDIS_SERVER" ]] || die "redis-server not found; run scripts/install-deps.sh --bench"

OUT="$BENCH_TMP/ps"
mkdir -p "$OUT"
echo "redis: $("$REDIS_SERVER" --version)"
check_load

exec "$PS_BENCH" --work-dir "$OUT" --shadowsync "$SHADOWSYNC" --redis-server "$REDIS_SERVER" \
  --seconds "$SECONDS_PER_RUN" --repeats "$REPEATS" --batches "$BATCHES" --load-rows "$LOAD_ROWS" \
  "${extra[@]}"
