package proxy

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/exgate/exgate/config"
)

// TestInstanceAddressNotAnswered: a backend that is sent the instance's
// address as Host (any Host not in upstream.forward_hosts, and every one
// by default) builds its absolute Location and Content-Location from it
// (Django's build_absolute_uri: the Location of DRF's generic create
// views, HyperlinkedModelSerializer's urls), and on main the client got
// them as they came: the backend's internal address, which it cannot
// reach, or reaches past exgate. Such a field now names the path below
// the instance's base URL, as NGINX's proxy_redirect default does (a
// relative reference, RFC 9110 §10.2.2); any other value passes as sent,
// and so does one whose path below the instance starts with two slashes:
// as a relative reference it would name another host.
func TestInstanceAddressNotAnswered(t *testing.T) {
	for _, base := range []string{"", "/prefix"} {
		t.Run("base path "+base, func(t *testing.T) {
			var inst string // the instance's base URL, as the backend saw it
			be := &backend{handler: func(w http.ResponseWriter, r *http.Request) {
				loc := r.URL.Query().Get("loc")
				w.Header().Set("Location", strings.ReplaceAll(loc, "INSTANCE", inst))
				w.Header().Set("Content-Location", strings.ReplaceAll(loc, "INSTANCE", inst))
				w.WriteHeader(http.StatusCreated)
			}}
			bs := httptest.NewServer(be)
			t.Cleanup(bs.Close)
			inst = bs.URL + base
			cfg := config.Default()
			cfg.Upstream.URL = config.MustURL(inst + "/")
			e := serve(t, cfg, be, Options{})
			upper := "HTTP://" + strings.ToUpper(strings.TrimPrefix(bs.URL, "http://")) + base
			tests := []struct{ name, loc, want string }{
				{"a path below the instance", "INSTANCE/api/v1/odr/orders/7/", "/api/v1/odr/orders/7/"},
				{"with a query", "INSTANCE/api/v1/odr/history/?page=2", "/api/v1/odr/history/?page=2"},
				{"the instance itself", "INSTANCE", "/"},
				{"the instance and a query", "INSTANCE?page=2", "/?page=2"},
				{"another case", upper + "/api/v1/x/", "/api/v1/x/"},
				{"a relative reference", "/api/v1/odr/orders/7/", "/api/v1/odr/orders/7/"},
				{"another host", "https://docs.exchange.example/orders/7", "https://docs.exchange.example/orders/7"},
				{"another port of the instance's host", "http://127.0.0.1:1/x", "http://127.0.0.1:1/x"},
				{"a longer port or base path", "INSTANCE0/x", "INSTANCE0/x"},
				// A path of two slashes (or a slash and a backslash, which
				// browsers read alike) below the instance would become a
				// reference to another host, evil.example: kept as sent.
				{"a path that starts with two slashes", "INSTANCE//evil.example/x", "INSTANCE//evil.example/x"},
				{"a path that starts with a slash and a backslash", "INSTANCE/\\evil.example/x", "INSTANCE/\\evil.example/x"},
			}
			if base != "" {
				tests = append(tests, struct{ name, loc, want string }{"outside the base path", bs.URL + "/other/x", bs.URL + "/other/x"},
					struct{ name, loc, want string }{"a longer base path", "INSTANCE2/x", "INSTANCE2/x"})
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					res := do(t, "GET", e.url+"/api/v1/mkt/markets/?loc="+url.QueryEscape(tt.loc), nil)
					res.Body.Close()
					want := strings.ReplaceAll(tt.want, "INSTANCE", inst)
					if got := res.Header.Get("Location"); res.StatusCode != http.StatusCreated || got != want {
						t.Errorf("%d Location %q, want %q", res.StatusCode, got, want)
					}
					if got := res.Header.Get("Content-Location"); got != want {
						t.Errorf("Content-Location %q, want %q", got, want)
					}
				})
			}
		})
	}
}
