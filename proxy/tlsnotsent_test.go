package proxy

import (
	"crypto/tls"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

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
