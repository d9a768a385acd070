# The ShadowSync image (docs/container.md): one `shadowsync` binary that holds
# every role (operator, pod: ps / syncer / trainer, run, crd, ...).
#
#   docker build -t shadowsync:0.1.0 .
#
# Both stages use the same Debian 12 point release, so the library sonames the
# build stage links against are the ones the runtime stage installs. The tags
# are pinned to point release 12.11 (not a digest: no authoritative digest for
# it was at hand); bump both together.
# tests/deploy/dockerfile_test.sh checks this file: see docs/container.md.

# ---- build: the toolchain and every -dev package from scripts/install-deps.sh
FROM debian:12.11 AS build

# The ISA our own kernels are compiled for (CMakeLists.txt, SHADOWSYNC_MARCH):
# not `native`, since the image runs on machines other than the build host.
ARG SHADOWSYNC_MARCH=x86-64-v3

WORKDIR /src
# The dependency layer first, so a source change does not reinstall packages.
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN scripts/install-deps.sh && rm -rf /var/lib/apt/lists/*

COPY . .
# Only the shipped binary: no tests (BUILD_TESTING=OFF), no benchmarks.
RUN cmake --preset release -DBUILD_TESTING=OFF "-DSHADOWSYNC_MARCH=${SHADOWSYNC_MARCH}" \
    && scripts/build.sh release --target shadowsync \
    && strip --strip-unneeded build/release/bin/shadowsync

# ---- runtime: debian slim plus exactly the shared libraries the binary loads
FROM debian:12.11-slim

LABEL org.opencontainers.image.title="shadowsync" \
      org.opencontainers.image.description="ShadowSync: DLRM-style CTR training with shadow synchronization; parameter server, syncer, trainer and Kubernetes operator in one binary" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.base.name="docker.io/library/debian:12.11-slim"

# The runtime packages: the Debian package of every library `ldd shadowsync`
# resolves, less those debian:12-slim already has (libc6, libgcc-s1,
# libstdc++6, zlib1g, libbz2-1.0, libzstd1, liblz4-1, liblzma5). RocksDB is linked
# statically (Debian's librocksdb-dev), so only its compression libraries
# appear. tests/deploy/dockerfile_test.sh parses the apt-get install list
# between these markers and checks it against ldd: keep one package a line.
# BEGIN runtime-packages
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        libabsl20220623 \
        libbrotli1 \
        libc-ares2 \
        libcivetweb1 \
        libcpprest2.10 \
        libdnnl2 \
        libgflags2.2 \
        libgfortran5 \
        libgomp1 \
        libgoogle-glog0v6 \
        libgrpc++1.51 \
        libgrpc29 \
        libopenblas0-pthread \
        libprometheus-cpp-core1.0 \
        libprometheus-cpp-pull1.0 \
        libprotobuf32 \
        libquadmath0 \
        libre2-9 \
        libsnappy1v5 \
        libssl3 \
        libunwind8 \
        libyaml-cpp0.7 \
        ocl-icd-libopencl1 \
    && rm -rf /var/lib/apt/lists/*
# END runtime-packages

# uid/gid 65532 as in deploy/operator.yaml and the pods the operator creates.
# The data dir is the operator's default --data-dir (operator/reconcile.h):
# RocksDB for a ps, data and checkpoints for a trainer. Owned by the user so a
# fresh Docker volume mounted there is writable too. --no-log-init: no sparse
# lastlog/faillog entry sized by the high uid. (useradd warns that 65532 is
# above SYS_UID_MAX; the uid is what the manifests require.)
RUN groupadd --system --gid 65532 shadowsync \
    && useradd --system --uid 65532 --gid 65532 --no-create-home --no-log-init \
        --home-dir /nonexistent --shell /usr/sbin/nologin shadowsync \
    && install -d -o 65532 -g 65532 -m 0750 /var/lib/shadowsync

COPY --from=build /src/build/release/bin/shadowsync /usr/local/bin/shadowsync

# Nothing else is written: with a read-only root filesystem mount this volume
# (and, for the operator's pods, /tmp: they get an emptyDir there).
VOLUME ["/var/lib/shadowsync"]
WORKDIR /var/lib/shadowsync
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/shadowsync"]
CMD ["--help"]
