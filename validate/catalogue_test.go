package validate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/sim"
)

// scripted is a markets endpoint over a real socket whose answer the test
// sets; it counts requests and remembers the last one's headers and path.
type scripted struct {
	mu     sync.Mutex
	status int
	body   string
	block  bool // wait until the client gives up
	hits   atomic.Int64
	header http.Header
	path   string
	srv    *httptest.Server
}

func newScripted(t *testing.T, status int, body string) *scripted {
	s := &scripted{status: status, body: body}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		s.mu.Lock()
		status, body, block := s.status, s.body, s.block
		s.header, s.path = r.Header.Clone(), r.URL.Path
		s.mu.Unlock()
		if block {
			<-r.Context().Done()
			return
		}
		if status == http.StatusMovedPermanently {
			w.Header().Set("Location", "/elsewhere/")
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *scripted) set(status int, body string) {
	s.mu.Lock()
	s.status, s.body, s.block = status, body, false
	s.mu.Unlock()
}

func (s *scripted) url(t *testing.T) *url.URL {
	u, err := url.Parse(s.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// marketsJSON writes markets as the backend does: precisions as strings.
func marketsJSON(ms ...Market) string {
	var parts []string
	for _, m := range ms {
		parts = append(parts, fmt.Sprintf(`{"symbol":%q,"name":"x/y","base":%q,"quote":%q,"tradable":%t,"price_precision":"%d","base_amount_precision":"%d","quote_amount_precision":"%d"}`,
			m.Symbol, m.Base, m.Quote, m.Tradable, m.PricePrecision, m.BaseAmountPrecision, m.QuoteAmountPrecision))
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func newTestCatalogue(t *testing.T, base *url.URL, clock *fixedClock, log *zap.Logger, edit func(*CatalogueOptions)) *Catalogue {
	t.Helper()
	o := CatalogueOptions{BaseURL: base, Transport: http.DefaultTransport, Now: clock.now, Logger: log, Timeout: 2 * time.Second}
	if edit != nil {
		edit(&o)
	}
	c, err := NewCatalogue(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCatalogueFromReferenceBackend loads the catalogue from the real
// reference backend and checks orders against it.
func TestCatalogueFromReferenceBackend(t *testing.T) {
	backend := sim.New(sim.Options{})
	srv := httptest.NewServer(backend)
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	clock := &fixedClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	cat := newTestCatalogue(t, u, clock, nil, nil)
	strict, err := New(config.DefaultValidation(), cat, nil)
	if err != nil {
		t.Fatal(err)
	}
	passCfg := config.DefaultValidation()
	passCfg.BeforeCatalogue = config.BeforeCataloguePass
	lenient, err := New(passCfg, cat, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, p := strict.Check(jsonCT, []byte(limit())); p == nil || p.Status != 503 || p.Code != CodeCatalogueUnavailable {
		t.Errorf("before the first load: %v", p)
	}
	if o, p := lenient.Check(jsonCT, []byte(limit("base_amount", `"0.0000001"`))); p != nil || !o.Partial {
		t.Errorf("pass mode before the first load: %+v %v", o, p)
	}
	if err := cat.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if o, p := lenient.Check(jsonCT, []byte(limit("base_amount", `"0.0000001"`))); p == nil || o.Partial {
		t.Errorf("pass mode after the first load still skips market rules: %+v", o)
	}
	want := seedMarkets()
	slices.SortFunc(want, func(a, b Market) int { return strings.Compare(a.Symbol, b.Symbol) })
	if got := cat.Markets(); !slices.Equal(got, want) {
		t.Errorf("markets from the reference backend:\n%+v\nwant\n%+v", got, want)
	}
	if m, ok := cat.Market("LUNC_USDT"); !ok || m.Tradable {
		t.Errorf("LUNC_USDT = %+v, %v; want listed, not tradable", m, ok)
	}
	if !cat.LoadedAt().Equal(clock.t) {
		t.Errorf("LoadedAt = %v, want %v", cat.LoadedAt(), clock.t)
	}

	// Every order the validator accepts, the reference backend accepts.
	v := strict
	access, _, err := backend.IssueToken("dev")
	if err != nil {
		t.Fatal(err)
	}
	accepted := 0
	for _, c := range fixCases(edgeCases()) {
		if _, p := v.Check(jsonCT, []byte(c.body)); p != nil {
			continue
		}
		accepted++
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/v1/odr/orders/", strings.NewReader(c.body))
		req.Header.Set("Authorization", "Bearer "+access)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Errorf("%s: the gateway accepts it, the reference backend answers %d %s", c.name, resp.StatusCode, b)
		}
	}
	if accepted < 25 {
		t.Errorf("only %d accepted bodies were sent", accepted)
	}

	// The backend goes away: refreshes fail, the last good copy stays
	// and ages.
	srv.Close()
	clock.advance(90 * time.Second)
	if err := cat.Load(context.Background()); err == nil {
		t.Fatal("refresh from a stopped backend succeeded")
	}
	if len(cat.Markets()) != len(want) {
		t.Errorf("last good copy lost: %v", cat.Markets())
	}
	if age, ok := cat.Age(); !ok || age != 90*time.Second {
		t.Errorf("Age = %v, %v; want 1m30s", age, ok)
	}
	if _, p := strict.Check(jsonCT, []byte(limit())); p != nil {
		t.Errorf("orders no longer checked against the last good copy: %v", p)
	}
}

// catalogueFailure is a catalogue answer a refresh must refuse.
type catalogueFailure struct {
	name   string
	status int
	body   string
}

// catalogueFailures are the answers TestCatalogueRefresh refuses, most of
// them the catalogue of markets first spoilt in one place.
func catalogueFailures(first []Market) []catalogueFailure {
	return []catalogueFailure{
		{"server error", 500, `{"detail":"oops"}`},
		{"not found", 404, `not found`},
		{"rate limited", 429, `{"detail":"throttled"}`},
		{"redirect", 301, ``},
		{"not JSON", 200, `<html>`},
		{"an object", 200, `{"results":[]}`},
		{"null", 200, `null`},
		{"empty list", 200, `[]`},
		{"trailing data", 200, marketsJSON(first...) + `]`},
		{"negative precision", 200, strings.Replace(marketsJSON(first...), `"price_precision":"2"`, `"price_precision":"-1"`, 1)},
		{"precision 31", 200, strings.Replace(marketsJSON(first...), `"price_precision":"2"`, `"price_precision":"31"`, 1)},
		{"precision not a number", 200, strings.Replace(marketsJSON(first...), `"price_precision":"2"`, `"price_precision":"two"`, 1)},
		{"fractional precision", 200, strings.Replace(marketsJSON(first...), `"price_precision":"2"`, `"price_precision":2.5`, 1)},
		{"precision missing", 200, strings.Replace(marketsJSON(first...), `"price_precision":"2",`, ``, 1)},
		{"precision null", 200, strings.Replace(marketsJSON(first...), `"price_precision":"2"`, `"price_precision":null`, 1)},
		{"tradable missing", 200, strings.Replace(marketsJSON(first...), `"tradable":true,`, ``, 1)},
		{"tradable a string", 200, strings.Replace(marketsJSON(first...), `"tradable":true`, `"tradable":"yes"`, 1)},
		{"bad symbol", 200, strings.Replace(marketsJSON(first...), `"symbol":"BTC_USDT"`, `"symbol":"btc/usdt"`, 1)},
		{"symbol not base_quote", 200, strings.Replace(marketsJSON(first...), `"base":"BTC"`, `"base":"XBT"`, 1)},
		{"symbol listed twice", 200, marketsJSON(append(first, first[0])...)},
	}
}

func TestCatalogueRefresh(t *testing.T) {
	first := seedMarkets()[:2]
	srv := newScripted(t, 200, marketsJSON(first...))
	clock := &fixedClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	core, logs := observer.New(zapcore.InfoLevel)
	var loads []error
	cat := newTestCatalogue(t, srv.url(t), clock, zap.New(core), func(o *CatalogueOptions) {
		o.OnLoad = func(err error) { loads = append(loads, err) }
	})
	v, err := New(config.DefaultValidation(), cat, nil)
	if err != nil {
		t.Fatal(err)
	}

	// Before the first load.
	if cat.Ready() || !cat.LoadedAt().IsZero() || cat.Markets() != nil {
		t.Fatal("catalogue ready before loading")
	}
	if _, ok := cat.Age(); ok {
		t.Error("Age reports a value before the first load")
	}
	if _, p := v.Check(jsonCT, []byte(limit())); p == nil || p.Code != CodeCatalogueUnavailable {
		t.Errorf("before the first load: %v", p)
	}

	// First load.
	if err := cat.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if age, ok := cat.Age(); !ok || age != 0 {
		t.Errorf("Age after load = %v, %v", age, ok)
	}
	if _, p := v.Check(jsonCT, []byte(limit())); p != nil {
		t.Errorf("after the first load: %v", p.Fields)
	}
	if _, p := v.Check(jsonCT, []byte(edit(limitBase, "symbol", `"BTC_IRT"`, "price", `"6000000000"`))); p == nil || p.Fields["symbol"] == nil {
		t.Errorf("BTC_IRT is not in the first catalogue: %v", p)
	}

	// Age grows with the clock.
	clock.advance(45 * time.Second)
	if age, _ := cat.Age(); age != 45*time.Second {
		t.Errorf("Age = %v, want 45s", age)
	}

	// A refresh with new markets replaces the old ones.
	srv.set(200, marketsJSON(seedMarkets()...))
	if err := cat.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if age, _ := cat.Age(); age != 0 || len(cat.Markets()) != 6 {
		t.Errorf("after refresh: age %v, %d markets", age, len(cat.Markets()))
	}
	if _, p := v.Check(jsonCT, []byte(edit(limitBase, "symbol", `"BTC_IRT"`, "price", `"6000000000"`))); p != nil {
		t.Errorf("BTC_IRT after refresh: %v", p.Fields)
	}
	goodAt := cat.LoadedAt()

	// Failed refreshes keep the last good copy and its age.
	failures := catalogueFailures(first)
	for _, f := range failures {
		srv.set(f.status, f.body)
		clock.advance(time.Second)
		err := cat.Load(context.Background())
		if err == nil {
			t.Errorf("%s: refresh succeeded", f.name)
		}
		if len(cat.Markets()) != 6 || !cat.LoadedAt().Equal(goodAt) {
			t.Errorf("%s: last good copy lost: %d markets, loaded at %v", f.name, len(cat.Markets()), cat.LoadedAt())
		}
	}
	if age, _ := cat.Age(); age != time.Duration(len(failures))*time.Second {
		t.Errorf("Age after %d failed refreshes = %v", len(failures), age)
	}
	if _, p := v.Check(jsonCT, []byte(limit())); p != nil {
		t.Errorf("orders still checked against the last good copy: %v", p.Fields)
	}
	checkRefreshReports(t, logs, loads, len(failures))

	// An unchanged refresh keeps the compiled rules (same snapshot).
	srv.set(200, marketsJSON(seedMarkets()...))
	before := cat.snap.Load()
	if err := cat.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if cat.snap.Load() != before {
		t.Error("an unchanged catalogue replaced the snapshot")
	}
}

// checkRefreshReports checks what two good loads followed by failed refused
// refreshes logged and passed to OnLoad: one change line, and one warning and
// one error per refused refresh.
func checkRefreshReports(t *testing.T, logs *observer.ObservedLogs, loads []error, failed int) {
	t.Helper()
	if n := logs.FilterMessage("market catalogue refresh failed; keeping the last good copy").Len(); n != failed {
		t.Errorf("%d failure warnings logged, want %d", n, failed)
	}
	if n := logs.FilterMessage("market catalogue changed").Len(); n != 1 {
		t.Errorf("%d change lines logged, want 1", n)
	}
	nils := 0
	for _, e := range loads {
		if e == nil {
			nils++
		}
	}
	if len(loads) != 2+failed || nils != 2 {
		t.Errorf("OnLoad saw %d loads, %d successful", len(loads), nils)
	}
}

func TestCatalogueRequest(t *testing.T) {
	srv := newScripted(t, 200, marketsJSON(seedMarkets()...))
	base := srv.url(t)
	base.Path = "/base/"
	cat := newTestCatalogue(t, base, &fixedClock{}, nil, func(o *CatalogueOptions) {
		o.Token = "tok123"
		o.Path = "/api/v1/mkt/markets/"
	})
	if err := cat.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if srv.path != "/base/api/v1/mkt/markets/" {
		t.Errorf("path = %q", srv.path)
	}
	if got := srv.header.Get("Authorization"); got != "Bearer tok123" {
		t.Errorf("Authorization = %q", got)
	}
	if got := srv.header.Get("Accept"); got != "application/json" {
		t.Errorf("Accept = %q", got)
	}
}

func TestCatalogueLimits(t *testing.T) {
	body := marketsJSON(seedMarkets()...)
	srv := newScripted(t, 200, body)
	small := newTestCatalogue(t, srv.url(t), &fixedClock{}, nil, func(o *CatalogueOptions) { o.MaxBytes = int64(len(body) - 1) })
	if err := small.Load(context.Background()); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("oversize catalogue: %v", err)
	}
	exact := newTestCatalogue(t, srv.url(t), &fixedClock{}, nil, func(o *CatalogueOptions) { o.MaxBytes = int64(len(body)) })
	if err := exact.Load(context.Background()); err != nil {
		t.Errorf("catalogue of exactly MaxBytes: %v", err)
	}

	// A backend that never answers fails the fetch at its timeout.
	srv.mu.Lock()
	srv.block = true
	srv.mu.Unlock()
	slow := newTestCatalogue(t, srv.url(t), &fixedClock{}, nil, func(o *CatalogueOptions) { o.Timeout = 50 * time.Millisecond })
	if err := slow.Load(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("hanging backend: %v, want a deadline error", err)
	}

	// Nothing listening.
	dead := newTestCatalogue(t, &url.URL{Scheme: "http", Host: "127.0.0.1:1"}, &fixedClock{}, nil, nil)
	if err := dead.Load(context.Background()); err == nil {
		t.Error("load from a closed port succeeded")
	}
}

// TestCatalogueRun checks the refresh loop: it keeps retrying until the
// backend answers, then refreshes, and stops with its context.
func TestCatalogueRun(t *testing.T) {
	srv := newScripted(t, 503, `{"detail":"starting"}`)
	clock := &fixedClock{}
	var mu sync.Mutex
	var results []error
	cat := newTestCatalogue(t, srv.url(t), clock, nil, func(o *CatalogueOptions) {
		o.Refresh = 20 * time.Millisecond
		o.Now = time.Now
		o.OnLoad = func(err error) {
			mu.Lock()
			results = append(results, err)
			mu.Unlock()
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { cat.Run(ctx); close(done) }()

	waitFor(t, "three failed attempts", func() bool { return srv.hits.Load() >= 3 })
	if cat.Ready() {
		t.Fatal("ready while the backend fails")
	}
	srv.set(200, marketsJSON(seedMarkets()...))
	waitFor(t, "the first load", cat.Ready)
	hits := srv.hits.Load()
	waitFor(t, "further refreshes", func() bool { return srv.hits.Load() >= hits+2 })
	cancel()
	<-done
	after := srv.hits.Load()
	mu.Lock()
	defer mu.Unlock()
	if results[0] == nil || results[len(results)-1] != nil {
		t.Errorf("OnLoad results %v", results)
	}
	if srv.hits.Load() != after {
		t.Error("Run kept fetching after its context ended")
	}
}

// waitFor polls cond until it holds; the deadline only bounds a broken
// test, it asserts nothing about speed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestNewCatalogueOptions(t *testing.T) {
	u, _ := url.Parse("http://backend:9000")
	for _, o := range []CatalogueOptions{
		{Transport: http.DefaultTransport},
		{BaseURL: &url.URL{Path: "/x"}, Transport: http.DefaultTransport},
		{BaseURL: u},
		{BaseURL: u, Transport: http.DefaultTransport, Path: "api/markets"},
	} {
		if _, err := NewCatalogue(o); err == nil {
			t.Errorf("NewCatalogue(%+v) succeeded", o)
		}
	}
}

func TestCatalogueSet(t *testing.T) {
	cat := unloadedCatalogue(t)
	bad := [][]Market{
		nil,
		{{Symbol: "BTC_USDT", Base: "BTC", Quote: "USDT", PricePrecision: -1}},
		{{Symbol: "BTC_USDT", Base: "BTC", Quote: "USDT", BaseAmountPrecision: 31}},
		{{Symbol: "BTC_USDT", Base: "XBT", Quote: "USDT"}},
		{{Symbol: "btc_usdt", Base: "btc", Quote: "usdt"}},
		{seedMarkets()[0], seedMarkets()[0]},
	}
	for _, ms := range bad {
		if err := cat.Set(ms); err == nil {
			t.Errorf("Set(%+v) succeeded", ms)
		}
	}
	if cat.Ready() {
		t.Error("a refused Set made the catalogue ready")
	}
	ms := seedMarkets()
	if err := cat.Set(ms); err != nil {
		t.Fatal(err)
	}
	ms[0].Tradable = false // the caller's slice is copied
	if m, _ := cat.Market("BTC_USDT"); !m.Tradable {
		t.Error("Set kept the caller's slice")
	}
	got := cat.Markets()
	got[0].Symbol = "X"
	if cat.Markets()[0].Symbol == "X" {
		t.Error("Markets returned the catalogue's own slice")
	}
}

func TestParseMarketsAcceptsNumbersAndExtraFields(t *testing.T) {
	ms, err := ParseMarkets([]byte(`[{"symbol":"BTC_USDT","tradable":true,"price_precision":2,"base_amount_precision":"6","quote_amount_precision":"02","extra":{"x":1}}]`))
	if err != nil {
		t.Fatal(err)
	}
	want := Market{Symbol: "BTC_USDT", Base: "BTC", Quote: "USDT", Tradable: true, PricePrecision: 2, BaseAmountPrecision: 6, QuoteAmountPrecision: 2}
	if len(ms) != 1 || ms[0] != want {
		t.Errorf("ParseMarkets = %+v", ms)
	}
	if _, err := ParseMarkets(bytes.Repeat([]byte(" "), 3)); err == nil {
		t.Error("blank body parsed")
	}
}

func TestCatalogueLoadCancelled(t *testing.T) {
	srv := newScripted(t, 200, marketsJSON(seedMarkets()...))
	srv.mu.Lock()
	srv.block = true
	srv.mu.Unlock()
	core, logs := observer.New(zapcore.DebugLevel)
	calls := 0
	cat := newTestCatalogue(t, srv.url(t), &fixedClock{}, zap.New(core), func(o *CatalogueOptions) {
		o.OnLoad = func(error) { calls++ }
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { // cancel once the request is in flight
		for srv.hits.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	if err := cat.Load(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Load = %v, want context.Canceled", err)
	}
	if logs.Len() != 0 || calls != 0 {
		t.Errorf("a cancelled load logged %d lines and called OnLoad %d times", logs.Len(), calls)
	}
}
