package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/pires/go-proxyproto"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/edge"
	"github.com/exgate/exgate/metrics"
)

// edgeEnv is a gateway behind the PROXY protocol listener, on a real
// loopback socket, in front of a recording backend.
type edgeEnv struct {
	addr    string
	backend *backend
	metrics *metrics.Edge
}

// startEdge serves a gateway configured by mut on a PROXY protocol
// listener bound to 127.0.0.1.
func startEdge(t *testing.T, mut func(*config.Config)) *edgeEnv {
	t.Helper()
	be := &backend{}
	bs := httptest.NewServer(be)
	t.Cleanup(bs.Close)
	cfg := config.Default()
	cfg.Upstream.URL = config.MustURL(bs.URL)
	mut(cfg)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	gw, err := newGateway(cfg, Options{Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	m := newEdgeMetrics(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := edge.NewServer(cfg, gw, zap.NewNop(), m)
	go func() {
		// As cmd/exgate listens: the connection share under the PROXY protocol.
		shared := edge.ShareConnections(ln, cfg, m)
		_ = edge.ServeTraffic(srv, edge.ProxyProtocolListener(shared, cfg.Server.ProxyProtocol, cfg.Server.ReadHeaderTimeout, m), nil)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		gw.CloseIdleConnections()
	})
	return &edgeEnv{addr: ln.Addr().String(), backend: be, metrics: m}
}

// dialFrom connects to addr from the loopback address from (127.0.0.x).
func dialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// proxyHeader returns a PROXY protocol header of version 1 or 2 carrying
// the client address src.
func proxyHeader(t *testing.T, version byte, src string) []byte {
	t.Helper()
	ap := netip.MustParseAddrPort(src)
	dst := netip.MustParseAddrPort("192.0.2.1:443")
	if ap.Addr().Is6() {
		dst = netip.MustParseAddrPort("[2001:db8::1]:443")
	}
	h := proxyproto.HeaderProxyFromAddrs(version, net.TCPAddrFromAddrPort(ap), net.TCPAddrFromAddrPort(dst))
	b, err := h.Format()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// roundTrip writes prefix and a GET request with extra header lines on c
// and reads the answer; an error means the connection was closed.
func roundTrip(c net.Conn, br *bufio.Reader, prefix []byte, extra string) (*http.Response, error) {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	req := append(append([]byte{}, prefix...), "GET /api/v1/anything/ HTTP/1.1\r\nHost: api.example.test\r\n"+extra+"\r\n"...)
	if _, err := c.Write(req); err != nil {
		return nil, err
	}
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res, nil
}

// TestProxyProtocolPeers checks who may send a PROXY header, under each
// policy, and what the backend then learns of the client.
func TestProxyProtocolPeers(t *testing.T) {
	const lb, direct = "127.0.0.2", "127.0.0.1"
	for _, tc := range []struct {
		name           string
		policy         string
		from           string
		header         []byte
		xff            string // X-Forwarded-For the client sends
		trustedProxies []string
		wantClosed     bool
		wantRefusal    metrics.ProxyRefusal
		wantXFF        string // X-Forwarded-For the backend gets
		wantRealIP     string
	}{
		{name: "balancer v1", policy: config.ProxyRequired, from: lb, header: proxyHeader(t, 1, "203.0.113.7:51000"),
			wantXFF: "203.0.113.7", wantRealIP: "203.0.113.7"},
		{name: "balancer v2 IPv6", policy: config.ProxyRequired, from: lb, header: proxyHeader(t, 2, "[2001:db8::7]:51000"),
			wantXFF: "2001:db8::7", wantRealIP: "2001:db8::7"},
		{name: "balancer without header, required", policy: config.ProxyRequired, from: lb,
			wantClosed: true, wantRefusal: metrics.ProxyMissing},
		{name: "balancer without header, optional", policy: config.ProxyOptional, from: lb,
			wantXFF: lb, wantRealIP: lb},
		{name: "balancer v2, optional", policy: config.ProxyOptional, from: lb, header: proxyHeader(t, 2, "203.0.113.8:1"),
			wantXFF: "203.0.113.8", wantRealIP: "203.0.113.8"},
		{name: "forged header from another peer", policy: config.ProxyRequired, from: direct, header: proxyHeader(t, 1, "203.0.113.9:1"),
			wantClosed: true, wantRefusal: metrics.ProxyUntrusted},
		{name: "forged v2 header from another peer, optional", policy: config.ProxyOptional, from: direct, header: proxyHeader(t, 2, "203.0.113.9:1"),
			wantClosed: true, wantRefusal: metrics.ProxyUntrusted},
		{name: "another peer without header", policy: config.ProxyRequired, from: direct,
			wantXFF: direct, wantRealIP: direct},
		{name: "malformed header from the balancer", policy: config.ProxyRequired, from: lb, header: []byte("PROXY TCP4 not-an-address 192.0.2.1 1 443\r\n"),
			wantClosed: true, wantRefusal: metrics.ProxyInvalid},
		{name: "carried address is a trusted proxy", policy: config.ProxyRequired, from: lb, header: proxyHeader(t, 1, "10.1.1.1:1"),
			xff: "X-Forwarded-For: 198.51.100.9\r\n", trustedProxies: []string{"10.0.0.0/8"},
			wantXFF: "198.51.100.9, 10.1.1.1", wantRealIP: "198.51.100.9"},
		{name: "carried address is not a trusted proxy", policy: config.ProxyRequired, from: lb, header: proxyHeader(t, 1, "203.0.113.7:1"),
			xff: "X-Forwarded-For: 6.6.6.6\r\n", trustedProxies: []string{"10.0.0.0/8"},
			wantXFF: "203.0.113.7", wantRealIP: "203.0.113.7"},
		{name: "the balancer itself is no trusted proxy", policy: config.ProxyOptional, from: lb,
			xff: "X-Forwarded-For: 6.6.6.6\r\n", trustedProxies: []string{"10.0.0.0/8"},
			wantXFF: lb, wantRealIP: lb},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := startEdge(t, func(c *config.Config) {
				c.Server.ProxyProtocol = config.ProxyProtocol{TrustedPeers: prefixes(t, lb), Policy: tc.policy}
				c.ClientIP.TrustedProxies = prefixes(t, tc.trustedProxies...)
			})
			c := dialFrom(t, tc.from, e.addr)
			res, err := roundTrip(c, bufio.NewReader(c), tc.header, tc.xff)
			if tc.wantClosed {
				if err == nil {
					t.Fatalf("answered %s; want the connection closed", res.Status)
				}
				if n := e.backend.count(); n != 0 {
					t.Fatalf("backend got %d requests", n)
				}
				if got := testutil.ToFloat64(e.metrics.ProxyRefusedCounter(tc.wantRefusal)); got != 1 {
					t.Fatalf("%s refusals counted %v, want 1", tc.wantRefusal, got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.StatusCode != http.StatusOK {
				t.Fatalf("status %s", res.Status)
			}
			h := e.backend.last(t).Header
			if got := h.Get("X-Forwarded-For"); got != tc.wantXFF {
				t.Errorf("X-Forwarded-For %q, want %q", got, tc.wantXFF)
			}
			if got := h.Get("X-Real-Ip"); got != tc.wantRealIP {
				t.Errorf("X-Real-Ip %q, want %q", got, tc.wantRealIP)
			}
		})
	}
}

// prefixes parses addresses and CIDR prefixes.
func prefixes(t *testing.T, ss ...string) []config.Prefix {
	t.Helper()
	var out []config.Prefix
	for _, s := range ss {
		var p config.Prefix
		if err := p.UnmarshalText([]byte(s)); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// TestProxyProtocolHeaderDeadline checks both ways the header deadline
// has gone wrong in the library's history: a balancer connection that
// sends nothing is closed after server.read_header_timeout without
// holding up other connections, and a connection whose header arrived is
// not cut by that deadline later (keep-alive past it works).
func TestProxyProtocolHeaderDeadline(t *testing.T) {
	const lb = "127.0.0.2"
	edge := func(t *testing.T, headerTimeout time.Duration) *edgeEnv {
		return startEdge(t, func(c *config.Config) {
			c.Server.ProxyProtocol = config.ProxyProtocol{TrustedPeers: prefixes(t, lb), Policy: config.ProxyRequired}
			c.Server.ReadHeaderTimeout = headerTimeout
		})
	}

	t.Run("silent balancer connection is closed", func(t *testing.T) {
		// A deadline far beyond what serving one request takes on a busy
		// machine: the other connection is served while the silent one
		// is still open.
		const headerTimeout = 3 * time.Second
		e := edge(t, headerTimeout)
		silent := dialFrom(t, lb, e.addr)
		start := time.Now()
		c := dialFrom(t, lb, e.addr)
		if res, err := roundTrip(c, bufio.NewReader(c), proxyHeader(t, 2, "203.0.113.7:1"), ""); err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("second connection: %v %v", res, err)
		}
		_ = silent.SetReadDeadline(time.Now().Add(time.Millisecond))
		var ne net.Error
		if _, err := silent.Read(make([]byte, 1)); !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("the silent connection was closed (%v) before the second was served: the second waited behind it", err)
		}
		_ = silent.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, err := silent.Read(make([]byte, 1))
		if err == nil || errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("silent connection not closed by the server: %v", err)
		}
		if d := time.Since(start); d < headerTimeout/2 {
			t.Fatalf("silent connection closed after %v, before half of read_header_timeout (%v)", d, headerTimeout)
		}
	})

	t.Run("keep-alive past the header deadline", func(t *testing.T) {
		const headerTimeout = 300 * time.Millisecond
		e := edge(t, headerTimeout)
		for _, header := range [][]byte{proxyHeader(t, 1, "203.0.113.7:1"), proxyHeader(t, 2, "203.0.113.7:1")} {
			c := dialFrom(t, lb, e.addr)
			br := bufio.NewReader(c)
			for i := range 3 {
				var prefix []byte
				if i == 0 {
					prefix = header
				}
				res, err := roundTrip(c, br, prefix, "")
				if err != nil || res.StatusCode != http.StatusOK {
					t.Fatalf("request %d on one connection: %v %v", i, res, err)
				}
				time.Sleep(2 * headerTimeout)
			}
		}
	})
}

// TestConnectionSharesBehindProxyProtocol: behind an L4 balancer that
// sends the PROXY protocol, each balancer connection carries one client,
// the one its header names, and is counted in that client's share of
// connections as a direct connection is (docs/pools.md): with
// server.max_connections 8, one client holds 4 connections through the
// balancer and its fifth is answered 503 too_many_connections and closed,
// while another client the balancer carries is served. A header naming a
// trusted proxy (an L7 proxy behind the balancer) is not counted, nor is
// a balancer connection without a header (policy optional): its client
// is not known.
func TestConnectionSharesBehindProxyProtocol(t *testing.T) {
	const lb = "127.0.0.2"
	for _, tc := range []struct {
		name   string
		held   string // the client the first 4 connections carry ("": no header)
		last   string // the client the fifth carries ("": no header)
		status int
	}{
		{name: "one client, a fifth connection", held: "203.0.113.7:1", last: "203.0.113.7:2", status: http.StatusServiceUnavailable},
		{name: "one client in an IPv6 /64", held: "[2001:db8::1]:1", last: "[2001:db8::2]:2", status: http.StatusServiceUnavailable},
		{name: "another client", held: "203.0.113.7:1", last: "198.51.100.9:1", status: http.StatusOK},
		{name: "a trusted proxy behind the balancer", held: "10.1.1.1:1", last: "10.1.1.1:2", status: http.StatusOK},
		{name: "the balancer itself, without headers", last: "", status: http.StatusOK},
		{name: "the balancer itself, then a client", last: "203.0.113.7:1", status: http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := startEdge(t, func(c *config.Config) {
				c.Server.MaxConnections = 8
				c.Server.ProxyProtocol = config.ProxyProtocol{TrustedPeers: prefixes(t, lb), Policy: config.ProxyOptional}
				c.ClientIP.TrustedProxies = prefixes(t, "10.0.0.0/8")
			})
			header := func(client string) []byte {
				if client == "" {
					return nil
				}
				return proxyHeader(t, 2, client)
			}
			for i := range 4 { // half of 8: each served, and kept open
				c := dialFrom(t, lb, e.addr)
				res, err := roundTrip(c, bufio.NewReader(c), header(tc.held), "")
				if err != nil || res.StatusCode != http.StatusOK {
					t.Fatalf("connection %d: %v %v", i, res, err)
				}
			}
			c := dialFrom(t, lb, e.addr)
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Write(append(header(tc.last), "GET /api/v1/anything/ HTTP/1.1\r\nHost: api.example.test\r\n\r\n"...)); err != nil {
				t.Fatal(err)
			}
			res, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.status == http.StatusOK {
				res.Body.Close()
				if res.StatusCode != http.StatusOK {
					t.Fatalf("fifth connection: %s, want 200", res.Status)
				}
				return
			}
			assertError(t, res, tc.status, "too_many_connections")
			if !res.Close {
				t.Error("too_many_connections: the connection is kept open")
			}
		})
	}
}
