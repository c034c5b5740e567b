package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/idempotency"
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

// TestReplayedLocationNotTheInstance: an order's answer is kept for its
// retries with its Location and Content-Location as its client got
// them, below the instance that answered (unexposeInstance before
// recordResponse keeps it), so a retry's replay never carries the
// instance's address either; the backend's Host is the instance's (no
// upstream.forward_hosts), from which it builds its absolute links.
func TestReplayedLocationNotTheInstance(t *testing.T) {
	for _, m := range claimModes(t) {
		t.Run(m.name, func(t *testing.T) {
			var orders atomic.Int64
			e := startOrdersWith(t, func(w http.ResponseWriter, r *http.Request) {
				n := strconv.FormatInt(orders.Add(1), 10)
				w.Header().Set("Location", "http://"+r.Host+"/api/v1/odr/orders/"+n+"/")
				w.Header().Set("Content-Location", "http://"+r.Host+"/api/v1/odr/orders/"+n+"/?v=1")
				placed(w, r)
			}, nil, m.lim, nil, m.idem)
			for i, name := range []string{"order", "retry"} {
				res := postOrder(t, e, bulkOrder(0, "loc"+m.name))
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				replayed := res.Header.Get(idempotency.ReplayedHeader) == "true"
				if res.StatusCode != http.StatusCreated || replayed != (i == 1) {
					t.Fatalf("%s: %d replayed %v", name, res.StatusCode, replayed)
				}
				if got := res.Header.Get("Location"); got != "/api/v1/odr/orders/1/" {
					t.Errorf("%s's Location %q, want /api/v1/odr/orders/1/", name, got)
				}
				if got := res.Header.Get("Content-Location"); got != "/api/v1/odr/orders/1/?v=1" {
					t.Errorf("%s's Content-Location %q, want /api/v1/odr/orders/1/?v=1", name, got)
				}
			}
			if n := orders.Load(); n != 1 {
				t.Errorf("backend placed %d orders, want 1", n)
			}
		})
	}
}

// TestInstanceAddressNotInRefreshOrLink: a backend sent the instance's
// address as Host builds a Refresh's URL and a Link's targets (the next
// and last pages of a pagination in GitHub's style, Rails'
// api-pagination) from it as it builds a Location, and on main the
// client got both as they came: the instance's internal address. Each
// URL naming the instance now names the path below it, as in a Location
// (NGINX's proxy_redirect default rewrites Refresh too; a Link target's
// relative reference is resolved against the request's URL, RFC 8288
// §3.1); other URLs, parameters and quoted strings pass as sent.
func TestInstanceAddressNotInRefreshOrLink(t *testing.T) {
	var inst string // the instance's base URL, as the backend saw it
	be := &backend{handler: func(w http.ResponseWriter, r *http.Request) {
		for _, k := range []string{"Refresh", "Link"} {
			for _, v := range r.URL.Query()[k] {
				w.Header().Add(k, strings.ReplaceAll(v, "INSTANCE", inst))
			}
		}
		w.WriteHeader(http.StatusOK)
	}}
	bs := httptest.NewServer(be)
	t.Cleanup(bs.Close)
	inst = bs.URL + "/prefix"
	cfg := config.Default()
	cfg.Upstream.URL = config.MustURL(inst + "/")
	e := serve(t, cfg, be, Options{})
	tests := []struct {
		name, field string
		sent, want  []string
	}{
		{"refresh", "Refresh", []string{"5; url=INSTANCE/api/v1/odr/orders/7/"}, []string{"5; url=/api/v1/odr/orders/7/"}},
		{"refresh, another spelling", "Refresh", []string{"0;URL = 'INSTANCE/x?a=1'"}, []string{"0;URL = '/x?a=1'"}},
		{"refresh without url=", "Refresh", []string{"3, INSTANCE/x"}, []string{"3, /x"}},
		{"refresh to another host", "Refresh", []string{"5; url=https://docs.exchange.example/x"}, []string{"5; url=https://docs.exchange.example/x"}},
		{"refresh without a URL", "Refresh", []string{"30"}, []string{"30"}},
		{"refresh to two slashes below", "Refresh", []string{"1; url=INSTANCE//evil.example/x"}, []string{"1; url=INSTANCE//evil.example/x"}},
		{"pagination links", "Link", []string{`<INSTANCE/api/v1/odr/history/?page=2>; rel="next", <INSTANCE/api/v1/odr/history/?page=9>; rel="last"`},
			[]string{`</api/v1/odr/history/?page=2>; rel="next", </api/v1/odr/history/?page=9>; rel="last"`}},
		{"two Link fields, one another host's", "Link", []string{`<https://docs.exchange.example/api>; rel="help"`, `<INSTANCE/x>; rel="next"`},
			[]string{`<https://docs.exchange.example/api>; rel="help"`, `</x>; rel="next"`}},
		{"a quoted <", "Link", []string{`</a>; title="see <INSTANCE/y>", <INSTANCE/z>; rel="next"`}, []string{`</a>; title="see <INSTANCE/y>", </z>; rel="next"`}},
		{"a link outside the base path", "Link", []string{"<" + bs.URL + "/other/x>; rel=next"}, []string{"<" + bs.URL + "/other/x>; rel=next"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := url.Values{tt.field: tt.sent}
			res := do(t, "GET", e.url+"/api/v1/mkt/markets/?"+q.Encode(), nil)
			res.Body.Close()
			want := make([]string, len(tt.want))
			for i, w := range tt.want {
				want[i] = strings.ReplaceAll(w, "INSTANCE", inst)
			}
			if got := res.Header[tt.field]; res.StatusCode != http.StatusOK || strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("%d %s %q, want %q", res.StatusCode, tt.field, got, want)
			}
		})
	}
}
