#!/usr/bin/env bash
# The layers of docs/architecture.md, enforced: which folders each folder's
# code may include, that only the parameter server includes RocksDB, and
# that no library target outside the servers links a server target. Prints
# every crossing (file and include, or CMake file and dependency) and fails
# if there is one.
#
#   tests/layers_test.sh SOURCE_DIR
set -euo pipefail
cd "${1:?usage: layers_test.sh SOURCE_DIR}"

# The project's own include roots; anything else is a third-party header.
project='^(common|model|data|jobspec|ps|syncer|worker|exporter|serving|operator|cli|bench|tests|shadowsync)/'
crossings=0

# allow FOLDER ALLOWED [EXCLUDED_SUBFOLDER]: FOLDER's files include project
# headers only under the roots matched by the regex ALLOWED.
allow() {
  local folder="$1" allowed="$2" excluded="${3:-}"
  local file include
  while IFS=: read -r file include; do
    [[ -n "$excluded" && "$file" == "$excluded"/* ]] && continue
    include="${include#\#include \"}"
    include="${include%\"}"
    [[ "$include" =~ $project ]] || continue
    if ! [[ "$include" =~ ^($allowed)/ ]]; then
      echo "$file includes $include: $folder/ may include only ${allowed//|/, }"
      crossings=$((crossings + 1))
    fi
  done < <(grep -rHo '^#include "[^"]*"' --include='*.h' --include='*.cc' "$folder")
}

# The shared core, then the domain libraries over it: the model, the data
# readers and generator, the job spec.
allow common 'common|shadowsync'
allow model 'common|model'
allow data 'common|data'
allow jobspec 'common|jobspec'
# The contracts' clients: the core, the model's embedding-store interface
# (which the PS client implements) and the generated protos.
allow ps/client 'common|model|shadowsync|ps/client'
allow syncer/client 'common|shadowsync|syncer/client'
# The servers: their own folder (with its client: the contract's codecs),
# never another server.
allow ps 'common|model|shadowsync|ps' ps/client
allow syncer 'common|shadowsync|syncer' syncer/client
# Clients of the servers, never the servers.
allow worker 'common|model|data|jobspec|shadowsync|worker|ps/client|syncer/client'
allow exporter 'common|model|data|jobspec|shadowsync|exporter|worker|ps/client|syncer/client'
allow operator 'common|jobspec|shadowsync|operator|ps/client'
# Online serving reads the export format alone: no server, no client of one.
allow serving 'common|model|data|serving'

# RocksDB is the parameter server's, and serve's on-disk row store's
# (serving/disk_rows.*, `serve --cache-bytes`): storage, not a server.
while IFS= read -r line; do
  echo "${line%%:*} includes RocksDB: only ps/ (not ps/client/) and serving/disk_rows.* may"
  crossings=$((crossings + 1))
done < <(grep -rHl '^#include "rocksdb/' --include='*.h' --include='*.cc' \
  common model data jobspec syncer worker exporter serving operator cli ps/client |
  grep -vE '^serving/disk_rows\.(h|cc)$' || true)

# Library targets outside the servers link no server target and no RocksDB
# (cli/ links them: it is the binary that runs every process), but serving
# may link RocksDB for its on-disk row store.
while IFS= read -r line; do
  echo "$line: links a server or RocksDB"
  crossings=$((crossings + 1))
done < <({
  grep -HnE 'shadowsync::(ps|syncer)([^_[:alnum:]]|$)|RocksDB::' \
  common/CMakeLists.txt model/CMakeLists.txt data/CMakeLists.txt jobspec/CMakeLists.txt \
  ps/client/CMakeLists.txt syncer/client/CMakeLists.txt \
  worker/CMakeLists.txt exporter/CMakeLists.txt operator/CMakeLists.txt operator/*.cmake
  grep -HnE 'shadowsync::(ps|syncer)([^_[:alnum:]]|$)' serving/CMakeLists.txt
} || true)

if ((crossings > 0)); then
  echo "FAIL: $crossings layer crossings (docs/architecture.md)"
  exit 1
fi
echo "OK: every include and library dependency stays in its layer"
