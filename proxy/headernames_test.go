package proxy

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"reflect"
	"testing"

	"github.com/exgate/exgate/config"
)

func TestScanHeader(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		header                http.Header
		underscore, forwarded bool
	}{
		{"none", http.Header{}, false, false},
		{"dashes", http.Header{"X-Request-Id": {"a_b"}, "Accept": {"*/*"}}, false, false},
		{"underscore in a value only", http.Header{"X-Note": {"a_b"}}, false, false},
		{"X_Forwarded_For", http.Header{"X_Forwarded_For": {"1.2.3.4"}}, true, false},
		{"lower case", http.Header{"x_real_ip": {"1.2.3.4"}}, true, false},
		{"trailing", http.Header{"Authorization_": {"Bearer x"}}, true, false},
		{"alone", http.Header{"_": {"x"}}, true, false},
		{"among others", http.Header{"Accept": {"*/*"}, "X-A": {"1"}, "X_b": {"2"}}, true, false},
		{"X-Forwarded-Port", http.Header{"Accept": {"*/*"}, "X-Forwarded-Port": {"443"}}, false, true},
		{"X-Forwarded-For", http.Header{"X-Forwarded-For": {"1.2.3.4"}}, false, true},
		{"X-Forwarded without a dash", http.Header{"X-Forwardedport": {"1"}}, false, false},
		{"True-Client-IP", http.Header{"Accept": {"*/*"}, "True-Client-Ip": {"1.2.3.4"}}, false, true},
		{"X-Forwarded alone", http.Header{"X-Forwarded": {"for=1.2.3.4"}}, false, true},
		{"X-Client-IP", http.Header{"X-Client-Ip": {"1.2.3.4"}}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &http.Request{Method: "GET", RequestURI: "/", Proto: "HTTP/1.1", Host: "h", Header: tc.header}
			sc := scanHeader(r)
			if sc.underscore != tc.underscore || sc.forwarded != tc.forwarded {
				t.Fatalf("underscore %v forwarded %v, want %v %v", sc.underscore, sc.forwarded, tc.underscore, tc.forwarded)
			}
			want := int64(len("GET / HTTP/1.1\r\nHost: h\r\n"))
			for k, vs := range tc.header {
				for _, v := range vs {
					want += int64(len(k) + len(": \r\n") + len(v))
				}
			}
			if sc.size != want {
				t.Fatalf("size %d, want %d", sc.size, want)
			}
		})
	}
}

// TestScanHeaderFindsCheckedHeaders: the one pass finds each header
// checkHead reads or refuses by its canonical name, as a look-up of that
// name in the header map would: not under another spelling, and not a
// name without a header (nil values).
func TestScanHeaderFindsCheckedHeaders(t *testing.T) {
	for _, tc := range []struct {
		name                                     string
		connection, methodOverride, pathOverride bool
	}{
		{"Connection", true, false, false},
		{"X-Http-Method-Override", false, true, false},
		{"X-Http-Method", false, true, false},
		{"X-Method-Override", false, true, false},
		{"X-Original-Url", false, false, true},
		{"X-Rewrite-Url", false, false, true},
		{"X-Original-URL", false, false, false}, // not the canonical spelling: the map holds no such key
		{"connection", false, false, false},
		{"X-Http-Method-Overrides", false, false, false},
		{"Accept", false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, vs := range [][]string{{"x"}, {}, nil} {
				r := &http.Request{Method: "GET", RequestURI: "/", Proto: "HTTP/1.1", Host: "h",
					Header: http.Header{"Accept": {"*/*"}, tc.name: vs}}
				sc := scanHeader(r)
				_, found := r.Header[tc.name]
				found = found && vs != nil
				if got, want := [3]bool{sc.connection, sc.methodOverride, sc.pathOverride},
					[3]bool{tc.connection && found, tc.methodOverride && found, tc.pathOverride && found}; got != want {
					t.Fatalf("values %q: connection, method and path override %v, want %v", vs, got, want)
				}
			}
		})
	}
}

// BenchmarkScanHeader measures the one pass over a browser-like request
// head (nine headers, none refused or dropped) that sizes it and finds
// underscore names and the X-Forwarded-* family.
func BenchmarkScanHeader(b *testing.B) {
	r := &http.Request{Method: "POST", RequestURI: "/api/v1/odr/orders/", Proto: "HTTP/1.1", Host: "api.example", Header: http.Header{
		"Accept":          {"application/json"},
		"Accept-Encoding": {"gzip, deflate, br"},
		"Accept-Language": {"en-US,en;q=0.9"},
		"Authorization":   {"Bearer eyJhbGciOiJIUzI1NiJ9.e30.x"},
		"Content-Type":    {"application/json"},
		"Origin":          {"https://app.example"},
		"User-Agent":      {"Mozilla/5.0"},
		"X-Request-Id":    {"abc-123"},
		"Content-Length":  {"72"},
	}}
	b.ReportAllocs()
	for b.Loop() {
		if sc := scanHeader(r); sc.underscore || sc.forwarded {
			b.Fatal("refused")
		}
	}
}

// TestRewriteLooksUpOnlyWhatWasSent checks that rewrite, which removes and
// renames the headers isRewritten names only when scanHeader saw one of
// them, makes the outbound header it makes when it looks each one up.
func TestRewriteLooksUpOnlyWhatWasSent(t *testing.T) {
	g, err := newGateway(config.Default(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	type header struct {
		name string
		h    http.Header
	}
	var sent []header
	for _, name := range []string{"Upgrade", "Http2-Settings", "Expect", replayHeaders[0][0], replayHeaders[1][0], "Traceparent", "Tracestate", "Baggage", "Accept"} {
		sent = append(sent, header{name, http.Header{name: {"v"}}},
			header{name + " among others", http.Header{name: {"v"}, "Connection": {"Upgrade"}, "Content-Type": {"text/plain"}}})
	}
	for _, method := range []string{"GET", "POST", "DELETE"} {
		for _, tc := range sent {
			h := tc.h
			t.Run(method+" "+tc.name, func(t *testing.T) {
				// scanned: the state knows what scanHeader saw; else every
				// header is looked up (noDrops false).
				outbound := func(scanned bool) http.Header {
					in := httptest.NewRequest(method, "/api/v1/odr/orders/", nil)
					in.Header = h.Clone()
					st := new(requestState)
					if scanned {
						st.noDrops = !scanHeader(in).rewritten
					}
					pr := &httputil.ProxyRequest{In: in, Out: in.Clone(in.Context())}
					g.rewrite(st, pr)
					return pr.Out.Header
				}
				if got, want := outbound(true), outbound(false); !reflect.DeepEqual(got, want) {
					t.Fatalf("the outbound header is %v, looking each header up %v", got, want)
				}
			})
		}
	}
}

// TestForwardReaderLooksUpOnlyWhatWasSent checks that forwardReader, given
// that scanHeader saw none of the headers forwarding removes, leaves the
// header as it leaves it looking each one up.
func TestForwardReaderLooksUpOnlyWhatWasSent(t *testing.T) {
	for _, name := range []string{"Transfer-Encoding", "Expect", "Content-Length", "Accept"} {
		t.Run(name, func(t *testing.T) {
			forwarded := func(scanned bool) http.Header {
				r := httptest.NewRequest("POST", "/api/v1/odr/orders/", nil)
				r.Header = http.Header{name: {"v"}, "Content-Type": {"application/json"}}
				forwardReader(r, bytes.NewReader([]byte(`{}`)), scanned && !scanHeader(r).rewritten)
				return r.Header
			}
			if got, want := forwarded(true), forwarded(false); !reflect.DeepEqual(got, want) {
				t.Fatalf("the forwarded header is %v, looking each header up %v", got, want)
			}
		})
	}
}
