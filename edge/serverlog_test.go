package edge

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/net/http2"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/fakeclock"
)

// summaryMsg is the message of serverLog's summary line.
const summaryMsg = "net/http's connection log lines not written: past their bound"

// heldTimers records the summaries a serverLog arms, for the test to run
// by hand.
type heldTimers struct {
	mu sync.Mutex
	fs []func()
}

func (h *heldTimers) after(_ time.Duration, f func()) {
	h.mu.Lock()
	h.fs = append(h.fs, f)
	h.mu.Unlock()
}

// runAll runs the summaries armed so far and reports how many there were.
func (h *heldTimers) runAll() int {
	h.mu.Lock()
	fs := h.fs
	h.fs = nil
	h.mu.Unlock()
	for _, f := range fs {
		f()
	}
	return len(fs)
}

// serverLines splits what logger "http" wrote into net/http's own lines
// and the summaries' counts of lines not written.
func serverLines(logs *observer.ObservedLogs) (written int, held []int64) {
	for _, e := range logs.FilterLoggerName("http").All() {
		if e.Message != summaryMsg {
			written++
			continue
		}
		held = append(held, e.ContextMap()["lines_not_written"].(int64))
	}
	return written, held
}

// TestServerLogFloodBounded floods the traffic server with what makes
// net/http write a log line of its own — GOAWAY frames with an error code
// on one HTTP/2 connection, and connections that fail their TLS
// handshake — on a clock that does not move: serverLogBurst lines are
// written, the rest counted, and a summary — when its timer fires, and
// at shutdown (FlushServerLog) for those held back since — says how
// many. Before serverLog every one was written (one connection's 100,000
// GOAWAY frames made 40,523 lines in about a second), past every share.
func TestServerLogFloodBounded(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flood func(t *testing.T, addr string, tlsCfg *tls.Config)
	}{
		{"GOAWAY frames on one HTTP/2 connection", goAwayFlood},
		{"failed TLS handshakes", handshakeFlood},
	} {
		t.Run(tc.name, func(t *testing.T) {
			certs, ca := apiCertificates(t)
			core, logs := observer.New(zapcore.DebugLevel)
			clock := fakeclock.New(time.Unix(1_700_000_000, 0))
			var timers heldTimers
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := newServer(config.Default(), http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}),
				zap.New(core), nil, clock.Now, timers.after)
			go func() { _ = ServeTraffic(srv, ln, certs) }()
			t.Cleanup(func() { _ = srv.Close() })

			tc.flood(t, ln.Addr().String(), &tls.Config{RootCAs: ca.Pool, ServerName: "api.example.test", NextProtos: []string{"h2"}})
			armed := timers.runAll()
			written, held := serverLines(logs)
			if written != serverLogBurst || armed != 1 || len(held) != 1 || held[0] < 1 {
				t.Fatalf("net/http's lines: %d written, %d summaries armed, summaries %v; want %d written, then one summary of those held back",
					written, armed, held, serverLogBurst)
			}

			// Lines held back after the summary are summed up at shutdown.
			before := held[0]
			tc.flood(t, ln.Addr().String(), &tls.Config{RootCAs: ca.Pool, ServerName: "api.example.test", NextProtos: []string{"h2"}})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(ctx)
			FlushServerLog(srv) // as the process does once its server is shut down
			written, held = serverLines(logs)
			if written != serverLogBurst || len(held) != 2 || held[0] != before || held[1] < 1 {
				t.Fatalf("after a second flood and shutdown: %d written, summaries %v", written, held)
			}
		})
	}
}

// goAwayFlood sends 5,000 GOAWAY frames with PROTOCOL_ERROR on one
// HTTP/2 connection and reads until the server closes it.
func goAwayFlood(t *testing.T, addr string, tlsCfg *tls.Config) {
	t.Helper()
	c, err := tls.Dial("tcp", addr, tlsCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN chose %q, want h2", p)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	for range 5000 {
		if fr.WriteGoAway(0, http2.ErrCodeProtocol, nil) != nil {
			break // the server closed the connection
		}
	}
	_, _ = io.Copy(io.Discard, c)
}

// handshakeFlood opens 300 connections that each send an HTTP/1.1
// request instead of a TLS ClientHello, and reads each until the server
// closes it.
func handshakeFlood(t *testing.T, addr string, _ *tls.Config) {
	t.Helper()
	for range 300 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: api.example.test\r\n\r\n")
		_, _ = io.Copy(io.Discard, c)
		c.Close()
	}
}

// TestServerLogRefills checks serverLog's bucket on a clock moved by
// hand: serverLogBurst lines at once, serverLogRate more a second after,
// and a summary of the lines held back each time one is due.
func TestServerLogRefills(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	clock := fakeclock.New(time.Unix(1_700_000_000, 0))
	var timers heldTimers
	errLog := newServerLog(zap.New(core), clock.Now, timers.after)
	for _, step := range []struct {
		name        string
		advance     time.Duration
		lines       int
		wantWritten int     // net/http's lines written so far
		wantHeld    []int64 // the summaries written so far, once the armed ones ran
	}{
		{"a burst at once", 0, serverLogBurst, serverLogBurst, nil},
		{"past it", 0, 50, serverLogBurst, []int64{50}},
		{"a second later", time.Second, serverLogRate + 5, serverLogBurst + serverLogRate, []int64{50, 5}},
		{"a full bucket later", 10 * time.Second, serverLogBurst, 2*serverLogBurst + serverLogRate, []int64{50, 5}},
	} {
		t.Run(step.name, func(t *testing.T) {
			clock.Advance(step.advance)
			for range step.lines {
				errLog.Print("http: TLS handshake error from 192.0.2.1:1234: EOF")
			}
			timers.runAll()
			written, held := serverLines(logs)
			if written != step.wantWritten || !equalInts(held, step.wantHeld) {
				t.Fatalf("%d written, summaries %v; want %d, %v", written, held, step.wantWritten, step.wantHeld)
			}
		})
	}
}

func equalInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
