package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/metrics"
)

// serveTLS serves h, with NewServer's settings from cfg and edge metrics
// m, over TLS with certs on a free loopback port until the test ends
// (then shut down, within 5 s), and returns its address.
func serveTLS(t *testing.T, cfg *config.Config, h http.Handler, m *metrics.Edge, certs *Certificates) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(cfg, h, zap.NewNop(), m)
	go func() { _ = ServeTraffic(srv, ln, certs) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return ln.Addr().String()
}

// TestHTTP2ResetFloodBounded opens stream after stream on one HTTP/2
// connection and resets each at once (CVE-2023-44487's rapid reset). The
// handlers running at any moment never exceed
// server.http2.max_concurrent_streams. When handlers outlast the resets
// (a slow store, a slow backend), the server ends the connection with
// ENHANCE_YOUR_CALM, counted in exgate_http2_errors_total, long before
// the flood is through; when they stop at the reset, the flood costs one
// short handler run per stream, each of which the gateway's rate limits
// count like any request. Either way a new connection is served normally.
func TestHTTP2ResetFloodBounded(t *testing.T) {
	for _, tc := range []struct {
		name         string
		honourCancel bool
		wantGoAway   bool
	}{
		{"handlers outlast the resets", false, true},
		{"handlers stop at the reset", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const maxStreams = 8
			const flood = 2000
			certs, ca := apiCertificates(t)
			cfg := config.Default()
			cfg.Server.HTTP2.MaxConcurrentStreams = maxStreams
			m := newEdgeMetrics(t)

			var running, peak, served atomic.Int64
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := running.Add(1)
				defer running.Add(-1)
				served.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				if tc.honourCancel {
					select {
					case <-r.Context().Done():
					case <-time.After(50 * time.Millisecond):
					}
				} else {
					time.Sleep(50 * time.Millisecond)
				}
				w.WriteHeader(http.StatusNoContent)
			})
			addr := serveTLS(t, cfg, h, m, certs)
			tlsCfg := &tls.Config{RootCAs: ca.Pool, ServerName: "api.example.test", NextProtos: []string{"h2"}}

			goaway, sent := resetFlood(t, addr, tlsCfg, flood)
			if p := peak.Load(); p > maxStreams {
				t.Fatalf("%d handlers ran at once, want at most %d", p, maxStreams)
			}
			if tc.wantGoAway {
				if goaway != http2.ErrCodeEnhanceYourCalm {
					t.Fatalf("connection ended with %v after %d streams, want GOAWAY ENHANCE_YOUR_CALM", goaway, sent)
				}
				if n := served.Load(); n >= flood/2 {
					t.Fatalf("%d of %d reset streams were served", n, flood)
				}
				waitFor(t, "the reset flood counted", func() bool {
					return testutil.ToFloat64(m.HTTP2ErrorCounter("conn_enhance_your_calm_too_many_early_resets")) >= 1
				})
			}

			// The server still serves a well-behaved HTTP/2 client.
			client := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg.Clone(), ForceAttemptHTTP2: true}, Timeout: 5 * time.Second}
			defer client.CloseIdleConnections()
			res, err := client.Get("https://" + addr + "/api/v1/mkt/markets/")
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.ProtoMajor != 2 || res.StatusCode != http.StatusNoContent {
				t.Fatalf("after the flood: %s %s", res.Proto, res.Status)
			}
		})
	}
}

// resetFlood connects to addr over TLS with ALPN h2 and sends up to n
// HEADERS frames, each followed by RST_STREAM, then a PING. It returns the
// error code of the server's GOAWAY (NO_ERROR when the server answered
// the PING instead) and how many streams it sent.
func resetFlood(t *testing.T, addr string, tlsCfg *tls.Config, n int) (http2.ErrCode, int) {
	t.Helper()
	c, err := tls.Dial("tcp", addr, tlsCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN chose %q, want h2", p)
	}
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "api.example.test"}, {":path", "/api/v1/mkt/markets/"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	block := hb.Bytes()

	// The server's frames are read while flooding: the flood ends when
	// the server ends the connection.
	result := make(chan http2.ErrCode, 1)
	go func() {
		rfr := http2.NewFramer(io.Discard, c)
		for {
			f, err := rfr.ReadFrame()
			if err != nil {
				result <- http2.ErrCodeInternal
				return
			}
			switch f := f.(type) {
			case *http2.GoAwayFrame:
				result <- f.ErrCode
				return
			case *http2.PingFrame:
				if f.IsAck() {
					result <- http2.ErrCodeNo
					return
				}
			}
		}
	}()
	sent := 0
	for id := uint32(1); sent < n; id += 2 {
		if fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndStream: true, EndHeaders: true}) != nil ||
			fr.WriteRSTStream(id, http2.ErrCodeCancel) != nil {
			break
		}
		sent++
	}
	_ = fr.WritePing(false, [8]byte{1})
	select {
	case code := <-result:
		return code, sent
	case <-time.After(20 * time.Second):
		t.Fatal("no answer to the flood")
	}
	return 0, sent
}

// TestHTTP2RefusalKeepsConnection: a request refused while its body of
// unknown length is unread closes an HTTP/1.1 connection (net/http would
// read up to 256 KiB of it first), but over HTTP/2 only its stream ends:
// a GOAWAY would cost every other request the client multiplexes on the
// connection a new TLS handshake. The next request goes on the same
// connection.
func TestHTTP2RefusalKeepsConnection(t *testing.T) {
	certs, ca := apiCertificates(t)
	be := &backend{}
	bs := httptest.NewServer(be)
	t.Cleanup(bs.Close)
	cfg := config.Default()
	cfg.Upstream.URL = config.MustURL(bs.URL)
	gw, err := New(cfg, Options{Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, cfg, gw, nil, certs)
	tlsCfg := &tls.Config{RootCAs: ca.Pool, ServerName: "api.example.test", NextProtos: []string{"h2"}}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg, ForceAttemptHTTP2: true}, Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	url := "https://" + addr

	var conns []net.Conn
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { conns = append(conns, i.Conn) }}
	do := func(req *http.Request) *http.Response {
		t.Helper()
		res, err := client.Do(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// An order without a token, its body streamed (no content-length).
	pr, pw := io.Pipe()
	go func() { _, _ = io.WriteString(pw, `{"symbol":"BTC_USDT"`); _ = pw.Close() }()
	req, _ := http.NewRequest("POST", url+"/api/v1/odr/orders/", pr)
	req.Header.Set("Content-Type", "application/json")
	res := do(req)
	if res.ProtoMajor != 2 {
		t.Fatalf("%s, want HTTP/2", res.Proto)
	}
	assertError(t, res, http.StatusUnauthorized, "not_authenticated")
	req, _ = http.NewRequest("GET", url+"/api/v1/mkt/markets/", nil)
	res = do(req)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("next request: %s", res.Status)
	}
	if len(conns) != 2 || conns[0] != conns[1] {
		t.Fatalf("the request after a refusal went on a new connection: the refusal closed an HTTP/2 connection")
	}
}

// TestHTTP10ConnectionClosedAfterAnswer: net/http ignores
// Transfer-Encoding on an HTTP/1.0 request (and removes the header), so
// exgate reads no body where a proxy in front that honours it reads a
// chunked one; on a kept-alive connection the chunks would then be read
// as further requests and answered, one answer more than the proxy in
// front expects, the next client's answer going to the one after. RFC
// 9112 §6.1 has a server close the connection after an HTTP/1.0 message
// with Transfer-Encoding; exgate cannot see the header, so it closes
// every HTTP/1.0 connection after its answer.
func TestHTTP10ConnectionClosedAfterAnswer(t *testing.T) {
	e := startEnv(t, nil)
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	smuggled := "GET /api/v1/mkt/currencies/ HTTP/1.1\r\nHost: x\r\n\r\n"
	if _, err := io.WriteString(c, "POST /api/v1/usr/authenticate/ HTTP/1.0\r\nConnection: keep-alive\r\n"+
		"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"+smuggled); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("first answer %s", res.Status)
	}
	if res, err := http.ReadResponse(br, nil); err == nil {
		t.Fatalf("a second answer, %s, on the HTTP/1.0 connection: its body was read as a request", res.Status)
	}
	e.backend.mu.Lock()
	defer e.backend.mu.Unlock()
	for _, r := range e.backend.requests {
		if r.Path == "/api/v1/mkt/currencies/" {
			t.Fatal("the body's request reached the backend")
		}
	}
}
