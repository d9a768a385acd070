#!/usr/bin/env bash
# Test-only PKI for the mutual-TLS tests, made fresh at test time (nothing
# secret is committed). Writes into OUT_DIR:
#   ca.crt                         the job CA
#   tls.crt, tls.key               signed by ca.crt, SAN DNS:shadowsync (server + client use)
#   other-ca.crt                   an unrelated CA
#   other.crt, other.key           signed by other-ca.crt, same SAN: must be refused
#   token, wrong-token, admin-token  bearer tokens
# Usage: gen_test_certs.sh OUT_DIR
set -euo pipefail
out=${1:?usage: gen_test_certs.sh OUT_DIR}
mkdir -p "$out"
cd "$out"
ext=$(mktemp)
trap 'rm -f "$ext"' EXIT
printf '%s\n' 'basicConstraints=critical,CA:FALSE' 'keyUsage=critical,digitalSignature' \
  'extendedKeyUsage=serverAuth,clientAuth' 'subjectAltName=DNS:shadowsync' > "$ext"

ca() {  # ca NAME
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj "/CN=$1" -keyout "$1.key" -out "$1.crt" 2>/dev/null
}
leaf() {  # leaf CA NAME
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -subj "/CN=shadowsync" -keyout "$2.key" -out "$2.csr" 2>/dev/null
  openssl x509 -req -in "$2.csr" -CA "$1.crt" -CAkey "$1.key" -CAcreateserial -days 2 \
    -extfile "$ext" -out "$2.crt" 2>/dev/null
  rm -f "$2.csr"
}
ca ca
ca other-ca
leaf ca tls
leaf other-ca other
openssl rand -hex 24 > token
openssl rand -hex 24 > wrong-token
openssl rand -hex 24 > admin-token
chmod 600 ./*.key token wrong-token admin-token
