package proxy

import (
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
)

// TestBackendRateLimitFields: on a route exgate limits, the client gets
// one set of rate-limit fields. In the legacy style the backend's
// X-RateLimit-* replace exgate's when they are whole and closer to
// denial, and are dropped otherwise, never appended; in the ietf style
// the backend's RateLimit entries follow exgate's in one list; on a route
// exgate does not limit, the backend's pass untouched.
func TestBackendRateLimitFields(t *testing.T) {
	const exgateLimit = 100 // the route's limit: 99 remain after the request
	for _, tc := range []struct {
		name, style, route string
		backend            []string // the backend's fields, name and value
		want               map[string][]string
	}{
		{"legacy, backend closer to denial", config.HeadersLegacy, "list_matches",
			[]string{"X-Ratelimit-Limit", "10", "X-Ratelimit-Remaining", "3", "X-Ratelimit-Reset", "7"},
			map[string][]string{"X-Ratelimit-Limit": {"10"}, "X-Ratelimit-Remaining": {"3"}, "X-Ratelimit-Reset": {"7"}}},
		{"legacy, exgate closer to denial", config.HeadersLegacy, "list_matches",
			[]string{"X-Ratelimit-Limit", "1000", "X-Ratelimit-Remaining", "500", "X-Ratelimit-Reset", "7"},
			map[string][]string{"X-Ratelimit-Limit": {"100"}, "X-Ratelimit-Remaining": {"99"}}},
		{"legacy, backend's not whole", config.HeadersLegacy, "list_matches",
			[]string{"X-Ratelimit-Limit", "10", "X-Ratelimit-Remaining", "-1", "X-Ratelimit-Reset", "7"},
			map[string][]string{"X-Ratelimit-Limit": {"100"}, "X-Ratelimit-Remaining": {"99"}}},
		{"legacy, backend's partial", config.HeadersLegacy, "list_matches",
			[]string{"X-Ratelimit-Remaining", "0"},
			map[string][]string{"X-Ratelimit-Limit": {"100"}, "X-Ratelimit-Remaining": {"99"}}},
		{"legacy, backend's sent twice", config.HeadersLegacy, "list_matches",
			[]string{"X-Ratelimit-Limit", "10", "X-Ratelimit-Remaining", "3", "X-Ratelimit-Remaining", "2", "X-Ratelimit-Reset", "7"},
			map[string][]string{"X-Ratelimit-Limit": {"100"}, "X-Ratelimit-Remaining": {"99"}}},
		{"ietf, backend's entries after exgate's", config.HeadersIETF, "list_matches",
			[]string{"Ratelimit", `"backend";r=3;t=7`, "X-Ratelimit-Remaining", "3"},
			map[string][]string{"Ratelimit": {`"address";r=99;t=36`, `"backend";r=3;t=7`}, "X-Ratelimit-Remaining": {"3"}}},
		{"legacy, a route exgate does not limit", config.HeadersLegacy, "tickers",
			[]string{"X-Ratelimit-Limit", "1000", "X-Ratelimit-Remaining", "500", "X-Ratelimit-Reset", "7"},
			map[string][]string{"X-Ratelimit-Limit": {"1000"}, "X-Ratelimit-Remaining": {"500"}, "X-Ratelimit-Reset": {"7"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := startLimited(t, nil, func(c *config.Config) {
				c.Limiter.Headers = tc.style
				c.Route("list_matches").Limits = []config.Limit{{Key: config.KeyAddress, Rate: config.Rate{N: exgateLimit, Period: time.Hour}}}
				c.Route("default").Limits = nil
			})
			e.backend.handler = func(w http.ResponseWriter, r *http.Request) {
				for i := 0; i+1 < len(tc.backend); i += 2 {
					w.Header().Add(tc.backend[i], tc.backend[i+1])
				}
				_, _ = io.WriteString(w, `{}`)
			}
			path := "/api/v1/mth/matches/BTC_USDT/"
			if tc.route == "tickers" {
				path = "/api/v1/mkt/tickers/"
			}
			res := do(t, "GET", e.url+path, nil)
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != 200 {
				t.Fatalf("status %d", res.StatusCode)
			}
			for k, want := range tc.want {
				if got := res.Header[k]; !slices.Equal(got, want) {
					t.Errorf("%s %q, want %q", k, got, want)
				}
			}
			for _, k := range []string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"} {
				if n := len(res.Header[k]); n > 1 {
					t.Errorf("%s sent %d times: %q", k, n, res.Header[k])
				}
			}
		})
	}
}
