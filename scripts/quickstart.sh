#!/usr/bin/env bash
# The first thing to run on a fresh Debian 12 machine: installs dependencies,
# builds the release preset and runs deploy/examples/quickstart.yaml as local
# processes (`shadowsync run`): synthetic Criteo-layout data from a planted
# teacher, 2 embedding parameter servers, 1 syncer and 2 trainers with
# background (shadow) EASGD. Ends with the report; the run directory holds
# report.json, report.svg, every process's log, and the trained model's export
# in exports/model-000001 (docs/export.md).
#
#   scripts/quickstart.sh [job.yaml]     default deploy/examples/quickstart.yaml
set -euo pipefail
cd "$(dirname "$0")/.."
job="${1:-deploy/examples/quickstart.yaml}"

scripts/install-deps.sh
scripts/build.sh release --target shadowsync

build/release/bin/shadowsync run "$job"
