package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
)

// TestDRFUnderscoreHeaders puts exgate in front of the Django REST
// framework order view, served by WSGI. WSGI (CGI before it) names a
// header by its name in upper case with "-" turned into "_": the backend
// reads X_Request_ID, X_Forwarded_For or X_Real_IP as the X-Request-ID,
// X-Forwarded-For or X-Real-IP that exgate sets, joined to exgate's value
// with a comma. A client could add a request id, a forwarded address or a
// proto of its own to what exgate tells the backend. exgate refuses every
// header name with an underscore, 400 invalid_header, and DRF places
// nothing.
func TestDRFUnderscoreHeaders(t *testing.T) {
	drf := startDRF(t)
	bearer := "Bearer " + drf.tokens[0]
	order := `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.001"}`
	post := func(url string, header map[string]string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest("POST", url+"/api/v1/odr/orders/", strings.NewReader(order))
		if err != nil {
			t.Fatal(err)
		}
		req.Header["Authorization"] = []string{bearer}
		req.Header["Content-Type"] = []string{"application/json"}
		for k, v := range header {
			req.Header[k] = []string{v} // as written, not canonicalised
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, b
	}
	code, b := post(drf.url, map[string]string{"X-Request-Id": "mine", "X_Request_ID": "forged"})
	if ps := drf.placed(t); code != http.StatusCreated || len(ps) != 1 || !strings.Contains(ps[0].RequestID, "forged") {
		t.Fatalf("DRF does not read X_Request_ID as X-Request-ID (%d %s, placed %+v): the test proves nothing", code, b, ps)
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
	for _, name := range []string{"X_Request_ID", "x_forwarded_for", "X_REAL_IP", "X_Forwarded-Proto", "Authorization_", "_"} {
		code, b := post(gw, map[string]string{name: "forged"})
		if code != http.StatusBadRequest || errCode(t, b) != "invalid_header" {
			t.Errorf("%s: %d %s, want 400 invalid_header", name, code, b)
		}
		req, _ := http.NewRequest("GET", gw+"/api/v1/mkt/markets/", nil)
		req.Header[name] = []string{"6.6.6.6"}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		mb, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusBadRequest || errCode(t, mb) != "invalid_header" {
			t.Errorf("GET with %s: %d %s, want 400 invalid_header", name, res.StatusCode, mb)
		}
	}
	if n := len(drf.placed(t)) - placedBefore; n != 0 {
		t.Fatalf("DRF placed %d orders sent with an underscore header", n)
	}
	if code, b := post(gw, map[string]string{"X-Client-Note": "dash"}); code != http.StatusCreated {
		t.Fatalf("the same order without an underscore header: %d %s", code, b)
	}
}
