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

echo "== tests (scripts/test.sh)"
exec scripts/test.sh
