package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/idempotency"
	"github.com/exgate/exgate/limiter"
	"github.com/exgate/exgate/ratelimit"
	"github.com/exgate/exgate/validate"
)

// fuzzGateway is the whole pipeline — paths, routes, auth, limits,
// validation, duplicate protection — in front of an in-process backend
// that answers 201 to everything it receives.
func fuzzGateway(f *testing.F) *Gateway {
	f.Helper()
	cfg := config.Default()
	cfg.Upstream.URL = config.MustURL("http://backend.invalid:9000")
	cfg.Route("list_markets").Limits[0].Rate = config.Rate{N: 50, Period: 1e9} // trip limits now and then
	cfg.Route("list_markets").Limits[0].Burst = 50
	if err := cfg.Validate(); err != nil {
		f.Fatal(err)
	}
	u, _ := url.Parse("http://backend.invalid:9000")
	cat, _ := validate.NewCatalogue(validate.CatalogueOptions{BaseURL: u, Transport: http.DefaultTransport})
	_ = cat.Set([]validate.Market{{Symbol: "BTC_USDT", Base: "BTC", Quote: "USDT", Tradable: true,
		PricePrecision: 2, BaseAmountPrecision: 6, QuoteAmountPrecision: 2}})
	v, err := validate.New(cfg.Validation, cat, zap.NewNop())
	if err != nil {
		f.Fatal(err)
	}
	k, _ := limiter.NewKeyer([]byte(testKeySecret))
	enf, _ := limiter.NewEnforcer(limiter.EnforcerOptions{Store: ratelimit.NewMemory(ratelimit.MemoryOptions{}), Keyer: k})
	gw, err := New(cfg, Options{
		Transport: backendEcho{}, Limits: enf, Validator: v,
		Idempotency: idempotency.NewMemory(idempotency.OptionsFrom(cfg.Idempotency)),
	})
	if err != nil {
		f.Fatal(err)
	}
	return gw
}

// backendEcho answers 201 with a marker header, after reading the body.
type backendEcho struct{}

func (backendEcho) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	return &http.Response{
		StatusCode: 201, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:  http.Header{"Content-Type": {"application/json"}, "X-Backend": {"1"}},
		Body:    io.NopCloser(strings.NewReader(`{"ok":true}`)),
		Request: r, ContentLength: 11,
	}, nil
}

// FuzzGateway sends arbitrary requests (as net/http would parse them from
// the wire) through the whole pipeline: exgate never panics, never answers
// 500, and every answer it gives itself is a JSON error in the one shape
// with a request id.
func FuzzGateway(f *testing.F) {
	seeds := []string{
		"GET /api/v1/mkt/markets/ HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET //api/./v1/mth/matches/BTC_USDT HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 1.2.3.4\r\n\r\n",
		"POST /api/v1/odr/orders/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer abc\r\nContent-Type: application/json\r\nContent-Length: 74\r\n\r\n" +
			`{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.001"}  `,
		"POST /api/v1/odr/orders/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer abc\r\nContent-Type: application/json\r\nContent-Length: 96\r\n\r\n" +
			`{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"1.00","base_amount":1e-3,"identifier":"x"}`,
		"POST /api/v1/odr/%6frders HTTP/1.1\r\nHost: x\r\nAuthorization: bearer  x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{}\n\r\n0\r\n\r\n",
		"DELETE /api/v1/odr/orders/ HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /api/v1/mkt/%2e%2e/%2fetc HTTP/1.1\r\nHost: x\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /api/v1/odr/orders/bulk.json HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer abc\r\nContent-Type: application/json\r\nContent-Length: 79\r\n\r\n" +
			`[{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.001"},17]`,
		"POST /api/v1/odr/orders/bulk/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer abc\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n[1,\"2\"]",
		"GET /api/v1/odr/orders/%7B1,2%7D/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer abc\r\n\r\n",
		"OPTIONS /api/v1/odr/orders/ HTTP/1.1\r\nHost: x\r\nOrigin: https://a.example\r\nAccess-Control-Request-Method: POST\r\n\r\n",
		"GET /api/v1/odr/orders/ HTTP/1.1\r\nHost: x\r\nX-HTTP-Method-Override: POST\r\n\r\n",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	gw := fuzzGateway(f)
	f.Fuzz(func(t *testing.T, raw []byte) {
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			return // net/http refuses it before exgate sees it
		}
		req.RemoteAddr = "192.0.2.1:1234"
		rec := httptest.NewRecorder()
		gw.ServeHTTP(rec, req)
		res := rec.Result()
		if res.StatusCode == http.StatusInternalServerError {
			t.Fatalf("500 for %q: %s", raw, rec.Body.String())
		}
		if res.Header.Get("X-Request-Id") == "" {
			t.Fatalf("no X-Request-Id for %q", raw)
		}
		if res.Header.Get("X-Backend") != "" || res.Header.Get(idempotency.ReplayedHeader) != "" {
			return // the backend's answer (or its replay) passes through
		}
		if res.StatusCode < 400 {
			t.Fatalf("exgate answered %d itself for %q", res.StatusCode, raw)
		}
		var e struct {
			Detail string              `json:"detail"`
			Code   string              `json:"code"`
			Fields map[string][]string `json:"fields"`
		}
		dec := json.NewDecoder(rec.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil || e.Code == "" || e.Detail == "" || res.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("answer %d to %q is not the error shape: %v %+v", res.StatusCode, raw, err, e)
		}
	})
}
