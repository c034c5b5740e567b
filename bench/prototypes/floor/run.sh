#!/usr/bin/env bash
# Measures the floors next to NGINX + limit_req and exgate, interleaved:
# starts the benchmark stack (benchrun -serve), the two floor proxies in
# front of the same backend, then runs wrk -t2 -c64 for 6 s against each
# target in turn, ROUNDS times (odd rounds in reverse order), printing
# req/s and the proxy's CPU µs per request (user + system of all its
# processes, from /proc). Needs nginx, wrk and redis-server (make bench
# installs them) and network access to fetch fasthttp the first time.
#
#   bench/prototypes/floor/run.sh            # 3 rounds
#   ROUNDS=5 bench/prototypes/floor/run.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
rounds=${ROUNDS:-3}
tmp=$(mktemp -d)
cleanup() {
	kill "${pids[@]}" 2>/dev/null || true
	[[ -n ${serve:-} ]] && kill -INT "$serve" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
pids=()
trap cleanup EXIT

go build -o "$tmp/bin/exgate" ./cmd/exgate
go build -o "$tmp/bin/exchange-sim" ./cmd/exchange-sim
go build -o "$tmp/floor-nethttp" bench/prototypes/floor/nethttp/main.go
(cd bench/prototypes/floor/fasthttp && go build -o "$tmp/floor-fasthttp" .)
go build -o "$tmp/benchrun" ./bench/cmd/benchrun

"$tmp/benchrun" -bins "$tmp/bin" -serve >"$tmp/serve.log" 2>&1 &
serve=$!
for _ in $(seq 60); do grep -q 'Ctrl-C' "$tmp/serve.log" 2>/dev/null && break; sleep 1; done
field() { awk -v t="$1" -v f="$2" '$1==t {print $f}' "$tmp/serve.log"; }
direct=$(field direct 2 | sed 's#http://##')

# The floors listen on free ports picked here.
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pn=$(port); pf=$(port)
GOGC=400 "$tmp/floor-nethttp" "127.0.0.1:$pn" "http://$direct" >/dev/null 2>&1 &
pids+=($!)
"$tmp/floor-fasthttp" "127.0.0.1:$pf" "$direct" >/dev/null 2>&1 &
pids+=($!)
sleep 1

declare -A url pidsOf
url[nginx-limit]=$(field nginx-limit 2); pidsOf[nginx-limit]="$(field nginx-limit 4) $(pgrep -P "$(field nginx-limit 4)" | tr '\n' ' ' || true)"
url[floor-fasthttp]="http://127.0.0.1:$pf"; pidsOf[floor-fasthttp]=${pids[1]}
url[floor-nethttp]="http://127.0.0.1:$pn"; pidsOf[floor-nethttp]=${pids[0]}
url[exgate-off]=$(field exgate-off 2); pidsOf[exgate-off]=$(field exgate-off 4)
url[exgate-redis]=$(field exgate-redis 2); pidsOf[exgate-redis]=$(field exgate-redis 4)
order=(nginx-limit floor-fasthttp floor-nethttp exgate-off exgate-redis)

ticks() { local s=0; for p in $1; do s=$((s + $(awk '{print $14+$15}' "/proc/$p/stat"))); done; echo "$s"; }
hz=$(getconf CLK_TCK)
for t in "${order[@]}"; do wrk -t2 -c64 -d2s "${url[$t]}/api/v1/mkt/markets/" >/dev/null; done # warm-up
for r in $(seq "$rounds"); do
	list=("${order[@]}")
	if ((r % 2 == 0)); then list=($(printf '%s\n' "${order[@]}" | tac)); fi
	for t in "${list[@]}"; do
		c0=$(ticks "${pidsOf[$t]}")
		rps=$(wrk -t2 -c64 -d6s "${url[$t]}/api/v1/mkt/markets/" | awk '/Requests\/sec/ {print $2}')
		c1=$(ticks "${pidsOf[$t]}")
		awk -v r="$r" -v t="$t" -v q="$rps" -v c=$((c1 - c0)) -v hz="$hz" \
			'BEGIN {printf "round %d  %-15s %8.0f req/s  proxy CPU %5.1f us/req\n", r, t, q, c / hz * 1e6 / (q * 6)}'
	done
done
