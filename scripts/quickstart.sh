#!/usr/bin/env bash
# The one command that sets up and runs the main job on an embedded default:
# installs dependencies, builds the release preset, generates synthetic
# Criteo-layout data from a planted teacher, trains DLRM-small with Hogwild
# threads in this process, and prints the report (NE against the teacher's floor).
#
#   scripts/quickstart.sh [examples]     default 300000
set -euo pipefail
cd "$(dirname "$0")/.."
examples="${1:-300000}"
eval_examples=$((examples / 10))

scripts/install-deps.sh
scripts/build.sh release --target shadowsync

bin=build/release/bin/shadowsync
run=runs/quickstart
mkdir -p "$run"
"$bin" gen-data --out "$run/all.tsv" --examples $((examples + eval_examples)) --seed 1
head -n "$examples" "$run/all.tsv" > "$run/train.tsv"
tail -n "$eval_examples" "$run/all.tsv" > "$run/eval.tsv"

"$bin" train --data "$run/train.tsv" --eval-data "$run/eval.tsv" --threads "$(nproc)" \
  --report-json "$run/report.json" --save-model "$run/model.bin"
echo
echo "teacher (best achievable): $(cat "$run/all.tsv.teacher.json" | tr -d '\n' | sed 's/  */ /g' | cut -c1-200)"
echo "report: $run/report.json   model: $run/model.bin"
