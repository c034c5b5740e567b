package proxy

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
)

// TestCancelHeadroomHasAConnectionOverALPNFallback: an https instance
// offered HTTP/2 (upstream.tls.http2, the default) that answers in
// HTTP/1.1 (ALPN falls back: a backend behind a TLS terminator without
// h2) carries one request on each connection, as an http one does; its
// limit must stay within max_conns_per_host, the cancels' headroom
// included, or reads holding the connections leave a cancel that took
// its headroom's slot waiting in the connection pool's queue until its
// route times out (TestCancelHeadroomHasAConnection over http). The
// limit follows the protocol the instance answers in.
func TestCancelHeadroomHasAConnectionOverALPNFallback(t *testing.T) {
	const reads, conns = 4, 2
	for _, tc := range []struct {
		name string
		h2   bool // the instance accepts h2
	}{
		{"HTTP/1.1 through ALPN fallback", false},
		{"HTTP/2", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			var arrived atomic.Int64
			be := &backend{handler: func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet {
					arrived.Add(1)
					<-release
				}
				w.WriteHeader(http.StatusOK)
			}}
			bs := httptest.NewUnstartedServer(be)
			bs.EnableHTTP2 = tc.h2
			bs.StartTLS()
			t.Cleanup(bs.Close)
			tr := bs.Client().Transport.(*http.Transport).Clone() // trusts bs's certificate
			tr.ForceAttemptHTTP2, tr.MaxConnsPerHost = true, conns
			tr.TLSClientConfig.NextProtos = []string{"h2", "http/1.1"} // offered h2, as upstream.tls.http2 offers it
			t.Cleanup(tr.CloseIdleConnections)
			cfg := config.Default()
			cfg.Upstream.URL, cfg.Upstream.MaxConnsPerHost = config.MustURL(bs.URL), conns
			cfg.Overload.FixedLimit, cfg.Overload.MaxWait.MarketData, cfg.Overload.ShedDelay = reads, 0, 0
			cfg.Route("cancel_order").Timeout = 2 * time.Second // bounds the wait in the Transport's queue
			e := serve(t, cfg, be, Options{Transport: tr})
			// A first answer tells the protocol, as traffic does before a surge.
			if res := do(t, "DELETE", e.url+"/api/v1/odr/orders/6/", nil, "Authorization", "Bearer t0ken"); res.StatusCode != http.StatusOK {
				t.Fatalf("first cancel answered %d", res.StatusCode)
			} else {
				res.Body.Close()
			}
			var wg sync.WaitGroup
			var shed atomic.Int64
			for range reads {
				wg.Go(func() {
					res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil)
					res.Body.Close()
					if res.StatusCode == http.StatusServiceUnavailable {
						shed.Add(1)
					}
				})
			}
			ctl := e.gw.controller()
			for { // every read holds a slot or was shed, and the backend holds those it has
				held := int64(ctl.InFlight())
				if held+shed.Load() == reads && (tc.h2 && arrived.Load() == held || !tc.h2 && arrived.Load() == min(held, conns)) {
					break
				}
				time.Sleep(time.Millisecond)
			}
			res := do(t, "DELETE", e.url+"/api/v1/odr/orders/7/", nil, "Authorization", "Bearer t0ken")
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				t.Errorf("cancel answered %d with %d reads holding slots over %d connections, want 200", res.StatusCode, ctl.InFlight(), conns)
			}
			if got := ctl.Limit(); !tc.h2 && got+(got+7)/8 > conns || tc.h2 && got != reads {
				t.Errorf("limit %d over %d connections (h2: %v)", got, conns, tc.h2)
			}
			close(release)
			wg.Wait()
		})
	}
}
