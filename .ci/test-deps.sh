#!/usr/bin/env bash
# Installs what the test suite needs on a fresh Debian machine, only when it
# is missing. Run as root (CI is); otherwise it says what to install.
set -euo pipefail

# command -> Debian package. The suite starts these itself on loopback.
declare -A need=(
  [git]=git
  [gcc]=gcc            # go test -race needs cgo
  [curl]=curl          # the README quick start is run verbatim by a test
  [redis-server]=redis-server   # limiter, idempotency and fault tests start real servers
  [redis-cli]=redis-tools       # creates the Redis Cluster for the cluster tests
  [redis-sentinel]=redis-sentinel  # the Sentinel failover tests (fault/) start three
  [promtool]=prometheus         # checks scrapes and alert rules; a real Prometheus scrapes exgate
  [haproxy]=haproxy             # sends the PROXY protocol (v1 and v2) to exgate in the edge tests
  [chromium]=chromium           # browser tests (cmd/exgate): a page on another origin trades through the CORS policy; the operator console, driven with chromedp
  [yq]=yq                       # deploy tests run the Kubernetes ConfigMap's check-config recipe with Debian's yq
  [openssl]=openssl             # docs/production.md, run by deploy's TestProductionWalkthrough: keys and certificates
  [ip]=iproute2                 # the walkthrough runs in a network namespace of its own (ip link set lo up)
  [unshare]=util-linux          # … and unshare makes it
  [make]=make                   # … and installs the binaries with make install
)

missing=()
for cmd in "${!need[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${need[$cmd]}")
done
# Python modules -> Debian packages, imported by Debian's python3: the
# differential test (cmd/exgate/drf_test.go) runs a Django REST framework
# + SimpleJWT order view behind exgate.
if ! /usr/bin/python3 -c 'import django, rest_framework' >/dev/null 2>&1; then
  missing+=(python3-djangorestframework)
fi
if ! /usr/bin/python3 -c 'import rest_framework_simplejwt' >/dev/null 2>&1; then
  missing+=(python3-djangorestframework-simplejwt)
fi
if ! command -v go >/dev/null 2>&1; then
  echo "test-deps: Go is not installed (https://go.dev/dl/, 1.26 or newer)" >&2
  exit 1
fi
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "test-deps: missing Debian packages: ${missing[*]} (run as root, or: sudo apt-get install -y ${missing[*]})" >&2
  exit 1
fi
echo "test-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
