package proxy

import (
	"net/http"
	"testing"

	"github.com/exgate/exgate/config"
)

// TestClientAddressHeadersFromClientsDropped: the headers other than
// X-Forwarded-For and X-Real-IP in which backends and their libraries look
// for the client's address (chi's RealIP and httprate's KeyByRealIP read
// True-Client-IP before X-Real-IP, npm's request-ip X-Client-IP before
// X-Forwarded-For, Rails and django-ipware Client-IP, gin's trusted
// platform CF-Connecting-IP) reach the backend from a trusted proxy only.
// From anyone else the backend would take the address the client wrote
// for the one exgate counted the client as, in its own limits and
// allow-lists.
func TestClientAddressHeadersFromClientsDropped(t *testing.T) {
	names := []string{"True-Client-IP", "X-Client-IP", "Client-IP", "CF-Connecting-IP", "CF-Connecting-IPv6",
		"CF-Pseudo-IPv4", "DO-Connecting-IP", "Fastly-Client-IP", "X-Cluster-Client-IP", "X-Forwarded",
		"Forwarded-For", "X-Original-Forwarded-For", "X-Appengine-User-IP", "X-Envoy-External-Address",
		"X-Originating-IP", "X-Remote-IP", "X-Remote-Addr", "x-client-ip"}
	for _, tc := range []struct {
		name    string
		trusted bool
	}{{"untrusted client", false}, {"trusted proxy", true}} {
		e := startEnv(t, func(c *config.Config) {
			if tc.trusted {
				c.ClientIP.TrustedProxies = []config.Prefix{{Prefix: mustPrefix("127.0.0.0/8")}}
			}
		})
		for _, name := range names {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				req, _ := http.NewRequest("GET", e.url+"/api/v1/mkt/markets/", nil)
				req.Header[name] = []string{"203.0.113.9"} // as written, not canonicalised by Go
				req.Header.Set("X-Note", "kept")           // not an address: always forwarded
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				got := e.backend.last(t).Header
				want := ""
				if tc.trusted {
					want = "203.0.113.9"
				}
				if g := got.Get(name); g != want {
					t.Errorf("%s: backend got %q, want %q", name, g, want)
				}
				if got.Get("X-Note") != "kept" || got.Get("X-Real-Ip") != "127.0.0.1" || got.Get("X-Forwarded-For") != "127.0.0.1" {
					t.Errorf("the other headers: %v", got)
				}
			})
		}
	}
}
