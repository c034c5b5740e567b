package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/exgate/exgate/config"
)

// TestForwardCanonicalAllocations gates the allocations of an order's
// canonical body: the encoding and its reader in one (canonicalBody), and
// the io.NopCloser the transport knows to be in memory; an order too long
// for canonicalBody's room is encoded in a buffer of its own, a third.
// Each forwarded body is the order's canonical encoding.
func TestForwardCanonicalAllocations(t *testing.T) {
	cfg := config.Default()
	cfg.Upstream.URL = config.MustURL("http://backend.invalid:9000")
	v := oneMarketValidator(t, cfg)
	long := `{"symbol":"BTC_USDT","type":"limit","side":"buy","base_amount":"0.001","price":"100.25",` +
		strings.Repeat(" ", 40) + `"identifier":"` + strings.Repeat("x", 64) + `"}`
	for _, tt := range []struct {
		name, body string
		max        float64
	}{
		{"market", `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.001"}`, 2},
		{"limit with identifier", `{"symbol":"BTC_USDT","type":"limit","side":"sell","base_amount":"1.5",` +
			`"price":"100.25","identifier":"order-0001"}`, 2},
		{"longer than canonicalBody's room", long, 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o, e := v.Check([]string{"application/json"}, []byte(tt.body))
			if e != nil {
				t.Fatalf("%s: %v", tt.body, e)
			}
			want := string(o.AppendCanonical(nil))
			var st requestState
			r := &http.Request{Header: http.Header{}}
			forward := func() { forwardCanonical(&st, r, &o, len(tt.body)) }
			forward()
			got, _ := io.ReadAll(r.Body)
			if string(got) != want || r.ContentLength != int64(len(want)) || string(st.sentBody) != want {
				t.Errorf("forwarded %q (Content-Length %d, sentBody %q), want %q", got, r.ContentLength, st.sentBody, want)
			}
			if n := testing.AllocsPerRun(100, forward); n > tt.max {
				t.Errorf("%v allocations per forwardCanonical, want at most %v", n, tt.max)
			}
		})
	}
}
