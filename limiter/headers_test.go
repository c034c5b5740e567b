package limiter

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/ratelimit"
)

func TestHeaderStyles(t *testing.T) {
	rs := Compile(config.Default(), nil)
	e := newTestEnforcer(t, nil, newFakeClock())
	rr := rs.Route("list_matches")
	req := Request{Addr: addr("198.51.100.7")}
	var d Decision
	e.Decide(context.Background(), rr, req, &d)
	cases := []struct {
		style string
		want  map[string]string
	}{
		{config.HeadersIETF, map[string]string{"RateLimit-Policy": `"address";q=60;w=60`, "RateLimit": `"address";r=59;t=1`}},
		{config.HeadersLegacy, map[string]string{"X-RateLimit-Limit": "60", "X-RateLimit-Remaining": "59", "X-RateLimit-Reset": "1"}},
		{config.HeadersNone, map[string]string{}},
	}
	for _, tc := range cases {
		t.Run(tc.style, func(t *testing.T) {
			h := http.Header{}
			d.SetHeaders(h, tc.style)
			if len(h) != len(tc.want) {
				t.Errorf("headers %v, want %v", h, tc.want)
			}
			for k, v := range tc.want {
				if h.Get(k) != v {
					t.Errorf("%s = %q, want %q", k, h.Get(k), v)
				}
			}
		})
	}
	// Denied: t is the Retry-After.
	count(e, rr, req, 60)
	e.Decide(context.Background(), rr, req, &d)
	h := http.Header{}
	d.SetHeaders(h, config.HeadersIETF)
	if d.Allowed || h.Get("RateLimit") != `"address";r=0;t=1` {
		t.Errorf("denied: %v %v", d.Allowed, h)
	}
}

func TestSecondsRoundsUp(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{{0, 0}, {-time.Second, 0}, {time.Nanosecond, 1}, {time.Second, 1}, {1001 * time.Millisecond, 2}, {59*time.Second + 1, 60},
		{366 * 24 * time.Hour, MaxWaitSeconds}, {366*24*time.Hour + 1, MaxWaitSeconds}, {ratelimit.Never, MaxWaitSeconds}} {
		if got := Seconds(tc.d); got != tc.want {
			t.Errorf("Seconds(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}
