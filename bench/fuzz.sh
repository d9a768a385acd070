#!/usr/bin/env bash
# bench/run.sh fuzz [SECONDS] [TARGET...]: every libFuzzer target for SECONDS
# each (default 300), after replaying its kept regressions (scripts/fuzz.sh).
exec "$(dirname "$0")/../scripts/fuzz.sh" "$@"
