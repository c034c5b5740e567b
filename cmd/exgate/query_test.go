package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
)

// orderQueries are query strings a client could add to an order: order
// fields (as Binance-style backends read them), Django REST framework's
// renderer switch, and spellings of nothing.
var orderQueries = []string{"?price=1", "?symbol=ETH_USDT&base_amount=100", "?format=api", "?format=json", "?x", "?&", "?%70rice=1"}

// TestDRFOrderQuery puts exgate in front of the Django REST framework
// order view. DRF itself reads the query beside an order: with ?format=api
// it places the order and answers with an HTML page (here a 500, the
// browsable renderer having no templates: a client told the order failed
// when it was placed), while the order's fields come from the body alone. Through exgate every query on the order route is
// refused with 400 invalid_query and DRF places nothing; the same order
// without a query is placed.
func TestDRFOrderQuery(t *testing.T) {
	drf := startDRF(t)
	bearer := "Bearer " + drf.tokens[0]
	order := `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.001"}`
	code, h, _ := call(t, "POST", drf.url+"/api/v1/odr/orders/?format=api", order, "Authorization", bearer, "Content-Type", "application/json")
	if len(drf.placed(t)) != 1 || !strings.HasPrefix(h.Get("Content-Type"), "text/html") {
		t.Fatalf("DRF does not place an order and switch its renderer on ?format=api (%d %s): the test proves nothing", code, h.Get("Content-Type"))
	}
	noSymbol := `{"type":"market","side":"buy","base_amount":"0.001"}`
	if code, _, b := call(t, "POST", drf.url+"/api/v1/odr/orders/?symbol=BTC_USDT", noSymbol, "Authorization", bearer, "Content-Type", "application/json"); code != http.StatusBadRequest {
		t.Fatalf("DRF read an order field from the query: %d %s", code, b)
	}
	placedBefore := len(drf.placed(t))

	cfg := config.Default()
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Upstream.URL = config.MustURL(drf.url)
	cfg.Server.DrainDelay = 0
	cfg.Limiter.Store = config.StoreMemory
	a := startApp(t, cfg, deps{log: zap.NewNop(), now: time.Now})
	waitCatalogue(t, a)
	gw := "http://" + a.addr
	for _, q := range orderQueries {
		for _, p := range []string{"/api/v1/odr/orders/", "/api/v1/odr/orders.json"} {
			code, _, b := call(t, "POST", gw+p+q, order, "Authorization", bearer, "Content-Type", "application/json")
			if code != http.StatusBadRequest || errCode(t, b) != "invalid_query" {
				t.Errorf("POST %s%s: %d %s, want 400 invalid_query", p, q, code, b)
			}
		}
	}
	if n := len(drf.placed(t)) - placedBefore; n != 0 {
		t.Fatalf("DRF placed %d orders sent with a query string", n)
	}
	for i, q := range []string{"", "?"} {
		body := fmt.Sprintf(`{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.001","identifier":"q-%d"}`, i)
		if code, h, b := call(t, "POST", gw+"/api/v1/odr/orders/"+q, body, "Authorization", bearer, "Content-Type", "application/json"); code != http.StatusCreated || h.Get("Content-Type") != "application/json" {
			t.Errorf("POST with query %q: %d %s %s", q, code, h.Get("Content-Type"), b)
		}
	}
}

// TestOrderQueryReferenceBackend: in front of the reference backend (what
// exgate -dev runs), an order with a query string is refused and never
// reaches the order endpoint, while the GET routes keep their queries: the
// order list's ?state= filter still filters.
func TestOrderQueryReferenceBackend(t *testing.T) {
	st := startStack(t, nil)
	tok := "Bearer " + authenticate(t, st.url)
	order := `{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"1000","base_amount":"0.001"}`
	for _, q := range orderQueries {
		code, _, b := call(t, "POST", st.url+"/api/v1/odr/orders/"+q, order, "Authorization", tok, "Content-Type", "application/json")
		if code != http.StatusBadRequest || errCode(t, b) != "invalid_query" {
			t.Errorf("POST ?%s: %d %s, want 400 invalid_query", q, code, b)
		}
	}
	if n := st.backend.orders.Load(); n != 0 {
		t.Fatalf("%d orders with a query string reached the backend", n)
	}
	if code, _, b := call(t, "POST", st.url+"/api/v1/odr/orders/", order, "Authorization", tok, "Content-Type", "application/json"); code != http.StatusCreated {
		t.Fatalf("order without a query: %d %s", code, b)
	}
	for q, want := range map[string]int{"?state=active": 1, "?state=closed": 0} {
		code, _, b := call(t, "GET", st.url+"/api/v1/odr/orders/"+q, "", "Authorization", tok)
		var list []map[string]any
		decodeJSON(t, b, &list)
		if code != http.StatusOK || len(list) != want {
			t.Errorf("GET orders %s: %d, %d orders, want %d: %s", q, code, len(list), want, b)
		}
	}
	if code, _, b := call(t, "GET", st.url+"/api/v1/odr/orders/?state=bogus", "", "Authorization", tok); code != http.StatusBadRequest || !strings.Contains(string(b), "state") {
		t.Errorf("GET orders ?state=bogus: the backend did not read the query (%d %s)", code, b)
	}
}

// TestDRFOrderIDQuery puts exgate in front of a Django REST framework view
// of order ids in the path (GET reads them, DELETE cancels them). DRF
// itself runs a cancel whatever its query says, and reads the query
// beside it: ?format=api cancels the order and answers the JSON client
// with an HTML page, and a view that reads ?ids= or a mass cancel from it
// would cancel orders exgate never checked nor charged (cancel_order
// charges one unit per id of the path). Through exgate a cancel or a
// status read with any query string is refused with 400 invalid_query and
// never reaches DRF; without one, DRF reads exactly the path's ids, and a
// bare "?" is dropped.
func TestDRFOrderIDQuery(t *testing.T) {
	drf := startDRF(t)
	bearer := []string{"Authorization", "Bearer " + drf.tokens[0]}
	code, h, _ := call(t, "DELETE", drf.url+"/api/v1/odr/orders/3/?format=api", "", append(bearer, "X-Request-Id", "direct")...)
	if r := drf.bulkReads(t)["direct"]; r.Kind != "cancel_path" || r.Query != "format=api" || !strings.HasPrefix(h.Get("Content-Type"), "text/html") {
		t.Fatalf("DRF does not cancel and switch its renderer on ?format=api (%d %s, read %+v): the test proves nothing", code, h.Get("Content-Type"), r)
	}
	gw, _ := drfGateway(t, drf, nil)
	for i, c := range []struct{ method, target string }{
		{"DELETE", "/api/v1/odr/orders/3/?ids=4,5,6"},
		{"DELETE", "/api/v1/odr/orders/3/?ids=4&ids=5"},
		{"DELETE", "/api/v1/odr/orders/3/?ids[]=4&ids[]=5"},
		{"DELETE", "/api/v1/odr/orders/3/?symbol=BTC_USDT&all=true"},
		{"DELETE", "/api/v1/odr/orders/3/?format=api"},
		{"DELETE", "/api/v1/odr/orders/3,2/?a=1;ids=4"},
		{"DELETE", "/api/v1/odr/orders/3.json?ids=4"},
		{"GET", "/api/v1/odr/orders/3/?ids=4,5,6"},
		{"GET", "/api/v1/odr/orders/3,2/?format=api"},
	} {
		id := fmt.Sprintf("query-%d", i)
		code, _, b := call(t, c.method, gw+c.target, "", append(bearer, "X-Request-Id", id)...)
		if code != http.StatusBadRequest || errCode(t, b) != "invalid_query" {
			t.Errorf("%s %s: %d %.100s, want 400 invalid_query", c.method, c.target, code, b)
		}
	}
	accepted := []struct{ method, target, id, kind, ids string }{
		{"DELETE", "/api/v1/odr/orders/3,2/", "cancel", "cancel_path", "3,2"},
		{"DELETE", "/api/v1/odr/orders/5/?", "cancel-bare", "cancel_path", "5"},
		{"GET", "/api/v1/odr/orders/3,2/?", "status-bare", "status", "3,2"},
	}
	for _, c := range accepted {
		if code, _, b := call(t, c.method, gw+c.target, "", append(bearer, "X-Request-Id", c.id)...); code != http.StatusOK {
			t.Errorf("%s %s: %d %s", c.method, c.target, code, b)
		}
	}
	reads := drf.bulkReads(t)
	for id, r := range reads {
		if strings.HasPrefix(id, "query-") {
			t.Errorf("DRF read %s %s of %q with query %q, a request exgate refused", r.Method, r.Kind, r.IDs, r.Query)
		}
	}
	for _, c := range accepted {
		if r := reads[c.id]; r.Kind != c.kind || strings.Join(r.IDs, ",") != c.ids || r.Query != "" {
			t.Errorf("%s %s: DRF read %s of %q with query %q, want %s of %s and no query", c.method, c.target, r.Kind, r.IDs, r.Query, c.kind, c.ids)
		}
	}
	if len(reads) != 1+len(accepted) {
		t.Errorf("DRF read %d requests, want the direct one and %d through exgate: %+v", len(reads), len(accepted), reads)
	}
}

// TestDRFQueryReading sends list queries to a Django REST framework view
// that answers how Django read its query string, directly and through
// exgate. Django and Go's httputil.ReverseProxy read ";" and malformed
// escapes differently: ?symbol=BTC_USDT;x is the symbol "BTC_USDT;x" to
// Django (no fills), and the ReverseProxy re-encoded it as no query at
// all (every fill); ?symbol=ETH_USDT&x=%zz kept x as "%zz" there and lost
// it through exgate; 10,000 "&" after ?symbol=ETH_USDT are refused by
// Django (more than DATA_UPLOAD_MAX_NUMBER_FIELDS: here a 500) and were
// forwarded as no query. Every query exgate forwards must be read by DRF as
// DRF reads it sent directly; every other is refused with 400
// invalid_query.
func TestDRFQueryReading(t *testing.T) {
	drf := startDRF(t)
	bearer := []string{"Authorization", "Bearer " + drf.tokens[0]}
	gw, _ := drfGateway(t, drf, nil)
	for _, c := range []struct {
		q       string
		refused bool
	}{
		{"symbol=BTC_USDT", false},
		{"symbol=BTC_USDT&symbol=ETH_USDT", false},
		{"symbol=BTC%5FUSDT&ids[]=1&ids[]=2&ids=3,4", false},
		{"symbol=+BTC%20USDT&x=%00&y=%c3%28", false},
		{"symbol=BTC_USDT;x", true},
		{"symbol=BTC_USDT;symbol=ETH_USDT", true},
		{"symbol=ETH_USDT&x=%zz", true},
		{"symbol=ETH_USDT%", true},
		{"symbol=ETH_USDT" + strings.Repeat("&", 10000), true},
	} {
		dcode, _, direct := call(t, "GET", drf.url+"/api/v1/odr/fills/?"+c.q, "", bearer...)
		if dcode != http.StatusOK && !c.refused {
			t.Fatalf("DRF itself answers ?%.60s with %d %s", c.q, dcode, direct)
		}
		code, _, through := call(t, "GET", gw+"/api/v1/odr/fills/?"+c.q, "", bearer...)
		switch {
		case c.refused && (code != http.StatusBadRequest || errCode(t, through) != "invalid_query"):
			t.Errorf("?%.60s: %d %.200s through exgate, where DRF answers it directly with %d %.200s; want 400 invalid_query",
				c.q, code, through, dcode, direct)
		case !c.refused && (code != http.StatusOK || string(through) != string(direct)):
			t.Errorf("?%.60s: %d, DRF read %.200s through exgate, %.200s directly", c.q, code, through, direct)
		}
	}
}
