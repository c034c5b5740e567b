package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/exgate/exgate/idempotency"
	"github.com/exgate/exgate/sim"
)

// received is one request the reference backend got from the gateway.
type received struct{ method, path, body string }

// recorder is the reference backend, recording every request a gateway
// forwarded (one with X-Forwarded-For; not the catalogue fetches).
type recorder struct {
	h   http.Handler
	mu  sync.Mutex
	got []received
}

func (rc *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Forwarded-For") != "" {
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(strings.NewReader(string(b)))
		rc.mu.Lock()
		rc.got = append(rc.got, received{r.Method, r.URL.RequestURI(), string(b)})
		rc.mu.Unlock()
	}
	rc.h.ServeHTTP(w, r)
}

// since returns the requests received after the first n.
func (rc *recorder) since(n int) []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.got[n:]...)
}

func (rc *recorder) count() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.got)
}

const familyConfig = `
listen: %q
admin_listen: %q
upstream: { url: %q }
server: { drain_delay: 0s }
log: { access: false }
reload_interval: 0s
`

// TestOrderFamilyShapesBinary runs the real binary, with its default
// route table, in front of the reference backend and sends every shape
// a client of the API writes to the order family: a bulk placement
// (answered {"orders": [...]}, its identifiers protected as before), a
// bulk cancel as an array of ids and as {"ids": [...]}, POSTed and
// DELETEd, and the status of ids joined by commas. Each accepted request
// reaches the backend once, in its canonical form, and is charged one unit
// per order or id; each refusal reaches it never, and a refusal of the
// same ids is the same answer in every shape.
func TestOrderFamilyShapesBinary(t *testing.T) {
	bin := buildBinary(t)
	rec := &recorder{h: sim.New(sim.Options{})}
	bs := httptest.NewServer(rec)
	t.Cleanup(bs.Close)
	cfgPath := filepath.Join(t.TempDir(), "exgate.yaml")
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf(familyConfig, anyPort, anyPort, bs.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, logs, _ := startBinary(t, bin, cfgPath, "EXGATE_KEY_SECRET="+keySecret)
	listen, admin := startedAddrs(t, logs)
	base := "http://" + listen
	waitReady(t, "http://"+admin+"/readyz")
	token := authenticate(t, base)
	h := []string{"Authorization", "Bearer " + token, "Content-Type", "application/json"}

	send := familySend(func(method, path, body string) (int, http.Header, string, []received) {
		t.Helper()
		n := rec.count()
		code, hdr, b := call(t, method, base+path, body, h...)
		return code, hdr, string(b), rec.since(n)
	})

	orders, ids := checkFamilyBulkPlacement(t, send)
	checkFamilyBulkCancels(t, send, ids)
	checkFamilyRefusals(t, send, orders)

	// The status of ids joined by commas: forwarded as it came, charged
	// per id; a list exgate and the backend could read differently is
	// refused at the edge.
	code, hdr, b, got := send("GET", "/api/v1/odr/orders/"+ids[5]+","+ids[0]+"/", "")
	var status []struct {
		ID    int64
		State string
	}
	decodeJSON(t, []byte(b), &status)
	if code != 200 || len(status) != 2 || itoa(status[0].ID) != ids[5] || status[1].State != "canceled" || rateLimitRemaining(hdr) != "598" {
		t.Fatalf("status of two orders: %d (remaining %s) %s", code, rateLimitRemaining(hdr), b)
	}
	if len(got) != 1 || got[0].path != "/api/v1/odr/orders/"+ids[5]+","+ids[0]+"/" {
		t.Fatalf("backend got %+v", got)
	}
	for _, list := range []string{ids[5] + ",," + ids[0], "0" + ids[5], "{" + ids[5] + "}", "bulk", ids[5] + "," + ids[5]} {
		if code, _, b, got := send("GET", "/api/v1/odr/orders/"+list+"/", ""); code != 400 || !strings.Contains(b, `"invalid_order"`) || len(got) != 0 {
			t.Fatalf("status of %s: %d %s; backend got %v", list, code, b, got)
		}
	}
	if code, _, b, got := send("DELETE", "/api/v1/odr/orders/"+ids[5]+"/", ""); code != 200 || !strings.Contains(b, `"state":"canceled"`) || len(got) != 1 {
		t.Fatalf("cancel: %d %s; backend got %v", code, b, got)
	}
}

// familySend sends a request to the gateway and returns its answer and
// what reached the backend meanwhile.
type familySend func(method, path, body string) (int, http.Header, string, []received)

// rateLimitRemaining returns the r (remaining) of a RateLimit header.
func rateLimitRemaining(hdr http.Header) string {
	_, r, _ := strings.Cut(hdr.Get("RateLimit"), ";r=")
	r, _, _ = strings.Cut(r, ";")
	return r
}

// checkFamilyBulkPlacement sends a bulk placement of six orders: it is
// forwarded once, canonical, and answered as the exchange documents; the
// same bulk again is replayed, and a bulk reusing one of its identifiers
// places nothing. It returns the orders and the ids they were given.
func checkFamilyBulkPlacement(t *testing.T, send familySend) (orders, ids []string) {
	t.Helper()
	for i := range 6 {
		orders = append(orders, fmt.Sprintf(`{"side":"buy","symbol":"BTC_USDT","type":"limit","price":%d.00,"base_amount":"0.0010","identifier":"shape-%d"}`, 50000+i, i))
	}
	placement := "[" + strings.Join(orders, ",") + "]"
	code, hdr, placed, got := send("POST", "/api/v1/odr/orders/bulk/", placement)
	if code != 201 || len(got) != 1 || rateLimitRemaining(hdr) != "5394" {
		t.Fatalf("bulk placement: %d (remaining %s) %s; backend got %v", code, rateLimitRemaining(hdr), placed, got)
	}
	if !strings.HasPrefix(got[0].body, `[{"symbol":"BTC_USDT","type":"limit","side":"buy","base_amount":"0.001","price":"50000","identifier":"shape-0"},`) {
		t.Fatalf("backend got the placement as %s", got[0].body)
	}
	var answer struct{ Orders []struct{ ID int64 } }
	decodeJSON(t, []byte(placed), &answer)
	if len(answer.Orders) != 6 {
		t.Fatalf("placement answer: %s", placed)
	}
	ids = make([]string, 6)
	for i, o := range answer.Orders {
		ids[i] = itoa(o.ID)
	}
	code, hdr, again, got := send("POST", "/api/v1/odr/orders/bulk/", placement)
	if code != 201 || again != placed || hdr.Get(idempotency.ReplayedHeader) != "true" || len(got) != 0 {
		t.Fatalf("the same bulk again: %d replayed=%q, %d backend requests; %s", code, hdr.Get(idempotency.ReplayedHeader), len(got), again)
	}
	code, _, b, got := send("POST", "/api/v1/odr/orders/bulk/", "["+strings.Replace(orders[0], "shape-0", "shape-new", 1)+","+orders[1]+"]")
	if code != 409 || !strings.Contains(b, `"orders[1].identifier"`) || len(got) != 0 {
		t.Fatalf("a bulk reusing an identifier: %d %s; backend got %v", code, b, got)
	}
	return orders, ids
}

// checkFamilyBulkCancels cancels the orders ids[0] to ids[4] in every shape
// of a bulk cancel: each reaches the backend once, in canonical form with
// its method, charged one unit per id.
func checkFamilyBulkCancels(t *testing.T, send familySend, ids []string) {
	t.Helper()
	left := 16200
	for _, c := range []struct {
		method, body, forwarded, answer string
	}{
		{"POST", "[" + ids[0] + `, "` + ids[1] + `"]`, `["` + ids[0] + `","` + ids[1] + `"]`,
			`{"canceled_orders":["` + ids[0] + `","` + ids[1] + `"],"not_canceled_orders":[]}`},
		{"POST", `{"ids": ["` + ids[2] + `"]}`, `{"ids":["` + ids[2] + `"]}`,
			`{"canceled_orders":["` + ids[2] + `"],"not_canceled_orders":[]}`},
		{"DELETE", `{"ids":[` + ids[3] + `]}`, `{"ids":["` + ids[3] + `"]}`,
			`{"canceled_orders":["` + ids[3] + `"],"not_canceled_orders":[]}`},
		{"DELETE", `["` + ids[4] + `", 999999]`, `["` + ids[4] + `","999999"]`,
			`{"canceled_orders":["` + ids[4] + `"],"not_canceled_orders":["999999"]}`},
	} {
		code, hdr, b, got := send(c.method, "/api/v1/odr/orders/bulk/", c.body)
		left -= strings.Count(c.forwarded, ",") + 1
		if code != 200 || strings.TrimSpace(b) != c.answer || rateLimitRemaining(hdr) != itoa(int64(left)) {
			t.Fatalf("%s %s: %d (remaining %s, want %d) %s", c.method, c.body, code, rateLimitRemaining(hdr), left, b)
		}
		if len(got) != 1 || got[0] != (received{c.method, "/api/v1/odr/orders/bulk/", c.forwarded}) {
			t.Fatalf("%s %s: backend got %+v, want %s %s", c.method, c.body, got, c.method, c.forwarded)
		}
	}
}

// checkFamilyRefusals checks that the same bad ids get the same answer in
// every shape, that a bulk cancel of orders or with identifiers is refused,
// and that nothing refused reaches the backend.
func checkFamilyRefusals(t *testing.T, send familySend, orders []string) {
	t.Helper()
	// The same bad ids get the same answer in every shape, and nothing
	// reaches the backend.
	var first string
	for _, c := range []struct{ method, body string }{
		{"POST", `[1, "x"]`}, {"POST", `{"ids": [1, "x"]}`}, {"DELETE", `[1,"x"]`}, {"DELETE", `{"ids":[1,"x"]}`},
	} {
		code, _, b, got := send(c.method, "/api/v1/odr/orders/bulk/", c.body)
		if first == "" {
			first = b
		}
		if code != 400 || b != first || !strings.Contains(b, `"ids[1]"`) || len(got) != 0 {
			t.Fatalf("%s %s: %d %s (first answer %s); backend got %v", c.method, c.body, code, b, first, got)
		}
	}
	for _, c := range []struct{ method, body, names string }{
		{"DELETE", "[" + orders[0] + "]", "only cancels"},
		{"POST", `{"ids": [1], "identifiers": ["shape-1"]}`, `"identifiers"`},
		{"DELETE", ``, "parse_error"},
	} {
		if code, _, b, got := send(c.method, "/api/v1/odr/orders/bulk/", c.body); code != 400 || !strings.Contains(b, c.names) || len(got) != 0 {
			t.Fatalf("%s %s: %d %s; backend got %v", c.method, c.body, code, b, got)
		}
	}
}

// waitReady waits until the admin listener's /readyz answers 200 (the
// market catalogue loaded), as a load balancer would.
func waitReady(t *testing.T, url string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		res, err := http.Get(url)
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready within 30s: %v %v", url, res, err)
		}
	}
}
