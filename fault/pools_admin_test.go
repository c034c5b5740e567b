package fault

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The row of the admin listener's connections: the address — a leaky
// scraper, then a slowloris — opens three times admin.max_connections on
// the admin listener, first each answered and left open (idle keep-alive),
// then each with a request head begun and never finished, and keeps them
// all. It holds at most its share (6 of a share pool of 12: a quarter of
// the 16 is kept for the connections refused): each of its new
// connections closes its oldest idle one, and once none is idle its next
// ones are refused — those within the refused room answered 503
// too_many_connections when their head is finished, the rest closed
// unanswered at once. Meanwhile the victim scrapes /metrics and asks
// /healthz and /readyz from its own address, each on a new connection,
// besides its trades (victimAdmin): before the share, the attacker's
// connections held all 16 and those waited in the kernel's queue until
// they timed out.

// adminPhaseConns is how many connections the attacker opens in each
// phase: three times the row's admin.max_connections.
const adminPhaseConns = 48

func init() {
	poolRows = append(poolRows, poolRow{pool: "admin listener connections", attacker: oneAddress,
		config: "admin:\n  max_connections: 16\nserver:\n  read_header_timeout: 60s\n",
		attack: adminConnections, holding: adminConnectionsHeld, victimAdmin: true,
		refused: []string{"too_many_connections"}, metric: "exgate_admin_connections_closed_total", labels: []string{`reason="past_share"`},
		maxGrowth: 64 << 20})
}

// adminConnections is the row's attack; once the row ends it finishes the
// stalled heads and tallies their answers.
func adminConnections(ctx context.Context, t *testing.T, r *poolRun, a *attack) {
	host := strings.TrimPrefix(r.g.admin, "http://")
	addr := a.addrs[0]
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range adminPhaseConns { // the leaky scraper
		c, err := dialFrom(addr, host)
		if err != nil {
			a.answers.add(answer{err: err})
			return
		}
		conns = append(conns, c)
		_, _ = io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
		a.answers.add(adminAnswer(c))
		a.sent.Add(1)
	}
	var stalled []net.Conn
	for range adminPhaseConns { // the slowloris
		c, err := dialFrom(addr, host)
		if err != nil {
			a.answers.add(answer{err: err})
			return
		}
		conns, stalled = append(conns, c), append(stalled, c)
		_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: "+host+"\r\n")
		a.sent.Add(1)
	}
	<-ctx.Done()
	unanswered := 0
	for _, c := range stalled {
		if _, err := io.WriteString(c, "\r\n"); err != nil {
			unanswered++
			continue
		}
		if ans := adminAnswer(c); ans.err != nil {
			unanswered++ // closed unanswered, past the refused room
		} else {
			a.answers.add(ans)
		}
	}
	t.Logf("of the attacker's %d stalled heads, %d closed unanswered", len(stalled), unanswered)
}

// adminAnswer reads an answer of the admin listener on c: an error answer
// must be in the one shape.
func adminAnswer(c net.Conn) answer {
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second)) // only to end a hung row
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return answer{err: err, latency: time.Since(start)}
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	a := answer{status: res.StatusCode, latency: time.Since(start), err: err}
	if err == nil && res.StatusCode >= 400 {
		var e struct{ Detail, Code *string }
		if json.Unmarshal(body, &e) != nil || e.Detail == nil || e.Code == nil || res.Header.Get("Content-Type") != "application/json" {
			a.err = fmt.Errorf("%d without the error shape: %q", res.StatusCode, body)
		} else {
			a.code = *e.Code
		}
	}
	return a
}

// adminConnectionsHeld reports that the attacker opened all its
// connections.
func adminConnectionsHeld(t *testing.T, r *poolRun, a *attack) bool {
	return a.sent.Load() == 2*adminPhaseConns
}

// victimAdmin is what Prometheus and the probes ask of the admin listener
// from the victim's address, each on a new connection: it returns each
// request that was not answered 200.
func (r *poolRun) victimAdmin() []string {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(victimAddr)}, Timeout: 5 * time.Second}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, DialContext: d.DialContext}}
	var bad []string
	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		res, err := c.Get(r.g.admin + path)
		if err != nil {
			bad = append(bad, fmt.Sprintf("admin GET %s: %v", path, err))
			continue
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			bad = append(bad, fmt.Sprintf("admin GET %s: %d", path, res.StatusCode))
		}
	}
	return bad
}
