//go:build linux

package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/unreachable"
)

// TestBackendConnectsTimeOut sends more requests than a capped pool
// (upstream.max_conns_per_host) has connections to a backend whose
// connects time out, so that requests queue for a connection past the
// route timeout: every client gets a JSON 5xx (the connects never
// complete, so only exgate's deadlines can answer them; the client's 30s
// timeout only bounds a hang), and exgate keeps serving. The overload
// limit is off: on, it is kept within the two connections and sheds the
// requests past them instead of letting them queue.
func TestBackendConnectsTimeOut(t *testing.T) {
	addr := unreachable.Addr(t)
	cfg := config.Default()
	cfg.Upstream.URL = config.MustURL("http://" + addr)
	cfg.Upstream.DialTimeout = 200 * time.Millisecond
	cfg.Upstream.Timeout = 400 * time.Millisecond
	cfg.Upstream.MaxConnsPerHost = 2
	cfg.Overload.Enabled = false
	for i := range cfg.Routes {
		cfg.Routes[i].Timeout = 0 // the upstream default
	}
	e := serve(t, cfg, &backend{}, Options{})

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}, Timeout: 30 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	var wg sync.WaitGroup
	for range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2 {
				res, err := client.Get(e.url + "/api/v1/mkt/markets/")
				if err != nil {
					t.Error(err)
					return
				}
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				var eb errorBody
				if res.StatusCode < 500 || json.Unmarshal(body, &eb) != nil || eb.Code == "" ||
					res.Header.Get("Content-Type") != "application/json" {
					t.Errorf("status %d %s, want a JSON 5xx", res.StatusCode, body)
				}
				if eb.Code != "gateway_timeout" && eb.Code != "bad_gateway" && eb.Code != "upstream_unavailable" {
					t.Errorf("code %q", eb.Code)
				}
			}
		}()
	}
	wg.Wait()
	// Still serving: a request exgate answers itself.
	assertError(t, do(t, "GET", e.url+"/api/v1/%2F", nil), http.StatusBadRequest, "invalid_path")
}
