#!/usr/bin/env bash
# Chaos on a local job (issue 9): the job (2 trainers, 2 parameter servers,
# 1 syncer, shadow-easgd, synthetic data) runs once undisturbed, then again
# while each of ROUNDS rounds SIGKILLs a random process of it, SIGSTOPs one
# for longer than the RPC deadlines, or drops its loopback traffic (iptables,
# when usable). It must finish with every embedding key stored exactly once
# (on the server owning its slot, the same key set as the undisturbed run)
# and eval NE within 1% of the undisturbed run (bench/chaos.py).
#
#   bench/run.sh chaos [--rounds 10] [--interval 6] [--examples 600000] [--seed 1]
#
# Last line: RESULT name=chaos rounds=.. faults=.. completed=.. keys_lost=.. ne_gap=..
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
need_shadowsync
need_file "$ROOT/build/release/bin/chaos_check" "chaos_check"
exec "$PY" "$ROOT/bench/chaos.py" --bin "$SHADOWSYNC" --check "$ROOT/build/release/bin/chaos_check" \
  --workdir "$BENCH_TMP/chaos" "$@"
