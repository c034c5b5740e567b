package proxy

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/exgate/exgate/config"
)

// TestHTTP2InvalidAuthorityRefused: net/http's HTTP/1 server refuses a
// Host that is not one (400, before exgate), its HTTP/2 server takes any
// :authority whose bytes a field value may hold. Such a one went on as
// the backend's X-Forwarded-Host and Host with
// upstream.forward_hosts: "*" (the Transport then sends an HTTP/1 backend
// an empty Host in its place, and refuses to send one to an HTTP/2
// backend, "invalid Host header"). It is refused as HTTP/1's is, 400
// invalid_header, before any route or limit; a valid one is forwarded as
// it came.
func TestHTTP2InvalidAuthorityRefused(t *testing.T) {
	got := make(chan string, 1)
	addr, tlsCfg := gatewayTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("X-Forwarded-Host")
		w.WriteHeader(http.StatusNoContent)
	}), func(c *config.Config) { c.Upstream.ForwardHosts = []string{"*"} })
	c := dialH2(t, addr, tlsCfg)
	tests := []struct {
		authority string
		status    string // "400": invalid_header, unforwarded
	}{
		{"api.example.test", "204"},
		{"api.example.test:8443", "204"},
		{"[2001:db8::1]:443", "204"},
		{"a b", "400"},
		{`api"example`, "400"},
		{"api.example.test/x", "400"},
		{"api\texample", "400"},
		{"api.example.test\\", "400"},
	}
	for i, tt := range tests {
		t.Run(tt.authority, func(t *testing.T) {
			var hb bytes.Buffer
			enc := hpack.NewEncoder(&hb)
			for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", tt.authority}, {":path", "/api/v1/mkt/markets/"}} {
				_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
			}
			id := uint32(2*i + 1)
			if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
				t.Fatal(err)
			}
			status, body := c.answer(id)
			var host string
			select {
			case host = <-got:
			default:
			}
			switch {
			case status != tt.status:
				t.Errorf("%s %s (the backend got X-Forwarded-Host %q), want %s", status, body, host, tt.status)
			case status == "400" && (!strings.Contains(body, `"code":"invalid_header"`) || host != ""):
				t.Errorf("400 %s, the backend got X-Forwarded-Host %q: want invalid_header, unforwarded", body, host)
			case status == "204" && host != tt.authority:
				t.Errorf("the backend got X-Forwarded-Host %q, want %q", host, tt.authority)
			}
		})
	}
}
