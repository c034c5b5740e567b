package fault

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// The row of net/http's own lines about client connections: the address
// makes net/http log as fast as it can — GOAWAY frames with an error code
// on HTTP/2 connections, each a line, and connections that fail their
// TLS handshake — with the access log on. The lines written stop at the
// server's bound (edge's serverLog: 200 at once, 20 a second after), the
// rest are counted in summary lines, and the victim trades beside it.
// Before the bound, every one was written: one connection's GOAWAY frames
// made tens of thousands of lines a second.

// The bound of edge's serverLog, as docs/pools.md gives it.
const (
	serverLogBurst = 200
	serverLogRate  = 20
)

// serverLogSummary is the message of serverLog's summary lines.
const serverLogSummary = "net/http's connection log lines not written: past their bound"

func init() {
	poolRows = append(poolRows, poolRow{pool: "net/http's own lines about client connections", attacker: oneAddress,
		config: "server:\n  tls:\n    certificates:\n      - {cert_file: CERT_FILE, key_file: KEY_FILE}\n", tls: true,
		log:    "  level: info\n",
		attack: connectionLogFlood, holding: connectionLinesFlooded,
		maxGrowth: 64 << 20, check: connectionLinesBounded})
}

// goAwayConns is how many HTTP/2 connections at once the attacker
// floods with GOAWAY frames.
const goAwayConns = 4

// connectionLogFlood: the address keeps goAwayConns HTTP/2 connections
// sending GOAWAY frames (PROTOCOL_ERROR), each connection until exgate
// closes it and then a new one, and opens connections that send an
// HTTP/1.1 request where the TLS handshake should be, until the row ends.
// a.sent counts the frames and failed handshakes sent.
func connectionLogFlood(ctx context.Context, t *testing.T, r *poolRun, a *attack) {
	tc := r.env.tls.Clone()
	tc.ServerName, tc.NextProtos = "127.0.0.1", []string{"h2"}
	var wg sync.WaitGroup
	for range goAwayConns {
		wg.Go(func() {
			for ctx.Err() == nil {
				goAwayConn(ctx, r, a, tc)
			}
		})
	}
	wg.Go(func() {
		for ctx.Err() == nil {
			c, err := dialFrom(anonAddr, r.host)
			if err != nil {
				continue
			}
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err == nil {
				a.sent.Add(1)
			}
			_, _ = io.Copy(io.Discard, c)
			c.Close()
		}
	})
	wg.Wait()
}

// goAwayConn opens one HTTP/2 connection from the attacker's address and
// sends GOAWAY frames on it until exgate closes it or ctx ends.
func goAwayConn(ctx context.Context, r *poolRun, a *attack, tc *tls.Config) {
	raw, err := dialFrom(anonAddr, r.host)
	if err != nil {
		return
	}
	c := tls.Client(raw, tc)
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if c.Handshake() != nil || c.ConnectionState().NegotiatedProtocol != "h2" {
		return
	}
	go func() { _, _ = io.Copy(io.Discard, c) }() // the server's frames
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		return
	}
	fr := http2.NewFramer(c, nil)
	if fr.WriteSettings() != nil {
		return
	}
	for fr.WriteGoAway(0, http2.ErrCodeProtocol, nil) == nil {
		a.sent.Add(1)
	}
}

// connectionLinesFlooded reports that the attacker has sent ten times
// the lines the bound lets through in a minute, and that exgate wrote the
// bound's burst of them: the victim trades from then on.
func connectionLinesFlooded(t *testing.T, r *poolRun, a *attack) bool {
	written, _, _ := connectionLines(t, r)
	return a.sent.Load() >= 10*(serverLogBurst+60*serverLogRate) && written >= serverLogBurst
}

// connectionLines reads the gateway's output: the lines net/http wrote
// itself (logger "http"), those its summaries counted, and how long the
// output spans, from its first line to its last.
func connectionLines(t *testing.T, r *poolRun) (written, notWritten int64, span time.Duration) {
	var first, last time.Time
	sc := bufio.NewScanner(strings.NewReader(r.g.out.String()))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var f map[string]any
		if json.Unmarshal(sc.Bytes(), &f) != nil {
			continue
		}
		if ts, ok := f["time"].(string); ok {
			if at, err := time.Parse(time.RFC3339Nano, ts); err == nil {
				if first.IsZero() {
					first = at
				}
				last = at
			}
		}
		if f["logger"] != "http" {
			continue
		}
		if f["msg"] == serverLogSummary {
			n, _ := f["lines_not_written"].(float64)
			notWritten += int64(n)
			continue
		}
		written++
	}
	return written, notWritten, last.Sub(first)
}

// connectionLinesBounded checks the gateway's output once the attacker
// stopped: a summary counted the lines held back (they come every 10 s),
// and the lines written are within the bound over the time the output
// spans — a burst, then the rate — where the attacker sent far more.
func connectionLinesBounded(t *testing.T, r *poolRun) {
	var written, notWritten int64
	var span time.Duration
	if !eventually(25*time.Second, func() bool {
		written, notWritten, span = connectionLines(t, r)
		return notWritten > 0
	}) {
		t.Fatalf("no summary of net/http's lines not written; %d written over %v", written, span)
	}
	bound := serverLogBurst + serverLogRate*int64(math.Ceil(span.Seconds()+1))
	t.Logf("net/http's lines: %d written, %d counted in summaries, over %v of output (bound %d)", written, notWritten, span, bound)
	if written > bound {
		t.Errorf("%d of net/http's lines written over %v, past the bound of %d", written, span, bound)
	}
}
