package proxy

import (
	"crypto/tls"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/idempotency"
	"github.com/exgate/exgate/ratelimit"
)

// switchedTransport sends through trusting once trust is set, else
// through refusing.
type switchedTransport struct {
	trust              atomic.Bool
	refusing, trusting http.RoundTripper
}

func (s *switchedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if s.trust.Load() {
		return s.trusting.RoundTrip(r)
	}
	return s.refusing.RoundTrip(r)
}

// TestOrderBackendCertificateRefused: an order whose backend's
// certificate fails exgate's verification (an expired certificate, an
// authority exgate does not trust, a rotation half done) was never sent:
// it is answered 503 upstream_unavailable and its identifier released,
// so that the retry with the same identifier is placed once the backend
// is trusted. Before, the handshake's failure read as one after sending:
// 502 with the outcome unknown, and every retry 409 outcome_unknown for
// the retention, for an order never placed.
func TestOrderBackendCertificateRefused(t *testing.T) {
	var calls atomic.Int64
	backend := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		placed(w, r)
	}))
	backend.Config.ErrorLog = log.New(io.Discard, "", 0) // its handshakes refused by exgate
	t.Cleanup(backend.Close)
	tr := &switchedTransport{
		refusing: &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12}}, // the system's authorities
		trusting: backend.Client().Transport,
	}
	t.Cleanup(func() {
		tr.refusing.(*http.Transport).CloseIdleConnections()
	})
	e := startOrdersWith(t, placed, func(c *config.Config) {
		c.Upstream.URL = config.MustURL(backend.URL)
	}, ratelimit.NewMemory(ratelimit.MemoryOptions{}), nil, func(o idempotency.Options) idempotency.Store { return idempotency.NewMemory(o) },
		func(o *Options) { o.Transport = tr })
	body := `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.5","identifier":"tls-refused"}`
	for _, step := range []struct {
		name   string
		trust  bool
		status int
		code   string
	}{
		{"the backend's certificate refused", false, http.StatusServiceUnavailable, "upstream_unavailable"},
		{"its retry, still refused", false, http.StatusServiceUnavailable, "upstream_unavailable"},
		{"its retry, the backend trusted", true, http.StatusCreated, ""},
	} {
		tr.trust.Store(step.trust)
		res := postOrder(t, e, body)
		if step.code != "" {
			assertError(t, res, step.status, step.code)
			continue
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != step.status || res.Header.Get(idempotency.ReplayedHeader) != "" {
			t.Fatalf("%s: %d %s, want %d, placed", step.name, res.StatusCode, b, step.status)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the backend was sent %d orders, want 1", n)
	}
}

// TestOrderNotSentBeforeConnection: an order whose round trip failed
// before net/http had a connection to send it on — the route's timeout
// during the backend's TLS handshake, a client certificate the backend
// refused in a TLS 1.2 handshake (its alert ends the handshake, before
// the client's Finished is answered and so before any application data)
// — was never sent: 503 upstream_unavailable, its identifier released,
// so that its retry is not refused 409. Before, both read as failures
// after sending (504, 502): the outcome unknown, and every retry 409
// outcome_unknown for the retention, for an order never placed. A client
// certificate refused in TLS 1.3 comes after the client's handshake has
// ended and the order was written: that outcome stays unknown.
func TestOrderNotSentBeforeConnection(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backend func(t *testing.T) (url string, tr http.RoundTripper)
		first   apiAnswer
		retry   apiAnswer
	}{
		{"route timeout in the TLS handshake", stalledHandshake,
			apiAnswer{http.StatusServiceUnavailable, "upstream_unavailable"}, apiAnswer{http.StatusServiceUnavailable, "upstream_unavailable"}},
		{"client certificate refused, TLS 1.2", refusingClientCert(tls.VersionTLS12),
			apiAnswer{http.StatusServiceUnavailable, "upstream_unavailable"}, apiAnswer{http.StatusServiceUnavailable, "upstream_unavailable"}},
		{"client certificate refused, TLS 1.3: sent", refusingClientCert(tls.VersionTLS13),
			apiAnswer{http.StatusBadGateway, "bad_gateway"}, apiAnswer{http.StatusConflict, "outcome_unknown"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, tr := tc.backend(t)
			e := startOrdersWith(t, placed, func(c *config.Config) {
				c.Upstream.URL = config.MustURL(url)
				c.Route("place_order").Timeout = 300 * time.Millisecond
			}, ratelimit.NewMemory(ratelimit.MemoryOptions{}), nil, func(o idempotency.Options) idempotency.Store { return idempotency.NewMemory(o) },
				func(o *Options) { o.Transport = tr })
			body := `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.5","identifier":"not-sent"}`
			assertError(t, postOrder(t, e, body), tc.first.status, tc.first.code)
			assertError(t, postOrder(t, e, body), tc.retry.status, tc.retry.code)
		})
	}
}

// apiAnswer is an error answer: its status and code.
type apiAnswer struct {
	status int
	code   string
}

// stalledHandshake is a backend that takes connections and never answers
// their TLS handshake, and a transport without a handshake timeout of its
// own: the route's timeout ends it.
func stalledHandshake(t *testing.T) (string, http.RoundTripper) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never read
			mu.Unlock()
		}
	}()
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		tr.CloseIdleConnections()
	})
	return "https://" + ln.Addr().String(), tr
}

// refusingClientCert returns a backend of TLS version v that requires a
// client certificate, and a transport that trusts it and has none.
func refusingClientCert(v uint16) func(t *testing.T) (string, http.RoundTripper) {
	return func(t *testing.T) (string, http.RoundTripper) {
		backend := httptest.NewUnstartedServer(http.HandlerFunc(placed))
		backend.TLS = &tls.Config{MinVersion: v, MaxVersion: v, ClientAuth: tls.RequireAnyClientCert}
		backend.Config.ErrorLog = log.New(io.Discard, "", 0)
		backend.StartTLS()
		t.Cleanup(backend.Close)
		tr := backend.Client().Transport.(*http.Transport).Clone()
		t.Cleanup(tr.CloseIdleConnections)
		return backend.URL, tr
	}
}
