#!/usr/bin/env bash
# The comparison benchmark, as `make bench` runs it: installs what is
# missing (Debian packages, as root), builds exgate, the reference backend
# and the benchmark driver, then runs bench/cmd/benchrun, which starts
# everything on free loopback ports, measures, writes bench/results/ and
# stops every process it started (also on Ctrl-C or failure).
#
# Environment:
#   BENCH_QUICK=1       smoke run of about a minute (1 round of 2 s)
#   BENCH_ROUNDS=5      measured rounds (interleaved)
#   BENCH_DURATION=6s   length of one measured run
#   BENCH_WARMUP=2s     warm-up of each target and scenario
#   BENCH_CONNS=64      wrk connections      BENCH_THREADS=2  wrk threads
#   BENCH_PIN=none      none | split (wrk on the last CPU, servers on the others)
#   BENCH_PROFILE=1     also profile exgate under load (pprof text in bench/results/)
#   BENCH_RATE_ROUNDS=4 open-loop rounds at half the slowest compared target's rate (vegeta); 0 = none
#   BENCH_SURGE=15s     the overload surge's length (exgate before a backend of 32 workers, 400
#                       connections of market data, a trader cancelling); 0 = none
#   BENCH_FLEET_ROUNDS=3 rounds of exgate and Caddy (least_conn) in front of the same three instances, one slower; 0 = none
#   BENCH_OUT=bench/results
set -euo pipefail
cd "$(dirname "$0")/.."

# command -> Debian package
declare -A need=([nginx]=nginx [caddy]=caddy [wrk]=wrk [redis-server]=redis-server [taskset]=util-linux)
missing=()
for cmd in "${!need[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${need[$cmd]}")
done
if ! command -v go >/dev/null 2>&1; then
  echo "bench: Go is not installed (https://go.dev/dl/, 1.26 or newer)" >&2
  exit 1
fi
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "bench: missing Debian packages: ${missing[*]} (run as root, or: sudo apt-get install -y ${missing[*]})" >&2
    exit 1
  fi
  echo "bench: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
  # Debian starts the packaged services; the benchmark runs its own.
  for svc in nginx caddy redis-server; do
    if command -v systemctl >/dev/null 2>&1; then systemctl stop "$svc" >/dev/null 2>&1 || true; fi
  done
fi

bins=$(mktemp -d "${TMPDIR:-/tmp}/exgate-bench-bin.XXXXXX")
child=
cleanup() {
  if [ -n "$child" ] && kill -0 "$child" 2>/dev/null; then
    kill -TERM "$child" 2>/dev/null || true
    wait "$child" 2>/dev/null || true
  fi
  rm -rf "$bins"
}
trap cleanup EXIT

echo "bench: building into $bins"
go build -o "$bins/exgate" ./cmd/exgate
go build -o "$bins/exchange-sim" ./cmd/exchange-sim
go build -o "$bins/benchrun" ./bench/cmd/benchrun
go build -o "$bins/floor" bench/prototypes/floor/nethttp/main.go
go build -o "$bins/floor-rp" bench/prototypes/floor/reverseproxy/main.go
# vegeta holds a fixed request rate (the open-loop run); built from the Go
# module proxy, outside this module, once per machine.
vegeta_version=v12.13.0
vegeta_bin="${XDG_CACHE_HOME:-$HOME/.cache}/exgate-bench/vegeta-$vegeta_version"
if [ ! -x "$vegeta_bin" ]; then
  echo "bench: building vegeta $vegeta_version"
  mkdir -p "$(dirname "$vegeta_bin")"
  GOBIN="$bins" go install "github.com/tsenart/vegeta/v12@$vegeta_version"
  cp "$bins/vegeta" "$vegeta_bin"
fi
cp "$vegeta_bin" "$bins/vegeta"

args=(-bins "$bins" -out "${BENCH_OUT:-bench/results}")
cmdline="make bench"
for v in BENCH_QUICK BENCH_ROUNDS BENCH_DURATION BENCH_WARMUP BENCH_CONNS BENCH_THREADS BENCH_PIN BENCH_PROFILE BENCH_RATE_ROUNDS BENCH_TRACED_ROUNDS BENCH_SURGE BENCH_FLEET_ROUNDS; do
  if [ -n "${!v:-}" ]; then cmdline="$v=${!v} $cmdline"; fi
done
if [ "${BENCH_QUICK:-0}" = 1 ]; then
  args+=(-quick -rounds 1 -duration 2s -warmup 1s -tokens 1000 -rate-rounds 1 -rate-duration 2s -traced-rounds 1 -surge 5s -fleet-rounds 1)
fi
[ -n "${BENCH_ROUNDS:-}" ] && args+=(-rounds "$BENCH_ROUNDS")
[ -n "${BENCH_DURATION:-}" ] && args+=(-duration "$BENCH_DURATION")
[ -n "${BENCH_WARMUP:-}" ] && args+=(-warmup "$BENCH_WARMUP")
[ -n "${BENCH_CONNS:-}" ] && args+=(-conns "$BENCH_CONNS")
[ -n "${BENCH_THREADS:-}" ] && args+=(-threads "$BENCH_THREADS")
[ -n "${BENCH_PIN:-}" ] && args+=(-pin "$BENCH_PIN")
[ "${BENCH_PROFILE:-0}" = 1 ] && args+=(-profile)
[ -n "${BENCH_RATE_ROUNDS:-}" ] && args+=(-rate-rounds "$BENCH_RATE_ROUNDS")
[ -n "${BENCH_TRACED_ROUNDS:-}" ] && args+=(-traced-rounds "$BENCH_TRACED_ROUNDS")
[ -n "${BENCH_SURGE:-}" ] && args+=(-surge "$BENCH_SURGE")
[ -n "${BENCH_FLEET_ROUNDS:-}" ] && args+=(-fleet-rounds "$BENCH_FLEET_ROUNDS")
args+=(-command "$cmdline")

# benchrun runs in the background so that this shell's trap can pass on
# SIGINT/SIGTERM (a script's background job ignores the terminal's SIGINT;
# the trap forwards it as SIGTERM and benchrun stops what it started).
"$bins/benchrun" "${args[@]}" &
child=$!
trap 'kill -TERM "$child" 2>/dev/null || true' INT TERM HUP
status=0
wait "$child" || status=$?
# wait returns early when a trapped signal arrives: wait for the real end.
while kill -0 "$child" 2>/dev/null; do
  wait "$child" || status=$?
done
child=
exit "$status"
