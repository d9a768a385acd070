#!/usr/bin/env bash
# Runs inside the fresh Debian 12 root of .ci/run: the README's two commands,
# the quickstart at a small size (same job, a tenth of the data), then the tests.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== quickstart on a fresh Debian 12 root (small)"
job="$(mktemp -d)/quickstart-small.yaml"
sed -e 's/^\(      examples:\) 200000$/\1 20000/' -e 's/^\(      evalExamples:\) 20000$/\1 4000/' \
  deploy/examples/quickstart.yaml >"$job"
grep -q '^      examples: 20000$' "$job" || {
  echo "fresh-machine: could not shrink deploy/examples/quickstart.yaml's examples" >&2
  exit 1
}
scripts/quickstart.sh "$job"

echo "== the quickstart's export scores as its report says"
run=runs/quickstart
build/release/bin/shadowsync eval --model "$run/exports/$(cat "$run/exports/LATEST")" \
  --data "$run/data/eval.tsv" >"$run/export-eval.json"
for key in eval_ne eval_auc; do
  awk -v key="\"$key\":" '$1 == key { sub(",", "", $2); print $2 }' "$run/report.json" | head -n1 >"$run/a"
  awk -v key="\"$key\":" '$1 == key { sub(",", "", $2); print $2 }' "$run/export-eval.json" >"$run/b"
  paste "$run/a" "$run/b" | awk -v key="$key" '{ d = $1 - $2; if (d < 0) d = -d;
    printf "%s: report %s, eval --model %s\n", key, $1, $2; exit !($1 != "" && d < 1e-6) }' || {
    echo "fresh-machine: the export's $key differs from the report's" >&2
    exit 1
  }
done

echo "== tests (scripts/test.sh)"
exec scripts/test.sh
