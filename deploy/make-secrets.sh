#!/usr/bin/env bash
# The two Secrets deploy/operator.yaml's operator needs, made once per
# cluster (the Helm chart makes the same ones itself; docs/security.md):
#   shadowsync-tls              a CA of its own and one certificate for the name
#                               `shadowsync`, for server and client use
#   shadowsync-credentials-key  the key every job's tokens are derived from
# A Secret that exists is left as it is (running jobs hold what it gave them).
#
#   deploy/make-secrets.sh [NAMESPACE]      default: shadowsync-system
#
# Needs kubectl (or $KUBECTL) and openssl. The CA's key is not kept.
set -euo pipefail
ns="${1:-shadowsync-system}"
kubectl="${KUBECTL:-kubectl}"
days=3650

exists() { "$kubectl" -n "$ns" get secret "$1" >/dev/null 2>&1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"

if exists shadowsync-tls; then
  echo "make-secrets: secret/shadowsync-tls exists in $ns: kept"
else
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days "$days" \
    -subj /CN=shadowsync-ca -keyout ca.key -out ca.crt 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -subj /CN=shadowsync -keyout tls.key -out tls.csr 2>/dev/null
  printf '%s\n' 'basicConstraints=critical,CA:FALSE' 'keyUsage=critical,digitalSignature' \
    'extendedKeyUsage=serverAuth,clientAuth' 'subjectAltName=DNS:shadowsync' > ext.cnf
  openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days "$days" \
    -extfile ext.cnf -out tls.crt 2>/dev/null
  "$kubectl" -n "$ns" create secret generic shadowsync-tls \
    --from-file=ca.crt --from-file=tls.crt --from-file=tls.key
fi

if exists shadowsync-credentials-key; then
  echo "make-secrets: secret/shadowsync-credentials-key exists in $ns: kept"
else
  openssl rand -hex 32 > key
  "$kubectl" -n "$ns" create secret generic shadowsync-credentials-key --from-file=key
fi
