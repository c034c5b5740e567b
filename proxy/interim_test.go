package proxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
)

// TestBackendInterimFieldsFiltered: a backend's 1xx (103 Early Hints)
// reaches the client as its final answer would — without hop-by-hop
// fields or those its Connection names (RFC 9113 §8.2.2 has an HTTP/2
// client reset a stream whose answer carries Keep-Alive, Upgrade or
// Proxy-Connection), without the backend's CORS fields while exgate's
// policy is on, without an X-Request-ID exgate did not check — and its
// fields stay on it: the final answer carries the backend's final
// fields and exgate's own, never the 1xx's. Before, ReverseProxy passed
// a 1xx's fields unfiltered and exgate put every one of them on the final
// answer: a 103's Access-Control-Allow-Origin: * let a refused origin read
// the answer, its Content-Encoding: gzip made a JSON body unreadable, its
// Keep-Alive went on the final answer, and a final answer with RateLimit
// fields of the backend's lost exgate's.
func TestBackendInterimFieldsFiltered(t *testing.T) {
	const allowed, refused = "https://app.example", "https://evil.example"
	cases := []struct {
		name   string
		origin string
		hint   http.Header // the backend's 103
		final  http.Header // the backend's final answer (200, "[]")
		status int         // the client's final answer: 200, the backend's, when 0
		check  func(t *testing.T, interim, final http.Header)
	}{
		{"backend CORS, refused origin", refused,
			http.Header{"Access-Control-Allow-Origin": {"*"}, "Access-Control-Allow-Credentials": {"true"}, "Link": {"</a.css>; rel=preload"}}, nil, 0,
			func(t *testing.T, interim, final http.Header) {
				lacks(t, "103", interim, "Access-Control-Allow-Origin", "Access-Control-Allow-Credentials")
				lacks(t, "final answer", final, "Access-Control-Allow-Origin", "Access-Control-Allow-Credentials")
			}},
		{"backend CORS, allowed origin", allowed,
			http.Header{"Access-Control-Allow-Origin": {refused}, "Access-Control-Expose-Headers": {"X-Debug"}}, nil, 0,
			func(t *testing.T, interim, final http.Header) {
				for what, h := range map[string]http.Header{"103": interim, "final answer": final} {
					if v := h["Access-Control-Allow-Origin"]; !slices.Equal(v, []string{allowed}) {
						t.Errorf("%s: Access-Control-Allow-Origin %q, want exgate's alone", what, v)
					}
					if v := h["Access-Control-Expose-Headers"]; slices.Contains(v, "X-Debug") {
						t.Errorf("%s: Access-Control-Expose-Headers %q, want exgate's alone", what, v)
					}
				}
			}},
		{"hop-by-hop fields", allowed,
			http.Header{"Keep-Alive": {"timeout=5"}, "Upgrade": {"h2c"}, "Proxy-Connection": {"keep-alive"},
				"Connection": {"keep-alive, X-Debug"}, "X-Debug": {"1"}, "Link": {"</a.css>; rel=preload"}}, nil, 0,
			func(t *testing.T, interim, final http.Header) {
				for what, h := range map[string]http.Header{"103": interim, "final answer": final} {
					lacks(t, what, h, "Keep-Alive", "Upgrade", "Proxy-Connection", "Connection", "X-Debug")
				}
				if interim.Get("Link") == "" {
					t.Errorf("103 without its Link: %v", interim)
				}
			}},
		{"the 103's fields stay on it", allowed,
			http.Header{"Content-Encoding": {"gzip"}, "Set-Cookie": {"sid=1"}, "Link": {"</a.css>; rel=preload"}}, nil, 0,
			func(t *testing.T, interim, final http.Header) {
				if interim.Get("Link") == "" || interim.Get("Set-Cookie") == "" {
					t.Errorf("103 without its fields: %v", interim)
				}
				lacks(t, "final answer", final, "Content-Encoding", "Set-Cookie", "Link")
			}},
		{"another request's id", allowed,
			http.Header{"X-Request-Id": {"another-request"}}, nil, 0,
			func(t *testing.T, interim, final http.Header) {
				lacks(t, "103", interim, "X-Request-Id")
				if id := final.Get("X-Request-Id"); id == "" || id == "another-request" {
					t.Errorf("final answer with X-Request-Id %q, want the request's", id)
				}
			}},
		{"a final answer of another request's", allowed,
			http.Header{"Content-Encoding": {"gzip"}, "Set-Cookie": {"sid=other"}, "Link": {"</a.css>; rel=preload"}},
			http.Header{"X-Request-Id": {"another-request"}, "Content-Encoding": {"gzip"}}, http.StatusBadGateway,
			func(t *testing.T, interim, final http.Header) {
				lacks(t, "exgate's 502", final, "Content-Encoding", "Set-Cookie", "Link")
			}},
		{"exgate's own fields before the backend's", allowed,
			http.Header{"Link": {"</a.css>; rel=preload"}}, http.Header{"Ratelimit": {`"backend";r=0;t=1`}}, 0,
			func(t *testing.T, interim, final http.Header) {
				for what, h := range map[string]http.Header{"103": interim, "final answer": final} {
					if f := h["Ratelimit"]; len(f) == 0 || !strings.HasPrefix(f[0], `"address";r=`) {
						t.Errorf("%s: RateLimit %q, want exgate's first", what, f)
					}
				}
				if f := final["Ratelimit"]; len(f) != 2 || f[1] != `"backend";r=0;t=1` {
					t.Errorf("final answer: RateLimit %q, want exgate's, then the backend's", f)
				}
			}},
	}
	e := startLimited(t, nil, func(c *config.Config) { c.CORS.AllowedOrigins = []string{allowed} })
	for _, p := range bothProtocols(t, e) {
		for _, tc := range cases {
			t.Run(p.name+"/"+tc.name, func(t *testing.T) {
				interim, res, body := askHinted(t, e, p.client, p.url, tc.origin, tc.hint, tc.final)
				want, wantBody := http.StatusOK, "[]"
				if tc.status != 0 {
					want, wantBody = tc.status, `{"detail":`
				}
				if res.StatusCode != want || res.ProtoMajor != p.major || !strings.HasPrefix(string(body), wantBody) || len(interim) != 1 {
					t.Fatalf("%s %d %q after %d 1xx answers, want %d %s… after one 103", res.Proto, res.StatusCode, body, len(interim), want, wantBody)
				}
				tc.check(t, interim[0], res.Header)
			})
		}
	}
}

// protocolClient is a client of the gateway over one protocol.
type protocolClient struct {
	name   string
	url    string
	client *http.Client
	major  int
}

// bothProtocols returns clients of e's gateway over HTTP/1.1 and, the
// same gateway served over TLS, HTTP/2, neither asking for compression.
func bothProtocols(t *testing.T, e *env) []protocolClient {
	h1 := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	t.Cleanup(h1.CloseIdleConnections)
	front := httptest.NewUnstartedServer(e.gw)
	front.EnableHTTP2 = true
	front.StartTLS()
	t.Cleanup(front.Close)
	h2 := front.Client()
	h2.Transport.(*http.Transport).DisableCompression = true
	return []protocolClient{{"HTTP/1.1", e.url, h1, 1}, {"HTTP/2", front.URL, h2, 2}}
}

// askHinted has e's backend answer a 103 with the fields hint, then 200
// "[]" with the fields final, and asks it through client at url from
// origin: the 1xx answers' fields the client got, its final answer and
// that answer's body.
func askHinted(t *testing.T, e *env, client *http.Client, url, origin string, hint, final http.Header) ([]http.Header, *http.Response, []byte) {
	t.Helper()
	e.backend.handler = func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		for k, v := range hint {
			h[k] = v
		}
		w.WriteHeader(http.StatusEarlyHints)
		clear(h)
		for k, v := range final {
			h[k] = v
		}
		h.Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, "[]")
	}
	var interim []http.Header
	req, _ := http.NewRequest("GET", url+"/api/v1/mkt/markets/", nil)
	req.Header.Set("Origin", origin)
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		Got1xxResponse: func(_ int, h textproto.MIMEHeader) error { interim = append(interim, http.Header(h)); return nil },
	}))
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return interim, res, body
}

// lacks reports each of names that h, the header of what, carries.
func lacks(t *testing.T, what string, h http.Header, names ...string) {
	t.Helper()
	for _, k := range names {
		if v, ok := h[k]; ok {
			t.Errorf("%s carries %s %q", what, k, v)
		}
	}
}

// TestBackendInterimAnswersBounded: a backend's 1xx answers reach the
// client only as HTTP allows and only so many. Go's Transport leaves it to
// the hook that reads them (ReverseProxy's, which passes every one on) to
// bound how many a response may have (golang/go#65035): before, a backend
// that sent a thousand 103s before its answer had exgate write a thousand
// to the client, and would have gone on until the route's timeout. Past
// maxInterim the call is cut and answered 502. And RFC 9110 §15.2 forbids a
// 1xx to an HTTP/1.0 client, which reads the first status line as the
// answer (a proxy in front speaking HTTP/1.0, NGINX's default
// proxy_http_version, would take the 103 and everything after it for the
// answer): before, exgate wrote it "HTTP/1.0 103 Early Hints".
func TestBackendInterimAnswersBounded(t *testing.T) {
	// interims: the 103s the backend sends before its answer; status: the
	// client's final answer; passed: the 1xx answers the client gets over
	// HTTP/1.1 and HTTP/2.
	cases := []interimCase{
		{"one", 1, http.StatusOK, 1},
		{"at the bound", maxInterim, http.StatusOK, maxInterim},
		{"one past the bound", maxInterim + 1, http.StatusBadGateway, maxInterim},
		{"a flood", 1000, http.StatusBadGateway, maxInterim},
	}
	for _, b := range []struct {
		name string
		env  func(t *testing.T) *env
	}{{"HTTP/1.1 backend", func(t *testing.T) *env { return startLimited(t, nil, nil) }}, {"HTTP/2 backend", startHTTP2Backend}} {
		t.Run(b.name, func(t *testing.T) { interimBounded(t, b.env(t), cases) })
	}
}

// interimCase is a case of TestBackendInterimAnswersBounded.
type interimCase = struct {
	name     string
	interims int
	status   int
	passed   int
}

// interimBounded runs TestBackendInterimAnswersBounded's cases against
// e, from HTTP/1.1, HTTP/2 and HTTP/1.0 clients.
func interimBounded(t *testing.T, e *env, cases []interimCase) {
	protocols := bothProtocols(t, e)
	for _, tc := range cases {
		e.backend.handler = func(w http.ResponseWriter, _ *http.Request) {
			// The header is not touched once a 1xx is written: net/http's
			// HTTP/2 server may still be writing it.
			w.Header().Set("Link", "</a.css>; rel=preload")
			w.Header().Set("Content-Type", "application/json")
			for range tc.interims {
				w.WriteHeader(http.StatusEarlyHints)
			}
			_, _ = io.WriteString(w, "[]")
		}
		for _, p := range protocols {
			t.Run(p.name+"/"+tc.name, func(t *testing.T) {
				interims := 0
				req, _ := http.NewRequest("GET", p.url+"/api/v1/mkt/markets/", nil)
				req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
					Got1xxResponse: func(int, textproto.MIMEHeader) error { interims++; return nil },
				}))
				res, err := p.client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != tc.status || interims != tc.passed {
					t.Fatalf("%d %q after %d 1xx answers, want %d after %d", res.StatusCode, body, interims, tc.status, tc.passed)
				}
				if tc.status != http.StatusOK && !strings.Contains(string(body), `"code":"bad_gateway"`) {
					t.Fatalf("answer %q, want exgate's bad_gateway", body)
				}
			})
		}
		t.Run("HTTP/1.0/"+tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", e.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(c, "GET /api/v1/mkt/markets/ HTTP/1.0\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			res, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tc.status {
				t.Fatalf("an HTTP/1.0 client read %s %q, want %d: no 1xx answer", res.Status, body, tc.status)
			}
		})
	}
}

// startHTTP2Backend starts a gateway in front of a backend it calls over
// HTTP/2 (TLS, ALPN).
func startHTTP2Backend(t *testing.T) *env {
	be := &backend{}
	bs := httptest.NewUnstartedServer(be)
	bs.EnableHTTP2 = true
	bs.StartTLS()
	t.Cleanup(bs.Close)
	cfg := config.Default()
	cfg.Upstream.URL = config.MustURL(bs.URL)
	return serve(t, cfg, be, Options{Transport: bs.Client().Transport})
}

// TestOrderInterimFloodOutcomeUnknown: an order whose backend is cut for
// its 1xx answers reached the backend: its client is told its outcome is
// unknown, and a retry with its identifier is answered 409
// outcome_unknown, never sent again.
func TestOrderInterimFloodOutcomeUnknown(t *testing.T) {
	const order = `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.5","identifier":"flood-1"}`
	e := startOrdersConfig(t, func(w http.ResponseWriter, _ *http.Request) {
		for range 100 {
			w.WriteHeader(http.StatusEarlyHints)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":1}`)
	}, nil, nil)
	for _, tc := range []struct {
		name    string
		status  int
		code    string
		unknown bool // the detail says the outcome is unknown
	}{
		{"first", http.StatusBadGateway, "bad_gateway", true},
		{"retry", http.StatusConflict, "outcome_unknown", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := do(t, "POST", e.url+"/api/v1/odr/orders/", strings.NewReader(order),
				"Authorization", "Bearer tok", "Content-Type", "application/json")
			eb := assertError(t, res, tc.status, tc.code)
			if tc.unknown && !strings.Contains(eb.Detail, "outcome is unknown") {
				t.Errorf("detail %q, want it to say the outcome is unknown", eb.Detail)
			}
			if n := e.backend.count(); n != 1 {
				t.Errorf("the backend received %d orders, want 1", n)
			}
		})
	}
}

// TestInterimHTTP2ClientReset: a client that resets its HTTP/2 stream as
// a backend's 103 is written to it ends its own request, never the
// process. net/http's HTTP/2 server writes a 1xx's header map itself,
// and when the stream is reset meanwhile returns before a write too
// large for the connection's buffer is encoded, on a goroutine of its
// own; ReverseProxy then cleared the map and exgate wrote it while that
// goroutine read it: under -race a data race, without it a concurrent
// map write and iteration, a fatal error no recover catches. exgate has
// the server write a copy (interimCopy). Each 103 still reaches a client
// that keeps its stream, without the Content-Length that asks for the
// copy, over HTTP/1.1 and HTTP/2.
func TestInterimHTTP2ClientReset(t *testing.T) {
	e := startLimited(t, nil, nil)
	for _, tc := range []struct {
		name string
		link int // bytes of the 103's Link: past the connection's 4 KiB buffer, written on a goroutine
	}{{"small 103", 64}, {"large 103", 6 << 10}} {
		hints := func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Link", "</a.css>; rel=preload; x="+strings.Repeat("x", tc.link))
			w.Header().Set("Content-Type", "application/json")
			for range maxInterim {
				w.WriteHeader(http.StatusEarlyHints)
			}
			_, _ = io.WriteString(w, "[]")
		}
		for _, p := range bothProtocols(t, e) {
			t.Run(p.name+"/"+tc.name, func(t *testing.T) {
				e.backend.handler = hints
				for range 60 { // resets at the first 103
					ctx, cancel := context.WithCancel(context.Background())
					req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
						Got1xxResponse: func(int, textproto.MIMEHeader) error { cancel(); return nil },
					}), "GET", p.url+"/api/v1/mkt/markets/", nil)
					if res, err := p.client.Do(req); err == nil {
						_, _ = io.Copy(io.Discard, res.Body)
						res.Body.Close()
					}
					cancel()
				}
				interim, res, body := askHinted(t, e, p.client, p.url, "", http.Header{"Link": {"</a.css>; rel=preload"}}, nil)
				if res.StatusCode != http.StatusOK || len(interim) != 1 || interim[0].Get("Link") == "" {
					t.Fatalf("%d %q after 1xx answers %v, want 200 after a 103 with its Link", res.StatusCode, body, interim)
				}
				lacks(t, "103", interim[0], "Content-Length")
			})
		}
	}
}

// TestInterimLinkNotTheInstance: a backend's 103 Early Hints carries
// Link fields (preload) built as its final answer's are, from the
// instance's address when that is its Host; on main they reached the
// client as sent. They are rewritten as a final answer's Link is
// (unexposeInstance), over HTTP/1.1 and HTTP/2.
func TestInterimLinkNotTheInstance(t *testing.T) {
	e := startEnv(t, nil)
	inst := e.gw.fleet.Service("").Instances()[0].URL
	base := inst.Scheme + "://" + inst.Host + strings.TrimSuffix(inst.Path, "/")
	tests := []struct{ name, link, want string }{
		{"a preload below the instance", "<" + base + "/static/a.css>; rel=preload; as=style", "</static/a.css>; rel=preload; as=style"},
		{"a preload of another host", "<https://cdn.exchange.example/a.css>; rel=preload", "<https://cdn.exchange.example/a.css>; rel=preload"},
	}
	for _, p := range bothProtocols(t, e) {
		for _, tt := range tests {
			t.Run(p.name+"/"+tt.name, func(t *testing.T) {
				interim, res, _ := askHinted(t, e, p.client, p.url, "", http.Header{"Link": {tt.link}}, nil)
				if res.StatusCode != http.StatusOK || len(interim) != 1 || interim[0].Get("Link") != tt.want {
					t.Errorf("%d after %d 1xx answers (%v), want the 103's Link %q", res.StatusCode, len(interim), interim, tt.want)
				}
			})
		}
	}
}
