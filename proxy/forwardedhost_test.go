package proxy

import "testing"

// TestForwardedHost: each request's X-Forwarded-Host names its own Host,
// whichever host the value shared last named, and a shared value is not
// one another request can grow in place.
func TestForwardedHost(t *testing.T) {
	g := &Gateway{}
	for _, host := range []string{"api.example", "api.example", "other.example", "api.example", "", "api.example"} {
		v := g.forwardedHost(host)
		if len(v) != 1 || cap(v) != 1 || v[0] != host {
			t.Fatalf("forwardedHost(%q) = %q (cap %d)", host, v, cap(v))
		}
	}
	a, b := g.forwardedHost("api.example"), g.forwardedHost("api.example")
	if &a[0] != &b[0] {
		t.Error("two requests for one host did not share the value")
	}
	if n := testing.AllocsPerRun(100, func() { g.forwardedHost("api.example") }); n != 0 {
		t.Errorf("forwardedHost of the last host allocates %v times", n)
	}
}
