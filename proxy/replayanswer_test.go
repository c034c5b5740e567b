package proxy

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/exgate/exgate/idempotency"
)

// browserAccept is the Accept a browser sends with a navigation.
const browserAccept = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"

// TestReplayNegotiation: a retry of a placed order gets the kept answer
// when its Accept takes the answer's Content-Type as the order's did
// (with the same parameters: DRF's AcceptHeaderVersioning reads the API
// version from them), or is the order's own Accept, and, when the answer
// applied a return preference, its Prefer asks for the same; else 406.
func TestReplayNegotiation(t *testing.T) {
	const js, html = "application/json", "text/html; charset=utf-8"
	cases := []struct {
		name               string
		order, ct          string // the order's Accept, its answer's Content-Type
		applied            string // the answer's Preference-Applied
		retry, retryPrefer string
		want               bool // replayed
	}{
		{name: "no Accept, none", ct: js, want: true},
		{name: "no Accept, */*", ct: js, retry: "*/*", want: true},
		{name: "no Accept, application/*", ct: js, retry: "application/*", want: true},
		{name: "JSON, retried for HTML", order: js, ct: js, retry: "text/html"},
		{name: "JSON, retried by a browser", order: js, ct: js, retry: browserAccept, want: true},
		{name: "JSON, retried refusing JSON", order: js, ct: js, retry: "application/json;q=0, */*"},
		{name: "JSON, retried refusing JSON with q=0.000", order: js, ct: js, retry: "*/*, application/json; q=0.000"},
		{name: "HTML, retried for JSON", order: browserAccept, ct: html, retry: js},
		{name: "HTML, retried by a browser", order: browserAccept, ct: html, retry: browserAccept, want: true},
		{name: "HTML, retried with text/*", order: "text/html", ct: html, retry: "text/*", want: true},
		{name: "version 2, retried the same", order: "application/json; version=2.0", ct: js, retry: "application/json; version=2.0", want: true},
		{name: "version 2, retried spelled otherwise", order: "application/json; version=2.0", ct: js, retry: `application/JSON;VERSION="2.0";q=0.9`, want: true},
		{name: "version 2 in capitals, retried in lower case", order: "application/json; VERSION=2.0", ct: js, retry: "application/json; version=2.0", want: true},
		{name: "a Content-Type in capitals, retried for JSON", order: js, ct: "Application/JSON", retry: js, want: true},
		{name: "a Content-Type in capitals, retried for HTML", order: js, ct: "Application/JSON", retry: "text/html"},
		{name: "version 2 with q, retried without q", order: "application/json; version=2.0; q=0.9, */*;q=0.1", ct: js, retry: "application/json;version=2.0", want: true},
		{name: "version 2, retried for version 1", order: "application/json; version=2.0", ct: js, retry: "application/json; version=1.0"},
		{name: "version 2, retried without a version", order: "application/json; version=2.0", ct: js, retry: js},
		{name: "version 2, retried with */*", order: "application/json; version=2.0", ct: js, retry: "*/*"},
		{name: "no version, retried for version 1", order: js, ct: js, retry: "application/json; version=1.0"},
		{name: "Accept disregarded, retried the same", order: "text/csv", ct: js, retry: "text/csv", want: true},
		{name: "Accept disregarded, retried for JSON", order: "text/csv", ct: js, retry: js, want: true},
		{name: "Accept disregarded, retried for PNG", order: "text/csv", ct: js, retry: "image/png"},
		{name: "no Content-Type", order: js, retry: "image/png", want: true},
		{name: "minimal, retried minimal", ct: js, applied: "return=minimal", retryPrefer: "return=minimal", want: true},
		{name: "minimal, retried among others", ct: js, applied: "return=minimal", retryPrefer: `respond-async, return="minimal"; x=1`, want: true},
		{name: "Minimal in capitals, retried minimal", ct: js, applied: "return=Minimal", retryPrefer: "return=minimal", want: true},
		{name: "minimal, retried with no Prefer", ct: js, applied: "return=minimal"},
		{name: "minimal, retried for the representation", ct: js, applied: "return=minimal", retryPrefer: "return=representation"},
		{name: "Prefer not applied", ct: js, retryPrefer: "return=minimal", want: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &idempotency.Record{Status: 201, ContentType: tc.ct, Accept: acceptAsked(tc.order, tc.ct)}
			if tc.applied != "" {
				rec.Header = []string{"Preference-Applied", tc.applied}
			}
			h := http.Header{}
			if tc.retry != "" {
				h.Set("Accept", tc.retry)
			}
			if tc.retryPrefer != "" {
				h.Set("Prefer", tc.retryPrefer)
			}
			e := replayRefusal(h, rec)
			if (e == nil) != tc.want {
				t.Errorf("kept Accept %q: refusal %v, want replayed %v", rec.Accept, e, tc.want)
			}
			if e != nil && (e.Status != http.StatusNotAcceptable || e.Code != "not_acceptable" || !strings.Contains(e.Detail, "already placed")) {
				t.Errorf("refusal %d %s %q", e.Status, e.Code, e.Detail)
			}
		})
	}
}

// negotiatingBackend places an order as Django REST framework does with
// its default renderers: HTML to an Accept that prefers text/html, else
// JSON, each 201 with the order's Location, an ETag and headers no
// replay carries; with Prefer: return=minimal, an empty 201 that says it
// applied it.
func negotiatingBackend(placed *atomic.Int64) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		n := placed.Add(1)
		h := w.Header()
		h.Set("Location", "/api/v1/odr/orders/"+strconv.FormatInt(n, 10)+"/")
		h.Set("ETag", `"`+strconv.FormatInt(n, 10)+`"`)
		h.Set("Set-Cookie", "sessionid=backend")
		h.Set("Cache-Control", "max-age=60")
		h.Set("X-Backend", "b1")
		h.Set("Vary", "Accept")
		if strings.Contains(r.Header.Get("Prefer"), "return=minimal") {
			h.Set("Preference-Applied", "return=minimal")
			w.WriteHeader(http.StatusCreated)
			return
		}
		if strings.HasPrefix(r.Header.Get("Accept"), "text/html") {
			h.Set("Content-Type", "text/html; charset=utf-8")
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, "<p>Order "+strconv.FormatInt(n, 10)+" placed</p>")
			return
		}
		h.Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":`+strconv.FormatInt(n, 10)+`}`)
	}
}

// TestReplayCarriesTheOrdersHeaders: a retry that asks for the kept
// answer gets it with the backend's headers about the order (Location,
// ETag, Preference-Applied), never its per-response or session headers;
// one that asks for another representation gets 406 not_acceptable, and
// the order is placed once — with either claim mode, for an order and a
// bulk alike.
func TestReplayCarriesTheOrdersHeaders(t *testing.T) {
	cases := []struct {
		name                 string
		first, retry         []string // the order's and the retry's headers
		bulk                 bool
		wantStatus           int
		wantBody, wantHeader string // the retry's body (a prefix) and its Location
	}{
		{name: "JSON, retried the same", first: []string{"Accept", "application/json"}, retry: []string{"Accept", "application/json"},
			wantStatus: 201, wantBody: `{"id":1}`, wantHeader: "/api/v1/odr/orders/1/"},
		{name: "JSON, retried with no Accept", first: []string{"Accept", "application/json"},
			wantStatus: 201, wantBody: `{"id":1}`, wantHeader: "/api/v1/odr/orders/1/"},
		{name: "bulk, JSON, retried the same", first: []string{"Accept", "*/*"}, retry: []string{"Accept", "*/*"}, bulk: true,
			wantStatus: 201, wantBody: `{"id":1}`, wantHeader: "/api/v1/odr/orders/1/"},
		{name: "HTML, retried for JSON", first: []string{"Accept", browserAccept}, retry: []string{"Accept", "application/json"},
			wantStatus: 406, wantBody: `{"detail":"This order was already placed`},
		{name: "bulk, HTML, retried for JSON", first: []string{"Accept", browserAccept}, retry: []string{"Accept", "application/json"}, bulk: true,
			wantStatus: 406, wantBody: `{"detail":"This order was already placed`},
		{name: "HTML, retried by the browser", first: []string{"Accept", browserAccept}, retry: []string{"Accept", browserAccept},
			wantStatus: 201, wantBody: "<p>Order 1 placed</p>", wantHeader: "/api/v1/odr/orders/1/"},
		{name: "minimal, retried minimal", first: []string{"Prefer", "return=minimal"}, retry: []string{"Prefer", "return=minimal"},
			wantStatus: 201, wantHeader: "/api/v1/odr/orders/1/"},
		{name: "minimal, retried for the representation", first: []string{"Prefer", "return=minimal"}, retry: []string{"Prefer", "return=representation"},
			wantStatus: 406, wantBody: `{"detail":"This order was already placed`},
	}
	for _, m := range claimModes(t) {
		for i, tc := range cases {
			t.Run(m.name+"/"+tc.name, func(t *testing.T) {
				var placed atomic.Int64
				e := startOrdersWith(t, negotiatingBackend(&placed), nil, m.lim, nil, m.idem)
				id := "neg" + m.name + strconv.Itoa(i) // one Redis serves every case
				send := func(h []string) *http.Response {
					if tc.bulk {
						return postBulk(t, e, "["+bulkOrder(0, id)+"]", h...)
					}
					return postOrder(t, e, bulkOrder(0, id), h...)
				}
				first := send(tc.first)
				_, _ = io.Copy(io.Discard, first.Body)
				first.Body.Close()
				if first.StatusCode != http.StatusCreated {
					t.Fatalf("order: %d", first.StatusCode)
				}
				res := send(tc.retry)
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				replayed := res.Header.Get(idempotency.ReplayedHeader) == "true"
				if res.StatusCode != tc.wantStatus || !strings.HasPrefix(string(b), tc.wantBody) || replayed != (tc.wantStatus == 201) {
					t.Errorf("retry: %d %q replayed %v, want %d %q", res.StatusCode, b, replayed, tc.wantStatus, tc.wantBody)
				}
				if got := res.Header.Get("Location"); got != tc.wantHeader {
					t.Errorf("retry's Location %q, want %q", got, tc.wantHeader)
				}
				if tc.wantStatus == 201 {
					want := map[string]string{"Etag": `"1"`, "Set-Cookie": "", "Cache-Control": "", "X-Backend": "", "Vary": "",
						"Preference-Applied": first.Header.Get("Preference-Applied")}
					for name, v := range want {
						if got := res.Header.Get(name); got != v {
							t.Errorf("retry's %s %q, want %q", name, got, v)
						}
					}
				}
				if n := placed.Load(); n != 1 {
					t.Errorf("backend placed %d orders, want 1", n)
				}
			})
		}
	}
}

// FuzzReplayNegotiation reads any Accept and Content-Type as a retry's
// and a kept answer's: never a panic, and a retry sending the order's own
// Accept always gets the order's kept answer.
func FuzzReplayNegotiation(f *testing.F) {
	for _, s := range [][2]string{
		{"application/json; version=2.0; q=0.9, */*;q=0.1", "application/json"},
		{browserAccept, "text/html; charset=utf-8"},
		{`application/JSON;VERSION="2.0";q=0`, "Application/JSON"},
		{";;,, ;q=;=", "/;"},
		{"*/*;q=0.000", ""},
	} {
		f.Add(s[0], s[1], "application/json")
	}
	f.Fuzz(func(t *testing.T, order, ct, retry string) {
		rec := &idempotency.Record{Status: 201, ContentType: ct, Accept: acceptAsked(order, ct)}
		if e := replayRefusal(http.Header{"Accept": {order}}, rec); e != nil {
			t.Fatalf("the order's own Accept %q (kept %q, Content-Type %q) refused: %s", order, rec.Accept, ct, e.Detail)
		}
		_ = replayRefusal(http.Header{"Accept": {retry}}, rec)
	})
}
