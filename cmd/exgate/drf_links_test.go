package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/exgate/exgate/config"
)

// TestDRFLinksNameTheClientsHost puts exgate in front of a Django REST
// framework listing paged by PageNumberPagination, whose next and
// previous links are absolute URLs Django builds from the Host it was
// sent (request.build_absolute_uri; DRF's HyperlinkedModelSerializer
// urls and the Location of its generic create views likewise). On main
// exgate sent the instance's address as Host, so every client was handed
// links to the backend's internal address, which it cannot reach (or
// reaches past exgate's checks): now the backend gets the client's Host
// when it is one of the API's names (upstream.forward_hosts), and the
// links name the address the client used. Any other Host, and every one
// without forward_hosts, sends the instance's address, as before.
func TestDRFLinksNameTheClientsHost(t *testing.T) {
	drf := startDRF(t)
	token := drf.tokens[0]
	next, _ := drfHistoryLinks(t, drf.url, "", token)
	if !strings.HasPrefix(next, drf.url+"/api/v1/odr/history/") {
		t.Fatalf("sent directly, DRF's next link is %q, not one of its own address: the test proves nothing", next)
	}
	api := []string{"127.0.0.1", "api.exchange.example"}
	tests := []struct {
		name  string
		hosts []string // upstream.forward_hosts
		host  string   // the client's Host; "" : the gateway's address
		want  string   // the links' start; "" : the gateway's URL
	}{
		{"the gateway's address", api, "", ""},
		{"the API's name", api, "api.exchange.example", "http://api.exchange.example"},
		{"the API's name and port", api, "api.exchange.example:8443", "http://api.exchange.example:8443"},
		{"a name not the API's", api, "evil.example", drf.url},
		{"no forward_hosts", nil, "api.exchange.example", drf.url},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gw, _ := drfGateway(t, drf, func(c *config.Config) { c.Upstream.ForwardHosts = tt.hosts })
			want := tt.want
			if want == "" {
				want = gw
			}
			next, prev := drfHistoryLinks(t, gw, tt.host, token)
			if next != want+"/api/v1/odr/history/?page=3" || prev != want+"/api/v1/odr/history/" {
				t.Errorf("DRF's links through exgate: next %q, previous %q; want them under %q", next, prev, want)
			}
		})
	}
}

// drfHistoryLinks reads the second page of the DRF backend's paged
// history listing at base, sent with Host host ("" : base's) and token,
// and returns its next and previous links.
func drfHistoryLinks(t *testing.T, base, host, token string) (next, prev string) {
	t.Helper()
	req, err := http.NewRequest("GET", base+"/api/v1/odr/history/?page=2", nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var page struct {
		Next, Previous string
		Results        []struct{ ID int }
	}
	if res.StatusCode != http.StatusOK || json.Unmarshal(b, &page) != nil || len(page.Results) != 2 {
		t.Fatalf("the history listing: %d %s", res.StatusCode, b)
	}
	return page.Next, page.Previous
}
