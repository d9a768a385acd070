#!/usr/bin/env bash
# The one command that sets up and runs every test, exiting non-zero on any
# failure: installs dependencies, checks formatting, builds the release
# preset and runs its tests, runs the concurrency suites again under
# ThreadSanitizer (the `tsan` preset) and the parsing, storage and RPC suites
# under ASan + UBSan (the `asan` preset), checks the lock annotations with
# clang's thread-safety analysis (scripts/thread-safety.sh), then fuzzes each
# libFuzzer target for 20 s (scripts/fuzz.sh, in the asan build).
#
#   scripts/test.sh              everything CI runs
#   SHADOWSYNC_SKIP_SANITIZERS=1 SHADOWSYNC_SKIP_FUZZ=1 scripts/test.sh
#                                release suites only (quick local loop)
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
scripts/install-kube-tools.sh
scripts/install-node-tools.sh

echo "== format check (clang-format, .clang-format)"
mapfile -t sources < <(git ls-files '*.cc' '*.h' 2>/dev/null || find . -name '*.cc' -o -name '*.h' -not -path './build/*')
if ! clang-format --dry-run --Werror "${sources[@]}"; then
  echo "format check failed: run clang-format -i on the files above" >&2
  exit 1
fi

echo "== release build and tests"
scripts/build.sh release
ctest --preset release

if [[ "${SHADOWSYNC_SKIP_SANITIZERS:-0}" != "1" ]]; then
  # ThreadSanitizer over the suites whose threads share memory on purpose:
  # Hogwild training, the gate to a lone training thread's replica, the
  # in-process embedding store, the parallel reader, our mutex, the
  # parameter server's row store (lookups, pushes and its checkpoint
  # thread), the syncer's rounds and SSP clocks, and the sync strategies
  # (shadow threads beside Hogwild threads, barriers, ps-plus's asynchronous
  # pulls and pushes, sync-switch's exchanger thread), and the model export's
  # and warm start's client (a read-ahead thread per server, sender threads
  # per server), and the parameter server's service with its client and the
  # resharder (callback reactors, executors, export streams, live reshards
  # while clients push), and the operator's informers, leader elector and work
  # queue (watch threads, renewals, workers; tests/tsan_suppressions.txt says
  # what is suppressed in the uninstrumented cpprestsdk). The controller's
  # suite stays out: its clients to unreachable servers draw reports from
  # inside Debian's uninstrumented libgrpc. Only their targets
  # are built, which keeps the tsan stage to a few minutes on 2 cores.
  echo "== tsan build and concurrency tests"
  tsan_targets=(mutex_test embedding_table_test criteo_reader_test trainer_test replica_gate_test
    background_call_test row_store_test syncer_test sync_strategy_test ssp_clock_test
    staleness_strategies_test ds_sync_test sync_switch_test job_export_test ps_service_test
    informer_test leader_election_test work_queue_test serving_test)
  scripts/build.sh tsan --target "${tsan_targets[@]}"
  ctest --preset tsan -R '^(MutexTest|EmbeddingStoreTest|OptimizerTest|CriteoReader|ParseCriteoLine|TrainerTest|ReplicaGateTest|BackgroundCallTest|RowStoreTest|SyncerTest|SyncerClientTest|AllReduceRoundsTest|SyncMathTest|SyncStrategyTest|MakeSyncStrategyTest|SspClocksTest|ClockRpcTest|StalenessStrategiesTest|DsSyncStrategyTest|SyncSwitchTest|JobExportTest|PsService[A-Za-z]*|InformerTest|LeaderElectionTest|WorkQueueTest|ServingTest|GrpcInferenceTest)\.'

  # ASan + UBSan (clang-14, the `asan` preset) over the suites that parse
  # untrusted input or own memory by hand: the job spec, the Criteo reader,
  # hashing and shard maps, the parameter server's store and service (RocksDB,
  # the redo log, slot streams, the model export's streams), the syncer's
  # service, TLS and tokens, and the operator's Kubernetes client, informers
  # and reconcile. The end-to-end
  # suites (real processes of the release build) stay out: they add minutes
  # and exercise the same code. The same build holds the fuzz targets below.
  echo "== asan build and memory-safety tests"
  asan_targets=(job_spec_test criteo_reader_test hash_test shard_map_test synthetic_test
    eval_metrics_test row_store_test ps_service_test rpc_extremes_test job_export_test syncer_test
    grpc_security_test
    reconcile_test crd_test kube_client_test informer_test work_queue_test leader_election_test
    fake_kube_apiserver_test v2_protocol_test)
  scripts/build.sh asan --target "${asan_targets[@]}"
  # Clang's thread-safety analysis over the product's locking sources, as
  # errors, from the same clang build's compile commands (about 2 minutes).
  echo "== thread-safety analysis (clang -Wthread-safety)"
  scripts/thread-safety.sh build/asan
  ctest --preset asan -R '^(JobSpecTest|CriteoReaderTest|ParseCriteoLineTest|HashTest|ShardMap[A-Za-z]*|SyntheticTest|EvalMetricsTest|RowStoreTest|PsService[A-Za-z]*|RpcExtremesTest|JobExportTest|SyncerTest|SyncerClientTest|SyncerLimitsTest|AllReduceRoundsTest|GrpcSecurity[A-Za-z]*|Reconcile[A-Za-z]*|CrdTest|Deploy[A-Za-z]*Test|JsonToYamlTest|KubeClientTest|ParseWatchLineTest|LineSplitterTest|ResourcePathTest|ObjectKeyTest|QueryEscapeTest|StatusFromHttpTest|RetryOnConflictTest|CancellationTest|InformerTest|WorkQueueTest|RateLimiterTest|LeaderElectionTest|MicroTimeTest|FakeKubeApiServer[A-Za-z]*|V2ProtocolTest)\.'
fi
if [[ "${SHADOWSYNC_SKIP_FUZZ:-0}" != "1" ]]; then
  # Every libFuzzer target for 20 s after replaying its kept crash inputs
  # (bench/run.sh fuzz runs them 5 minutes each): a smoke test that keeps CI
  # under an hour.
  echo "== fuzz targets (20 s each)"
  scripts/fuzz.sh 20
fi
echo "scripts/test.sh: all tests passed"
