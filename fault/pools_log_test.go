package fault

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The row of the access log's refusal lines: the address floods refusals
// exgate answers itself before any limit is charged (401s of orders
// without a token, 400s of an invalid path), each of which writes a line
// no sampling thins. Its lines stop at its share's burst (refusalBurst,
// never refilled within the row: 1/1h), the rest are counted in summary
// lines, and the victim's lines — its orders, bulks, cancels and reads —
// are all written.

// refusalBurst is the row's share of refusal lines per client.
const refusalBurst = 100

func init() {
	poolRows = append(poolRows, poolRow{pool: "the access log's refusal lines", attacker: oneAddress,
		log:    "  refusals_per_client: { rate: 1/1h, burst: 100 }\n",
		attack: refusalFlood, holding: tokensSent,
		refused: []string{"not_authenticated", "invalid_path"}, metric: "exgate_log_refusals_suppressed_total",
		maxGrowth: 64 << 20, check: refusalLinesShared})
}

// refusalFlood: the address sends cacheTokens requests, cacheWorkers at
// once, each refused before the backend hears of it: an order without a
// token (401 not_authenticated) or a path with an encoded slash (400
// invalid_path).
func refusalFlood(ctx context.Context, t *testing.T, r *poolRun, a *attack) {
	sendTokens(ctx, t, r, a, func(_, i int) *http.Request {
		if i%2 == 0 {
			req, _ := http.NewRequest("POST", r.g.url+"/api/v1/odr/orders/", strings.NewReader(`{"symbol":"BTC_USDT"}`))
			req.Header.Set("Content-Type", "application/json")
			return req
		}
		return get(r.g.url + "/api/v1/%2F")
	})
}

// refusalLinesShared checks the gateway's output once the attacker
// stopped: exactly refusalBurst lines of the attacker's address, its
// other requests counted in its summaries (they come every 10 s), every
// other request exgate answered with its line — the victim's, all of
// them.
func refusalLinesShared(t *testing.T, r *poolRun) {
	seen := r.seen(t) // every request exgate answered, the attacker's included
	var attacker, others, notWritten int64
	var summaries []string
	count := func() {
		attacker, others, notWritten, summaries = 0, 0, 0, nil
		sc := bufio.NewScanner(strings.NewReader(r.g.out.String()))
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var f map[string]any
			if json.Unmarshal(sc.Bytes(), &f) != nil {
				continue
			}
			switch f["msg"] {
			case "request":
				if peer, _ := f["peer"].(string); strings.HasPrefix(peer, anonAddr+":") {
					attacker++
				} else {
					others++
				}
			case "access log lines not written: client past its share of refusal lines":
				summaries = append(summaries, sc.Text())
				if f["client"] != anonAddr {
					t.Errorf("a summary of another client than the attacker: %s", sc.Text())
				}
				n, _ := f["lines_not_written"].(float64)
				notWritten += int64(n)
			}
		}
	}
	if !eventually(25*time.Second, func() bool { count(); return attacker+others+notWritten >= seen }) {
		t.Errorf("%d lines of the attacker, %d of others, %d counted in %d summaries: want %d requests in all",
			attacker, others, notWritten, len(summaries), seen)
	}
	t.Logf("%d requests: %d lines of the attacker, %d of the victim, %d counted in %d summaries", seen, attacker, others, notWritten, len(summaries))
	if attacker != refusalBurst {
		t.Errorf("%d lines of the attacker written, want its burst, %d", attacker, refusalBurst)
	}
	if others+attacker+notWritten != seen {
		t.Errorf("%d lines and %d counted for %d requests", others+attacker, notWritten, seen)
	}
}
