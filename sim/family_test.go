package sim

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
)

// ids returns the "id" of each order of a decoded list.
func ids(t *testing.T, v any) []string {
	t.Helper()
	list, ok := v.([]any)
	if !ok {
		t.Fatalf("not a list: %v", v)
	}
	var out []string
	for _, e := range list {
		out = append(out, e.(map[string]any)["id"].(json.Number).String())
	}
	return out
}

// TestOrderLifecycle: a resting order is listed as open, found by id and
// by id list, cancelled (leaving the open list, closed), not cancelled
// twice, and invisible to another user, whose cancel of it is 404.
func TestOrderLifecycle(t *testing.T) {
	h := newHarness(t, Options{Credentials: map[string]string{"dev": "dev", "other": "other"}}, true)
	other, _, err := h.sim.IssueToken("other")
	if err != nil {
		t.Fatal(err)
	}
	limitOrder := `{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"60000.00","base_amount":"0.01"}`
	for range 2 {
		if r := h.do(t, "POST", "/api/v1/odr/orders/", h.access, limitOrder); r.status != 201 {
			t.Fatalf("place: %d %s", r.status, r.raw)
		}
	}
	r := h.do(t, "GET", "/api/v1/odr/orders/?state=active", h.access, nil)
	open := ids(t, r.body)
	if r.status != 200 || len(open) != 2 {
		t.Fatalf("open orders: %d %s", r.status, r.raw)
	}
	first, second := open[1], open[0] // newest first
	if r := h.do(t, "GET", "/api/v1/odr/orders/"+first+"/", h.access, nil); r.status != 200 || r.body.(map[string]any)["state"] != "active" {
		t.Fatalf("status by id: %d %s", r.status, r.raw)
	}
	if r := h.do(t, "GET", "/api/v1/odr/orders/"+second+","+first+",999/", h.access, nil); r.status != 200 || !slices.Equal(ids(t, r.body), []string{second, first}) {
		t.Fatalf("status by id list: %d %s", r.status, r.raw)
	}
	// Another user sees none of it and cannot cancel it.
	if r := h.do(t, "DELETE", "/api/v1/odr/orders/"+first+"/", other, nil); r.status != 404 {
		t.Fatalf("another user's cancel: %d %s", r.status, r.raw)
	}
	if r := h.do(t, "GET", "/api/v1/odr/orders/"+first+"/", other, nil); r.status != 404 {
		t.Fatalf("another user's status: %d", r.status)
	}
	if r := h.do(t, "GET", "/api/v1/odr/orders/", other, nil); r.status != 200 || len(ids(t, r.body)) != 0 {
		t.Fatalf("another user's list: %s", r.raw)
	}
	r = h.do(t, "DELETE", "/api/v1/odr/orders/"+first+"/", h.access, nil)
	if r.status != 200 || r.body.(map[string]any)["state"] != "canceled" || r.body.(map[string]any)["closed_at"] == nil {
		t.Fatalf("cancel: %d %s", r.status, r.raw)
	}
	if r := h.do(t, "GET", "/api/v1/odr/orders/?state=active", h.access, nil); len(ids(t, r.body)) != 1 || ids(t, r.body)[0] != second {
		t.Fatalf("open orders after the cancel: %s", r.raw)
	}
	if r := h.do(t, "GET", "/api/v1/odr/orders/?state=canceled", h.access, nil); len(ids(t, r.body)) != 1 {
		t.Fatalf("canceled orders: %s", r.raw)
	}
	if r := h.do(t, "DELETE", "/api/v1/odr/orders/"+first+"/", h.access, nil); r.status != 400 {
		t.Fatalf("second cancel: %d %s", r.status, r.raw)
	}
	// The book no longer holds it: the order book shows one 0.01 bid at 60000.
	r = h.do(t, "GET", "/api/v1/mth/orderbook/BTC_USDT/", "", nil)
	bids := r.body.(map[string]any)["bids"].([]any)
	found := false
	for _, l := range bids {
		if p := l.([]any); p[0] == "60000.00" {
			found = p[1] == "0.010000"
		}
	}
	if !found {
		t.Fatalf("order book after the cancel: %s", r.raw)
	}
	if r := h.do(t, "GET", "/api/v1/odr/orders/?state=bogus", h.access, nil); r.status != 400 {
		t.Fatalf("bad state filter: %d", r.status)
	}
}

// TestBulkFillsWalletsTickers: a bulk places all or nothing, a bulk
// cancel cancels the user's open orders, a crossing order leaves fills
// and moves the wallets, and tickers show the last price.
func TestBulkFillsWalletsTickers(t *testing.T) {
	h := newHarness(t, Options{}, true)
	bad := `[{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"60000.00","base_amount":"0.01"},{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"1.001","base_amount":"0.01"}]`
	r := h.do(t, "POST", "/api/v1/odr/orders/bulk/", h.access, bad)
	if r.status != 400 {
		t.Fatalf("bulk with a bad order: %d %s", r.status, r.raw)
	}
	if errs := r.body.([]any); len(errs[0].(map[string]any)) != 0 || errs[1].(map[string]any)["price"] == nil {
		t.Fatalf("per-order errors: %s", r.raw)
	}
	if r := h.do(t, "GET", "/api/v1/odr/orders/", h.access, nil); len(ids(t, r.body)) != 0 {
		t.Fatal("a refused bulk placed something")
	}
	good := `[{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"60000.00","base_amount":"0.01"},{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"60001.00","base_amount":"0.01"}]`
	r = h.do(t, "POST", "/api/v1/odr/orders/bulk/", h.access, good)
	if r.status != 201 {
		t.Fatalf("bulk: %d %s", r.status, r.raw)
	}
	placed := ids(t, r.body.(map[string]any)["orders"])
	if len(placed) != 2 {
		t.Fatalf("bulk: %s", r.raw)
	}
	r = h.do(t, "POST", "/api/v1/odr/orders/bulk/", h.access, "["+placed[0]+`,"`+placed[1]+`",424242]`)
	if r.status != 200 || string(r.raw) != `{"canceled_orders":["`+placed[0]+`","`+placed[1]+`"],"not_canceled_orders":["424242"]}`+"\n" {
		t.Fatalf("bulk cancel: %d %s", r.status, r.raw)
	}
	// A market buy of 0.6 BTC takes 0.5 at 65000 and 0.1 at 65010.
	if r := h.do(t, "POST", "/api/v1/odr/orders/", h.access, `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.6"}`); r.status != 201 {
		t.Fatalf("market order: %d %s", r.status, r.raw)
	}
	r = h.do(t, "GET", "/api/v1/odr/fills/", h.access, nil)
	if fills := r.body.([]any); len(fills) != 2 || fills[0].(map[string]any)["price"] != "65010.00" {
		t.Fatalf("fills: %s", r.raw)
	}
	r = h.do(t, "GET", "/api/v1/wlt/wallets/", h.access, nil)
	bal := map[string]string{}
	for _, w := range r.body.([]any) {
		bal[w.(map[string]any)["currency"].(string)] = w.(map[string]any)["balance"].(string)
	}
	if bal["BTC"] != "1000000.6" || bal["USDT"] != "960999" {
		t.Fatalf("wallets: %v", bal)
	}
	r = h.do(t, "GET", "/api/v1/mkt/tickers/", "", nil)
	for _, tk := range r.body.([]any) {
		if m := tk.(map[string]any); m["symbol"] == "BTC_USDT" && (m["price"] != "65010.00" || m["best_ask"] != "65010.00") {
			t.Fatalf("ticker: %v", m)
		}
	}
	if r := h.do(t, "GET", "/api/v1/mth/orderbook/NOPE_USDT/", "", nil); r.status != 404 {
		t.Fatalf("unknown book: %d", r.status)
	}
	for _, p := range []string{"/api/v1/odr/fills/", "/api/v1/wlt/wallets/", "/api/v1/odr/orders/1/", "/api/v1/odr/orders/bulk/"} {
		if r := h.do(t, "GET", p, "", nil); r.status != 401 && !(p == "/api/v1/odr/orders/bulk/" && r.status == 405) {
			t.Fatalf("%s without a token: %d", p, r.status)
		}
	}
}

// TestBulkCancelShapes: a bulk cancel is read alike as an array of ids and
// as {"ids": [...]}, POSTed or DELETEd, and answered in the exchange's
// documented shape; a DELETE places nothing.
func TestBulkCancelShapes(t *testing.T) {
	h := newHarness(t, Options{}, true)
	order := `{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"60000.00","base_amount":"0.01"}`
	r := h.do(t, "POST", "/api/v1/odr/orders/bulk/", h.access, "["+strings.Repeat(order+",", 3)+order+"]")
	if r.status != 201 {
		t.Fatalf("bulk: %d %s", r.status, r.raw)
	}
	placed := ids(t, r.body.(map[string]any)["orders"])
	for i, c := range []struct{ method, body string }{
		{"POST", `{"ids":["` + placed[0] + `",424242]}`},
		{"DELETE", `["` + placed[1] + `"]`},
		{"DELETE", `{"ids":[` + placed[2] + `]}`},
	} {
		want := `{"canceled_orders":["` + placed[i] + `"],"not_canceled_orders":[]}`
		if i == 0 {
			want = `{"canceled_orders":["` + placed[0] + `"],"not_canceled_orders":["424242"]}`
		}
		r := h.do(t, c.method, "/api/v1/odr/orders/bulk/", h.access, c.body)
		if r.status != 200 || strings.TrimSpace(string(r.raw)) != want {
			t.Fatalf("%s %s: %d %s, want %s", c.method, c.body, r.status, r.raw, want)
		}
	}
	if r := h.do(t, "DELETE", "/api/v1/odr/orders/bulk/", h.access, "["+order+"]"); r.status != 400 {
		t.Fatalf("DELETE with orders: %d %s", r.status, r.raw)
	}
	for _, bad := range []string{`{"ids":[]}`, `{"ids":"1,2"}`, `{}`} {
		if r := h.do(t, "POST", "/api/v1/odr/orders/bulk/", h.access, bad); r.status != 400 {
			t.Fatalf("%s: %d %s", bad, r.status, r.raw)
		}
	}
	r = h.do(t, "GET", "/api/v1/odr/orders/?state=active", h.access, nil)
	if open := ids(t, r.body); !slices.Equal(open, placed[3:]) {
		t.Fatalf("open orders %v, want %v", open, placed[3:])
	}
	if r := h.do(t, "GET", "/api/v1/odr/orders/"+placed[3]+",x/", h.access, nil); r.status != 404 {
		t.Fatalf("a list with a non-id: %d %s", r.status, r.raw)
	}
}

// TestClosedOrdersKept: a user's history keeps every open order and the
// newest ClosedOrdersKept closed ones; an older closed order is no longer
// listed and its status is not found, as an archived one. Another user's
// history is not touched.
func TestClosedOrdersKept(t *testing.T) {
	h := newHarness(t, Options{ClosedOrdersKept: 3, Credentials: map[string]string{"dev": "dev", "other": "other"}}, false)
	other, _, err := h.sim.IssueToken("other")
	if err != nil {
		t.Fatal(err)
	}
	place := func(token, body string) {
		t.Helper()
		if r := h.do(t, "POST", "/api/v1/odr/orders/", token, body); r.status != 201 {
			t.Fatalf("place: %d %s", r.status, r.raw)
		}
	}
	limit := `{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"60000.00","base_amount":"0.01"}`
	market := `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.01"}` // an empty book: canceled at once
	place(h.access, limit)                                                              // id 1, stays open
	place(other, market)                                                                // id 2
	for range 12 {                                                                      // ids 3 to 14
		place(h.access, market)
	}
	// The history is pruned each time it passes twice 3 orders (at 7,
	// after ids 8, 11 and 14): the open order and the newest 3 closed.
	r := h.do(t, "GET", "/api/v1/odr/orders/", h.access, nil)
	if got := ids(t, r.body); !slices.Equal(got, []string{"14", "13", "12", "1"}) {
		t.Fatalf("history after 13 orders, 3 closed kept: %v, want [14 13 12 1]", got)
	}
	for id, want := range map[string]int{"1": 200, "12": 200, "11": 404, "3": 404} {
		if r := h.do(t, "GET", "/api/v1/odr/orders/"+id+"/", h.access, nil); r.status != want {
			t.Errorf("status of order %s: %d %s, want %d", id, r.status, r.raw, want)
		}
	}
	if r := h.do(t, "GET", "/api/v1/odr/orders/", other, nil); !slices.Equal(ids(t, r.body), []string{"2"}) {
		t.Fatalf("another user's history: %s", r.raw)
	}
}

// TestClosedOrdersKeptConcurrent: orders placed, listed and cancelled at
// once while the history is pruned (run under -race) leave every open
// order in the history and at most the bound's slack of closed ones.
func TestClosedOrdersKeptConcurrent(t *testing.T) {
	h := newHarness(t, Options{ClosedOrdersKept: 5}, false)
	limit := `{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"60000.00","base_amount":"0.01"}`
	market := `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.01"}`
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				body := market
				if i%10 == g {
					body = limit
				}
				h.do(t, "POST", "/api/v1/odr/orders/", h.access, body)
				if i%7 == 0 {
					h.do(t, "GET", "/api/v1/odr/orders/", h.access, nil)
				}
			}
		}()
	}
	wg.Wait()
	open := ids(t, h.do(t, "GET", "/api/v1/odr/orders/?state=active", h.access, nil).body)
	all := ids(t, h.do(t, "GET", "/api/v1/odr/orders/", h.access, nil).body)
	if len(open) != 16 {
		t.Fatalf("open orders: %d, want the 16 limit orders", len(open))
	}
	if closed := len(all) - len(open); closed < 5 || closed > 3*5 {
		t.Fatalf("closed orders kept: %d, want 5 to 15", closed)
	}
}
