package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/edge"
	"github.com/exgate/exgate/internal/tlstest"
	"github.com/exgate/exgate/metrics"
)

// serveTLS serves h, with edge.NewServer's settings from cfg and edge metrics
// m, over TLS with certs on a free loopback port until the test ends
// (then shut down, within 5 s), and returns its address.
func serveTLS(t *testing.T, cfg *config.Config, h http.Handler, m *metrics.Edge, certs *edge.Certificates) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := edge.NewServer(cfg, h, zap.NewNop(), m)
	go func() { _ = edge.ServeTraffic(srv, ln, certs) }()
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

// gatewayTLS serves a gateway on the defaults in front of backend, over
// TLS with HTTP/2, until the test ends, and returns its address and a
// client's TLS configuration offering h2.
func gatewayTLS(t *testing.T, backend http.Handler, opts ...func(*config.Config)) (string, *tls.Config) {
	t.Helper()
	certs, ca := apiCertificates(t)
	bs := httptest.NewServer(backend)
	t.Cleanup(bs.Close)
	cfg := config.Default()
	cfg.Upstream.URL = config.MustURL(bs.URL)
	for _, o := range opts {
		o(cfg)
	}
	gw, err := newGateway(cfg, Options{Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	return serveTLS(t, cfg, gw, nil, certs), &tls.Config{RootCAs: ca.Pool, ServerName: "api.example.test", NextProtos: []string{"h2"}}
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
	addr, tlsCfg := gatewayTLS(t, &backend{})
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

// TestHTTP2OversizeHeaderAnswered431: a header block over
// server.max_header_bytes, sent over HTTP/2 in a HEADERS frame and its
// CONTINUATION as browsers and curl send a large one, is answered 431
// request_header_too_large on its own stream; the connection stays, and
// the next stream on it is served. (net/http's HTTP/2 server closes the
// whole connection for a block past its own bound spread over frames:
// exgate sets that bound above its limit, headerReadLimit.) A Go client,
// which keeps to the bound the server advertises, gets the same answer
// on the same connection.
func TestHTTP2OversizeHeaderAnswered431(t *testing.T) {
	// The defaults: server.max_header_bytes 16KiB.
	addr, tlsCfg := gatewayTLS(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))

	c := dialH2(t, addr, tlsCfg)
	big := [][2]string{}
	for i := range 24 { // 24 KiB of values that Huffman coding barely shrinks
		big = append(big, [2]string{fmt.Sprintf("x-big-%d", i), strings.Repeat("Zq9~", 256)})
	}
	c.send(1, "/api/v1/mkt/markets/", big)
	if status, body := c.answer(1); status != "431" || !strings.Contains(body, `"code":"request_header_too_large"`) {
		t.Fatalf("stream 1 (a 24 KiB header block): %s %s, want 431 request_header_too_large", status, body)
	}
	c.send(3, "/api/v1/mkt/markets/", nil)
	if status, _ := c.answer(3); status != "204" {
		t.Fatalf("stream 3 on the same connection: %s, want 204", status)
	}

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg.Clone(), ForceAttemptHTTP2: true}, Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	var conns []net.Conn
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { conns = append(conns, i.Conn) }}
	for i, size := range []int{20 << 10, 0} {
		req, _ := http.NewRequest("GET", "https://"+addr+"/api/v1/mkt/markets/", nil)
		if size > 0 {
			req.Header.Set("X-Big", strings.Repeat("a", size))
		}
		res, err := client.Do(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if size > 0 {
			assertError(t, res, http.StatusRequestHeaderFieldsTooLarge, "request_header_too_large")
		} else if res.Body.Close(); res.StatusCode != http.StatusNoContent {
			t.Fatalf("the next request: %s", res.Status)
		}
	}
	if len(conns) != 2 || conns[0] != conns[1] {
		t.Fatal("the request after a 431 went on a new connection")
	}
}

// h2Conn is a raw HTTP/2 client connection: frames written and read as
// given, so that a test sends what a Go client would refuse to.
type h2Conn struct {
	t      *testing.T
	fr     *http2.Framer
	frames chan http2.Frame
	dec    *hpack.Decoder
}

// dialH2 opens an HTTP/2 connection over TLS and reads the server's
// frames into a channel, acknowledging its settings, until the test ends.
func dialH2(t *testing.T, addr string, tlsCfg *tls.Config) *h2Conn {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, tlsCfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	c := &h2Conn{t: t, fr: http2.NewFramer(conn, conn), frames: make(chan http2.Frame, 64), dec: hpack.NewDecoder(4096, nil)}
	if err := c.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	rfr := http2.NewFramer(io.Discard, conn)
	go func() {
		defer close(c.frames)
		for {
			f, err := rfr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					continue // acknowledged below, by the writer
				}
			case *http2.HeadersFrame:
				f = copyHeaders(f)
				c.frames <- f
				continue
			case *http2.DataFrame:
				c.frames <- &dataCopy{stream: f.StreamID, data: bytes.Clone(f.Data()), end: f.StreamEnded()}
				continue
			}
			c.frames <- f
		}
	}()
	if err := c.fr.WriteSettingsAck(); err != nil {
		t.Fatal(err)
	}
	return c
}

// dataCopy is a DATA frame's content kept past the framer's next read.
type dataCopy struct {
	http2.Frame
	stream uint32
	data   []byte
	end    bool
}

// copyHeaders keeps a HEADERS frame's fragment past the framer's next
// read.
func copyHeaders(f *http2.HeadersFrame) *http2.HeadersFrame {
	var buf bytes.Buffer
	fr := http2.NewFramer(&buf, nil)
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: f.HeaderBlockFragment(),
		EndStream: f.StreamEnded(), EndHeaders: f.HeadersEnded()})
	g, _ := http2.NewFramer(nil, &buf).ReadFrame()
	return g.(*http2.HeadersFrame)
}

// send opens stream id with a GET of path and the given headers, the
// block split into HEADERS and CONTINUATION frames of at most 16 KiB.
func (c *h2Conn) send(id uint32, path string, headers [][2]string) {
	c.t.Helper()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range append([][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "api.example.test"}, {":path", path}}, headers...) {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	block := hb.Bytes()
	const frame = 16 << 10
	first := block[:min(frame, len(block))]
	err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndStream: true, EndHeaders: len(block) <= frame})
	for rest := block[len(first):]; err == nil && len(rest) > 0; {
		n := min(frame, len(rest))
		err = c.fr.WriteContinuation(id, n == len(rest), rest[:n])
		rest = rest[n:]
	}
	if err != nil {
		c.t.Fatal(err)
	}
}

// answer reads stream id's answer: its :status and body. A GOAWAY or the
// connection's end fails the test.
func (c *h2Conn) answer(id uint32) (status, body string) {
	c.t.Helper()
	for f := range c.frames {
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			c.t.Fatalf("GOAWAY %v (%s): the server closed the connection", f.ErrCode, f.DebugData())
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				c.t.Fatalf("stream %d reset: %v", id, f.ErrCode)
			}
		case *http2.HeadersFrame:
			if f.StreamID != id {
				continue
			}
			fields, err := c.dec.DecodeFull(f.HeaderBlockFragment())
			if err != nil {
				c.t.Fatal(err)
			}
			for _, hf := range fields {
				if hf.Name == ":status" {
					status = hf.Value
				}
			}
			if f.StreamEnded() {
				return status, body
			}
		case *dataCopy:
			if f.stream != id {
				continue
			}
			body += string(f.data)
			if f.end {
				return status, body
			}
		}
	}
	c.t.Fatalf("the connection ended before stream %d's answer", id)
	return "", ""
}

func newEdgeMetrics(t *testing.T) *metrics.Edge {
	t.Helper()
	m, err := metrics.NewEdge(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// waitFor polls cond for up to 5 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// apiCertificates returns the certificates of one leaf for
// api.example.test and the new certificate authority that issued it, whose
// pool a client trusts.
func apiCertificates(t *testing.T) (*edge.Certificates, *tlstest.CA) {
	t.Helper()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir)
	leaf := ca.Issue(dir, "api", []string{"api.example.test"}, tlstest.Options{})
	certs, err := edge.LoadCertificates([]config.Certificate{{CertFile: leaf.CertFile, KeyFile: leaf.KeyFile}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return certs, ca
}

// TestNetHTTPRefusalsPlain pins the refusals net/http answers itself,
// before exgate sees the request, in plain text rather than the one JSON
// shape, as docs/architecture.md ("Errors") lists them: should exgate
// come to answer one, the list must lose it.
func TestNetHTTPRefusalsPlain(t *testing.T) {
	e := startEnv(t, nil)
	for _, tc := range []struct {
		name, request string
		status        int
	}{
		{"unparseable request line", "GET /api/v1/mkt/markets/ HTTP/1.1 x\r\nHost: x\r\n\r\n", http.StatusBadRequest},
		{"no Host", "GET /api/v1/mkt/markets/ HTTP/1.1\r\n\r\n", http.StatusBadRequest},
		{"a transfer coding other than chunked", "POST /api/v1/usr/authenticate/ HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", http.StatusNotImplemented},
		{"another HTTP version", "GET /api/v1/mkt/markets/ HTTP/3.0\r\nHost: x\r\n\r\n", http.StatusHTTPVersionNotSupported},
		{"an Expect other than 100-continue", "GET /api/v1/mkt/markets/ HTTP/1.1\r\nHost: x\r\nExpect: foo\r\n\r\n", http.StatusExpectationFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", e.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.WriteString(c, tc.request); err != nil {
				t.Fatal(err)
			}
			res, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tc.status || strings.Contains(string(b), `"code"`) || strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
				t.Fatalf("%s %q %q, want net/http's plain %d", res.Status, res.Header.Get("Content-Type"), b, tc.status)
			}
			if e.backend.count() != 0 {
				t.Fatal("the request reached the backend")
			}
		})
	}
}
