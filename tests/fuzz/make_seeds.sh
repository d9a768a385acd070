#!/usr/bin/env bash
# Regenerates the seed corpora of tests/fuzz/corpus/ (committed; run this
# after changing the protos or the examples). Protobuf seeds are encoded from
# text format with protoc; each starts with the byte that picks the RPC
# (see the fuzz target's switch).
set -euo pipefail
cd "$(dirname "$0")"
root=../..
proto_dir=$root/proto
out=corpus

rm -rf "$out"
mkdir -p "$out"/{fuzz_criteo_line,fuzz_job_spec,fuzz_kube_objects,fuzz_ps_service,fuzz_syncer_service}

# Criteo lines: real ones from the shared sample, and near misses.
sample=$root/../shared/data/criteo/criteo_sample.tsv
head -n 3 "$sample" > "$out/fuzz_criteo_line/sample3.tsv"
printf '1\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\n' > "$out/fuzz_criteo_line/empty-fields.tsv"
printf '2\t1\t2\n' > "$out/fuzz_criteo_line/short.tsv"

# Job specs: a minimal one (scripts/fuzz.sh adds every deploy/examples job).
printf 'apiVersion: shadowsync.io/v1alpha1\nkind: ShadowSyncJob\nmetadata: {name: j}\nspec: {}\n' \
  > "$out/fuzz_job_spec/minimal.yaml"

# Kubernetes objects: role byte (0 job, 1 pod, 2 StatefulSet) + a watch line.
job='{"apiVersion":"shadowsync.io/v1alpha1","kind":"ShadowSyncJob","metadata":{"name":"j","namespace":"ns","uid":"u","generation":2},"spec":{"model":{"criteoTables":{"hashBuckets":1000}},"data":{"format":"synthetic","synthetic":{"examples":10000,"evalExamples":100}},"trainer":{"replicas":2},"parameterServer":{"replicas":3,"storage":{"size":"1Gi"}},"syncer":{"replicas":1}},"status":{"phase":"Running"}}'
pod='{"apiVersion":"v1","kind":"Pod","metadata":{"name":"j-trainer-0","namespace":"ns","labels":{"shadowsync.io/job-name":"j","shadowsync.io/role":"trainer"}},"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}],"containerStatuses":[{"name":"trainer","restartCount":1,"state":{"terminated":{"exitCode":0}}}]}}'
sts='{"apiVersion":"apps/v1","kind":"StatefulSet","metadata":{"name":"j-trainer","namespace":"ns","ownerReferences":[{"uid":"u","controller":true}]},"spec":{"replicas":2},"status":{"readyReplicas":2}}'
printf '\x00{"type":"MODIFIED","object":%s}' "$job" > "$out/fuzz_kube_objects/job.bin"
printf '\x01{"type":"ADDED","object":%s}' "$pod" > "$out/fuzz_kube_objects/pod.bin"
printf '\x02{"type":"MODIFIED","object":%s}' "$sts" > "$out/fuzz_kube_objects/statefulset.bin"
printf '\x00{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"12"}}}' > "$out/fuzz_kube_objects/bookmark.bin"

# encode DIR NAME RPC_BYTE PROTO MESSAGE TEXT
encode() {
  local dir=$1 name=$2 byte=$3 proto=$4 message=$5 text=$6
  {
    printf "\\x$(printf %02x "$byte")"
    printf '%s' "$text" | protoc -I "$proto_dir" --encode="shadowsync.v1.$message" "$proto_dir/shadowsync/v1/$proto"
  } > "$out/$dir/$name.bin"
}
ps() { encode fuzz_ps_service "$@"; }
ps lookup 0 ps.proto LookupRequest 'epoch: 1 tables { table: 0 ids: 1 ids: 2 } tables { table: 2 ids: 99 }'
ps push 1 ps.proto PushGradientsRequest 'epoch: 1 tables { table: 1 ids: 7 values: [0.5, -0.5, 1, 2] }'
ps get-map 2 ps.proto GetShardMapRequest ''
ps set-map 3 ps.proto SetShardMapRequest 'map { epoch: 2 num_slots: 4 owner: [0, 0, 0, 0] addresses: "127.0.0.1:1" } self_index: 0'
ps export 4 ps.proto ExportSlotsRequest 'slots: [0, 1, 2]'
ps export-packed 4 ps.proto ExportSlotsRequest 'slots: [0, 1, 2] weights_only: true packed_rows: true'
ps drop 6 ps.proto DropSlotsRequest 'slots: [3]'
ps checkpoint 7 ps.proto CheckpointRequest 'path: "x"'
ps stats 8 ps.proto StatsRequest ''
# Every integer field at its extremes (issue 30): each must be refused with a
# clear error or served, never crash or hang the server.
ps lookup-max 0 ps.proto LookupRequest 'epoch: 18446744073709551615 tables { table: 4294967295 ids: 18446744073709551615 }'
ps lookup-max-id 0 ps.proto LookupRequest 'epoch: 0 tables { table: 0 ids: 18446744073709551615 ids: 0 }'
ps push-max 1 ps.proto PushGradientsRequest 'epoch: 18446744073709551615 tables { table: 4294967295 ids: 18446744073709551615 values: [1, 1, 1, 1] }'
ps push-max-id 1 ps.proto PushGradientsRequest 'tables { table: 0 ids: 18446744073709551615 values: [1, 1, 1, 1] }'
ps set-map-max 3 ps.proto SetShardMapRequest 'map { epoch: 18446744073709551615 num_slots: 4294967295 owner: [4294967295] addresses: "127.0.0.1:1" } self_index: 4294967295'
ps set-map-max-epoch 3 ps.proto SetShardMapRequest 'map { epoch: 18446744073709551615 num_slots: 4 owner: [0, 0, 0, 0] addresses: "127.0.0.1:1" } self_index: 0'
ps export-max 4 ps.proto ExportSlotsRequest 'slots: [4294967295, 0]'
ps drop-max 6 ps.proto DropSlotsRequest 'slots: [4294967295]'
# ImportSlots: [len][SlotChunk]... The chunks are text format.
# import_seed NAME CHUNK_TEXT...
import_seed() {
  local name=$1
  shift
  local encoded
  encoded=$(mktemp)
  {
    printf '\x05'
    for text in "$@"; do
      printf '%s' "$text" |
        protoc -I "$proto_dir" --encode=shadowsync.v1.SlotChunk "$proto_dir/shadowsync/v1/ps.proto" \
          > "$encoded"
      printf "\\x$(printf %02x "$(stat -c %s "$encoded")")"; cat "$encoded"
    done
  } > "$out/fuzz_ps_service/$name.bin"
  rm -f "$encoded"
}
import_seed import 'slot: 5 rows { table: 0 id: 11 values: [1, 2, 3, 4] }' \
  'slot: 5 done: true total_rows: 1'
# At the extremes: a slot, table and id past every bound, and a done marker
# claiming every row.
import_seed import-max \
  'slot: 4294967295 rows { table: 4294967295 id: 18446744073709551615 values: [1, 2, 3, 4] }' \
  'slot: 4294967295 done: true total_rows: 18446744073709551615 checksum: 18446744073709551615'
# The same row packed (a warm start's stream): a record of table 0, id 11 and
# dim 4 + Adagrad state floats in its slot of 64, with its CRC.
mapfile -t packed < <(python3 - <<'PY2'
import struct, zlib
M = (1 << 64) - 1
def mix64(x):
    x = (x + 0x9e3779b97f4a7c15) & M
    x = ((x ^ (x >> 30)) * 0xbf58476d1ce4e5b9) & M
    x = ((x ^ (x >> 27)) * 0x94d049bb133111eb) & M
    return x ^ (x >> 31)
table, id_ = 0, 11
slot = mix64(id_ ^ mix64(0x5ad05eed00000000 + table)) % 64
record = struct.pack("<IQ8f", table, id_, 1, 2, 3, 4, 0, 0, 0, 0)
esc = "".join("\\%03o" % b for b in record)
print(f'slot: {slot} packed_rows: "{esc}" packed_crc32: {zlib.crc32(record)}')
print(f"slot: {slot} done: true total_rows: 1 checksum: {zlib.crc32(record)}")
PY2
)
import_seed import-packed "${packed[@]}"

sy() { encode fuzz_syncer_service "$@"; }
sy init 0 syncer.proto InitCentreRequest 'offset: 0 total: 4 values: [1, 2, 3, 4]'
sy pull 1 syncer.proto PullCentreRequest 'offset: 0 total: 4 length: 4'
sy add 2 syncer.proto AddToCentreRequest 'offset: 2 total: 4 delta: [0.5, 0.5] return_centre: true'
sy allreduce 3 syncer.proto AllReduceRequest 'member: "trainer-0" offset: 0 total: 2 values: [1, 2]'
sy join 4 syncer.proto JoinRequest 'member: "trainer-0"'
sy leave 5 syncer.proto LeaveRequest 'member: "trainer-0"'
sy clock 6 syncer.proto ClockRequest 'member: "trainer-0" clock: 3 staleness: 1 max_wait_seconds: 0.01'
sy stats 7 syncer.proto SyncerStatsRequest ''
sy init-max 0 syncer.proto InitCentreRequest 'offset: 18446744073709551615 total: 18446744073709551615 values: [1]'
sy pull-max 1 syncer.proto PullCentreRequest 'offset: 18446744073709551615 total: 18446744073709551615 length: 18446744073709551615'
sy pull-max-length 1 syncer.proto PullCentreRequest 'offset: 0 total: 4 length: 18446744073709551615'
sy add-max 2 syncer.proto AddToCentreRequest 'offset: 18446744073709551615 total: 18446744073709551615 delta: [1] return_centre: true'
sy allreduce-max 3 syncer.proto AllReduceRequest 'member: "trainer-0" offset: 18446744073709551615 total: 18446744073709551615 values: [1]'
sy clock-max 6 syncer.proto ClockRequest 'member: "trainer-0" clock: 9223372036854775807 staleness: 9223372036854775807 max_wait_seconds: 0.01'
sy clock-min 6 syncer.proto ClockRequest 'member: "trainer-0" clock: -9223372036854775808 staleness: -9223372036854775808 max_wait_seconds: 0.01'
echo "make_seeds: $(find "$out" -type f | wc -l) seeds in tests/fuzz/$out"
