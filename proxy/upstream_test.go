package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/upstream"
)

// rawBackend is a backend written on a bare net.Listener, driven by hand,
// that misbehaves on its keep-alive connections the ways real backends
// do. It answers every request with its X-Request-ID, echoed in the
// X-Request-Id and X-Echo headers and in the body as {"id":"…"}, and then,
// as the request's "m" query parameter says:
//
//	ok      nothing more
//	stray   a second, unsolicited response (id "stray-…") on the same
//	        connection a moment later, when it is idle or carries the next request
//	head    (HEAD) a body after the HEAD answer, itself a whole response
//	1xx     a 103 Early Hints before the answer and a stray 100 Continue after it
//	close   "Connection: close", then a stray response, with the connection left open
//	early   (POST) the answer before the body is read; the body, a request of
//	        its own, is then read and answered as the next request ("smuggled-…")
//	status  an answer with the status code of the "s" query parameter, as
//	        written (000, 600, …)
type rawBackend struct {
	ln      net.Listener
	strays  atomic.Int64 // unsolicited responses written
	answers atomic.Int64 // answers written to requests exgate sent
}

func startRawBackend(t *testing.T) *rawBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &rawBackend{ln: ln}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
			wg.Add(1)
			go func() { defer wg.Done(); b.serveConn(c) }()
		}
	}()
	return b
}

// rawResponse is a whole response naming id.
func rawResponse(status, id string, extra string) string {
	body := `{"id":"` + id + `"}`
	return "HTTP/1.1 " + status + "\r\nContent-Type: application/json\r\nX-Request-Id: " + id +
		"\r\nX-Echo: " + id + "\r\n" + extra + "Content-Length: " + fmt.Sprint(len(body)) + "\r\n\r\n" + body
}

func (b *rawBackend) serveConn(c net.Conn) {
	defer c.Close()
	var mu sync.Mutex // one write at a time: strays are written from timers
	write := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.WriteString(c, s)
	}
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		id := req.Header.Get("X-Request-Id")
		mode := req.URL.Query().Get("m")
		if strings.HasPrefix(id, "smuggled-") {
			b.strays.Add(1)
			write(rawResponse("200 OK", id, ""))
			continue
		}
		if mode != "early" {
			_, _ = io.Copy(io.Discard, req.Body)
		}
		b.answers.Add(1)
		switch mode {
		case "stray":
			write(rawResponse("200 OK", id, ""))
			time.AfterFunc(time.Duration(len(id)%3)*time.Millisecond, func() {
				b.strays.Add(1)
				write(rawResponse("200 OK", "stray-"+id, ""))
			})
		case "head":
			stray := rawResponse("200 OK", "stray-"+id, "")
			write("HTTP/1.1 200 OK\r\nX-Request-Id: " + id + "\r\nX-Echo: " + id +
				"\r\nContent-Length: " + fmt.Sprint(len(stray)) + "\r\n\r\n" + stray)
			b.strays.Add(1)
		case "1xx":
			write("HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n" + rawResponse("200 OK", id, ""))
			write("HTTP/1.1 100 Continue\r\n\r\n")
			b.strays.Add(1)
		case "close":
			write(rawResponse("200 OK", id, "Connection: close\r\n") + rawResponse("200 OK", "stray-"+id, ""))
			b.strays.Add(1)
		case "early":
			// The body is left unread: the next ReadRequest parses it.
			write(rawResponse("200 OK", id, ""))
		case "status":
			write(rawResponse(req.URL.Query().Get("s")+" Odd", id, ""))
		default:
			write(rawResponse("200 OK", id, ""))
		}
	}
}

// TestNoClientGetsAnotherRequestsResponse sends many requests, one at a
// time and from many clients at once, each with its own id, through
// exgate to a backend that misbehaves on its keep-alive connections
// (rawBackend), and checks that every client gets its own answer or one of
// exgate's JSON 502/504 errors, never a response that was for another
// request.
func TestNoClientGetsAnotherRequestsResponse(t *testing.T) {
	be := startRawBackend(t)
	cfg := config.Default()
	cfg.Upstream.URL = config.MustURL("http://" + be.ln.Addr().String())
	cfg.Upstream.Timeout = 2 * time.Second
	// The adaptive concurrency limit is not under test: it reads the
	// misbehaving backend's errors and a loaded machine's latencies as
	// overload and sheds (503 overloaded), which answers no one with
	// another's response but leaves fewer requests to check.
	cfg.Overload.Enabled = false
	e := serve(t, cfg, &backend{}, Options{})

	modes := []string{"ok", "stray", "ok", "1xx", "close", "early", "head", "stray", "ok"}
	// Its idle connections are closed after a second, before exgate's
	// server.read_header_timeout (5s): the concurrent requests leave
	// connections in its pool that carried none (dialed for a request
	// another connection, freed meanwhile, then carried), which exgate
	// closes then, and a POST written into one as it does got a bare EOF
	// (fault's TestKeepAliveUnusedConnection).
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: time.Second}, Timeout: 10 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	var own, refused atomic.Int64
	check := func(t *testing.T, n int, id string) {
		mode := modes[n%len(modes)]
		method, body := http.MethodGet, io.Reader(nil)
		switch mode {
		case "head":
			method = http.MethodHead
		case "early":
			method = http.MethodPost
			body = strings.NewReader("GET /next HTTP/1.1\r\nHost: backend\r\nX-Request-Id: smuggled-" + id + "\r\n\r\n")
		}
		req, err := http.NewRequest(method, e.url+"/api/v1/test/?m="+mode, body)
		if err != nil {
			t.Error(err)
			return
		}
		req.Header.Set("X-Request-Id", id)
		res, err := client.Do(req)
		if err != nil {
			t.Errorf("%s %s: %v", mode, id, err)
			return
		}
		got, _ := io.ReadAll(res.Body)
		res.Body.Close()
		switch res.StatusCode {
		case http.StatusOK:
			// The backend saw the client's id made unique (upstreamValue).
			echo := res.Header.Get("X-Echo")
			fresh, mine := strings.CutPrefix(echo, id+".")
			mine = mine && fresh != "" && !strings.Contains(fresh, ".") && res.Header.Get("X-Request-Id") == id
			if !mine || method != http.MethodHead && string(got) != `{"id":"`+echo+`"}` {
				t.Errorf("%s request %s got another request's answer: X-Echo %q, body %s", mode, id, res.Header.Get("X-Echo"), got)
				return
			}
			own.Add(1)
		case http.StatusBadGateway, http.StatusGatewayTimeout:
			var eb errorBody
			bad := res.Header.Get("Content-Type") != "application/json" || res.Header.Get("X-Echo") != ""
			if method != http.MethodHead { // a HEAD answer has no body
				err := json.Unmarshal(got, &eb)
				bad = bad || err != nil || eb.Code != "bad_gateway" && eb.Code != "gateway_timeout"
			}
			if bad {
				t.Errorf("%s request %s: %d %v %s, want exgate's JSON error", mode, id, res.StatusCode, res.Header, got)
				return
			}
			refused.Add(1)
		default:
			t.Errorf("%s request %s: status %d %s", mode, id, res.StatusCode, got)
		}
	}

	t.Run("sequential", func(t *testing.T) {
		for n := range 180 {
			check(t, n, fmt.Sprintf("seq-%d", n))
		}
	})
	t.Run("concurrent", func(t *testing.T) {
		var wg sync.WaitGroup
		for c := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := range 90 {
					check(t, n+c, fmt.Sprintf("c%d-%d", c, n))
				}
			}()
		}
		wg.Wait()
	})
	// The backend did misbehave, and most requests still got through.
	if be.strays.Load() < 200 || own.Load() < (own.Load()+refused.Load())*2/3 {
		t.Fatalf("strays written %d; own answers %d, refused %d", be.strays.Load(), own.Load(), refused.Load())
	}
	t.Logf("strays written %d; own answers %d, refused %d", be.strays.Load(), own.Load(), refused.Load())
}

// TestCheckResponseID checks which backend answers are taken as the
// request's own.
func TestCheckResponseID(t *testing.T) {
	tests := []struct {
		name      string
		sent, got []string
		foreign   bool
	}{
		{"echoed", []string{"a1"}, []string{"a1"}, false},
		{"not echoed", []string{"a1"}, nil, false},
		{"another id", []string{"a1"}, []string{"b2"}, true},
		{"case differs", []string{"abc"}, []string{"ABC"}, true},
		{"two ids", []string{"a1"}, []string{"a1", "a1"}, true},
		{"empty id", []string{"a1"}, []string{""}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := &http.Request{Header: http.Header{"X-Request-Id": tt.sent}}
			res := &http.Response{Header: http.Header{}, Request: req}
			if tt.got != nil {
				res.Header["X-Request-Id"] = tt.got
			}
			if err := checkResponseID(res, res.Header["X-Request-Id"]); (err != nil) != tt.foreign {
				t.Fatalf("checkResponseID = %v, want foreign %v", err, tt.foreign)
			}
		})
	}
}

// TestUnhideResponseID checks what is left of a Connection header that
// names X-Request-ID: every other token, in order.
func TestUnhideResponseID(t *testing.T) {
	for _, tc := range []struct {
		name string
		conn []string
		want []string
	}{
		{"none", nil, nil},
		{"close", []string{"close"}, []string{"close"}},
		{"alone", []string{"X-Request-ID"}, []string{""}},
		{"among others, any case, spaces", []string{"keep-alive , x-request-id,Foo"}, []string{"keep-alive, Foo"}},
		{"in a second line", []string{"close", "X-REQUEST-ID, Bar"}, []string{"close", "Bar"}},
		{"a longer name", []string{"X-Request-Ids"}, []string{"X-Request-Ids"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			if tc.conn != nil {
				h["Connection"] = slices.Clone(tc.conn)
			}
			unhideResponseID(h)
			if !slices.Equal(h["Connection"], tc.want) {
				t.Errorf("Connection %q, want %q", h["Connection"], tc.want)
			}
		})
	}
	h := http.Header{"Connection": {"keep-alive"}}
	if n := testing.AllocsPerRun(100, func() { unhideResponseID(h) }); n != 0 {
		t.Errorf("%v allocations for a Connection that does not name it, want 0", n)
	}
}

// writeCounter counts the writes made on the connections it dials.
type writeCounter struct {
	net.Conn
	writes *atomic.Int64
}

func (c writeCounter) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// countWrites makes tr dial connections that count their writes, and
// returns the count.
func countWrites(tr *http.Transport) *atomic.Int64 {
	writes := new(atomic.Int64)
	d := &net.Dialer{}
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return writeCounter{Conn: c, writes: writes}, nil
	}
	return writes
}

// TestForwardBodyOneWrite checks that a body forwardBody set goes to the
// backend with its Content-Length, without Expect or Transfer-Encoding,
// and in the same write as the request head; a body of unknown kind (as
// before forwardBody) costs a second write. Through the gateway, every
// body is read whole first (proxy/body.go): one that came chunked goes
// with its length, in one write with its head.
func TestForwardBodyOneWrite(t *testing.T) {
	var got recorded
	bs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = recorded{Header: r.Header.Clone(), Body: string(b), ContentLength: r.ContentLength, TransferEncoding: r.TransferEncoding}
	}))
	t.Cleanup(bs.Close)
	cfg := config.Default()
	tr := upstream.NewTransport(cfg.Upstream)
	writes := countWrites(tr)
	t.Cleanup(tr.CloseIdleConnections)
	t.Run("through the gateway", func(t *testing.T) {
		cfg := config.Default()
		cfg.Upstream.URL = config.MustURL(bs.URL)
		e := serve(t, cfg, &backend{}, Options{Transport: tr})
		for _, te := range [][]string{{"chunked"}, nil} {
			before := writes.Load()
			req, _ := http.NewRequest("POST", e.url+"/api/v1/other/", io.MultiReader(strings.NewReader(`{"a":`), strings.NewReader(`1}`)))
			req.TransferEncoding = te
			if te == nil {
				req.ContentLength = int64(len(`{"a":1}`))
			}
			req.Header.Set("Expect", "100-continue") // answered by exgate's server, not forwarded
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if n := writes.Load() - before; n != 1 || got.Body != `{"a":1}` || got.ContentLength != 7 || len(got.TransferEncoding) != 0 {
				t.Errorf("transfer-encoding %v: %d writes (want 1), backend got %q, Content-Length %d, Transfer-Encoding %v (want 7, none)",
					te, n, got.Body, got.ContentLength, got.TransferEncoding)
			}
			if got.Header.Get("Expect") != "" {
				t.Errorf("transfer-encoding %v: Expect forwarded to the backend: a backend that never answers 100 (wsgiref, HTTP/1.0 servers) stalls every such request for the transport's ExpectContinueTimeout", te)
			}
		}
	})
	const order = `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.001"}`
	tests := []struct {
		name   string
		body   func(r *http.Request)
		writes int64
	}{
		{"forwardBody", func(r *http.Request) { forwardBody(r, []byte(order)) }, 1},
		{"unknown body", func(r *http.Request) {
			r.Body = struct{ io.ReadCloser }{io.NopCloser(strings.NewReader(order))}
			r.ContentLength = int64(len(order))
		}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", bs.URL+"/api/v1/odr/orders/", nil)
			req.Header.Set("Expect", "100-continue")
			req.Header.Set("Content-Type", "application/json")
			tt.body(req)
			if tt.writes == 1 && req.GetBody != nil {
				t.Fatal("forwardBody made the request replayable (GetBody)")
			}
			before := writes.Load()
			res, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if n := writes.Load() - before; n != tt.writes {
				t.Errorf("request written in %d writes, want %d", n, tt.writes)
			}
			if got.Body != order || got.ContentLength != int64(len(order)) || got.TransferEncoding != nil {
				t.Errorf("backend got %q, Content-Length %d, Transfer-Encoding %v", got.Body, got.ContentLength, got.TransferEncoding)
			}
			if tt.writes == 1 && got.Header.Get("Expect") != "" {
				t.Errorf("Expect forwarded: %v", got.Header)
			}
		})
	}
}

// BenchmarkForwardBody sends an order through NewTransport to a backend
// over loopback, its body as forwardBody makes it (head and body in one
// write) and as a body of a type the Transport does not know (the head
// flushed first, as before forwardBody), one request at a time.
// writes/op counts the writes on the backend connection.
func BenchmarkForwardBody(b *testing.B) {
	bs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusCreated)
	}))
	defer bs.Close()
	const order = `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.001"}`
	for _, tc := range []struct {
		name string
		body func(r *http.Request)
	}{
		{"forwardBody", func(r *http.Request) { forwardBody(r, []byte(order)) }},
		{"unknown-body", func(r *http.Request) {
			r.Body = struct{ io.ReadCloser }{io.NopCloser(strings.NewReader(order))}
			r.ContentLength = int64(len(order))
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			tr := upstream.NewTransport(config.Default().Upstream)
			defer tr.CloseIdleConnections()
			writes := countWrites(tr)
			b.ReportAllocs()
			for b.Loop() {
				req, _ := http.NewRequest("POST", bs.URL+"/api/v1/odr/orders/", nil)
				tc.body(req)
				res, err := tr.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
			b.ReportMetric(float64(writes.Load())/float64(b.N), "writes/op")
		})
	}
}

// TestOrderForwardedInOneWrite checks, through the whole gateway, that a
// validated order reaches the backend in one write (head and canonical
// body together): ReverseProxy's wrapper around outbound bodies must not
// hide forwardBody's in-memory body from the Transport.
func TestOrderForwardedInOneWrite(t *testing.T) {
	e := startOrders(t, placed)
	tr := e.gw.transport.(*http.Transport) // no connection dialled yet
	writes := countWrites(tr)
	const order = `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.001"}`
	for i := range 3 {
		before := writes.Load()
		res := postOrder(t, e, order)
		res.Body.Close()
		if res.StatusCode != http.StatusCreated {
			t.Fatalf("order %d: status %d", i, res.StatusCode)
		}
		if n := writes.Load() - before; n != 1 {
			t.Errorf("order %d written to the backend in %d writes, want 1", i, n)
		}
	}
	if got := e.backend.last(t); got.ContentLength <= 0 || got.Header.Get("Expect") != "" {
		t.Errorf("backend got Content-Length %d, Expect %q", got.ContentLength, got.Header.Get("Expect"))
	}
}

// TestResponseIDCheckSetting checks that a backend answer naming another
// request's X-Request-ID is refused by default and passes through when
// upstream.check_response_id is off (a backend with ids of its own).
func TestResponseIDCheckSetting(t *testing.T) {
	for _, tt := range []struct {
		name   string
		check  bool
		status int
	}{
		{"checked (default)", true, http.StatusBadGateway},
		{"not checked", false, http.StatusOK},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := startEnv(t, func(c *config.Config) { c.Upstream.CheckResponseID = tt.check })
			e.backend.handler = func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-Request-Id", "the-backends-own-id")
				_, _ = io.WriteString(w, `{"ok":true}`)
			}
			res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil, "X-Request-Id", "client-id-1")
			if tt.status == http.StatusBadGateway {
				assertError(t, res, http.StatusBadGateway, "bad_gateway")
				return
			}
			res.Body.Close()
			if res.StatusCode != tt.status || res.Header.Get("X-Request-Id") != "the-backends-own-id" {
				t.Fatalf("status %d, X-Request-Id %q", res.StatusCode, res.Header.Get("X-Request-Id"))
			}
		})
	}
}

// TestResponseIDNamedInConnection: a backend answer whose Connection
// header names X-Request-ID (which ReverseProxy strips, with every
// header Connection names, before ModifyResponse) is checked as any
// other: another request's id is refused 502, the request's own passes
// and the client gets its own id back.
func TestResponseIDNamedInConnection(t *testing.T) {
	e := startEnv(t, nil)
	for _, tc := range []struct {
		name, connection string
		echo             bool // the backend echoes the id it got, else sends its own
		status           int
	}{
		{"another id, hidden", "X-Request-ID", false, http.StatusBadGateway},
		{"another id, hidden in lower case among others", "keep-alive, x-request-id", false, http.StatusBadGateway},
		{"another id, not hidden", "keep-alive", false, http.StatusBadGateway},
		{"the request's id, named", "X-Request-ID", true, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.backend.handler = func(w http.ResponseWriter, r *http.Request) {
				id := "the-backends-own-id"
				if tc.echo {
					id = r.Header.Get("X-Request-Id")
				}
				w.Header().Set("X-Request-Id", id)
				w.Header().Set("Connection", tc.connection)
				_, _ = io.WriteString(w, `{"ok":true}`)
			}
			res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil, "X-Request-Id", "client-id-1")
			if tc.status == http.StatusBadGateway {
				assertError(t, res, http.StatusBadGateway, "bad_gateway")
				return
			}
			res.Body.Close()
			if res.StatusCode != tc.status || res.Header.Get("X-Request-Id") != "client-id-1" {
				t.Fatalf("status %d, X-Request-Id %q; want %d, client-id-1", res.StatusCode, res.Header.Get("X-Request-Id"), tc.status)
			}
		})
	}
}

// TestBackendStatusOutsideHTTP sends requests to a backend that answers
// with status codes net/http's Transport parses but HTTP does not define
// (RFC 9110 §15: 100 to 599; a client treats any other as a 5xx): exgate
// answers each with its JSON 502, never the backend's code, and a code
// below 100 does not crash the handler (net/http panics on
// WriteHeader(0)).
func TestBackendStatusOutsideHTTP(t *testing.T) {
	be := startRawBackend(t)
	cfg := config.Default()
	cfg.Upstream.URL = config.MustURL("http://" + be.ln.Addr().String())
	cfg.Overload.Enabled = false
	e := serve(t, cfg, &backend{}, Options{})
	for _, tc := range []struct {
		status string
		want   int
	}{
		{"000", http.StatusBadGateway},
		{"099", http.StatusBadGateway},
		{"600", http.StatusBadGateway},
		{"999", http.StatusBadGateway},
		{"599", 599},
		{"200", http.StatusOK},
	} {
		t.Run(tc.status, func(t *testing.T) {
			res, err := http.Get(e.url + "/api/v1/test/?m=status&s=" + tc.status)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tc.want {
				t.Fatalf("backend status %s answered %d %s, want %d", tc.status, res.StatusCode, b, tc.want)
			}
			if tc.want == http.StatusBadGateway {
				var eb errorBody
				if err := json.Unmarshal(b, &eb); err != nil || eb.Code != "bad_gateway" || res.Header.Get("Content-Type") != "application/json" {
					t.Fatalf("backend status %s: %s %s, want exgate's JSON bad_gateway", tc.status, res.Header.Get("Content-Type"), b)
				}
			}
		})
	}
}

// TestBackendAnswerWithoutContentTypeNotSniffed: a backend answer without
// Content-Type reaches the client without one. net/http's server would
// otherwise guess one from the body's first bytes, and a body that starts
// like HTML (a backend echoing a client's input in an error) would reach
// a browser as text/html from the API's origin.
func TestBackendAnswerWithoutContentTypeNotSniffed(t *testing.T) {
	for _, body := range []string{"<html><script>alert(1)</script></html>", `{"a":1}`, "\x89PNG\r\n\x1a\n"} {
		t.Run(body, func(t *testing.T) {
			be := &backend{handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header()["Content-Type"] = nil // the backend's own server must not guess either
				_, _ = io.WriteString(w, body)
			}}
			bs := httptest.NewServer(be)
			t.Cleanup(bs.Close)
			cfg := config.Default()
			cfg.Upstream.URL = config.MustURL(bs.URL)
			e := serve(t, cfg, be, Options{})
			res, err := http.Get(e.url + "/api/v1/mkt/markets/")
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if string(got) != body {
				t.Fatalf("body %q", got)
			}
			if ct, ok := res.Header["Content-Type"]; ok {
				t.Fatalf("Content-Type %q added to an answer the backend sent without one", ct)
			}
		})
	}
}

// TestHeadersKeptAfterBackend1xx: a backend's 103 Early Hints reaches the
// client, and the final answer still carries what exgate adds to it (the
// RateLimit headers, a CORS policy's Access-Control-Allow-Origin).
// ReverseProxy clears the response headers after writing a 1xx, exgate's
// own among them: without them a browser refuses the answer.
func TestHeadersKeptAfterBackend1xx(t *testing.T) {
	const origin = "https://app.example"
	e := startLimited(t, nil, func(c *config.Config) { c.CORS.AllowedOrigins = []string{origin} })
	e.backend.handler = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</markets.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, "[]")
	}
	var hints int
	req, _ := http.NewRequest("GET", e.url+"/api/v1/mkt/markets/", nil)
	req.Header.Set("Origin", origin)
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, _ textproto.MIMEHeader) error { hints++; return nil },
	}))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK || hints != 1 {
		t.Fatalf("status %d after %d 1xx answers, want 200 after one 103", res.StatusCode, hints)
	}
	for _, k := range []string{"RateLimit", "RateLimit-Policy", "Access-Control-Allow-Origin", "X-Request-Id"} {
		if res.Header.Get(k) == "" {
			t.Errorf("final answer after a 103 lacks %s: %v", k, res.Header)
		}
	}
}

// TestWriteFailedOutcomeUnknown: a request the backend received and then
// failed (the connection closed before an answer, or no answer before the
// route's timeout) is answered 502 bad_gateway or 504 gateway_timeout;
// for a write (an order, a cancel) the detail says its outcome is
// unknown, where "unavailable" would read as "not done".
func TestWriteFailedOutcomeUnknown(t *testing.T) {
	const order = `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.5"}`
	for _, tc := range []struct {
		name, method, path, body string
		hang                     bool // the backend never answers (else it closes the connection)
		status                   int
		code                     string
		unknown                  bool
	}{
		{"read, closed", "GET", "/api/v1/odr/fills/", "", false, 502, "bad_gateway", false},
		{"order, closed", "POST", "/api/v1/odr/orders/", order, false, 502, "bad_gateway", true},
		{"cancel, closed", "DELETE", "/api/v1/odr/orders/3/", "", false, 502, "bad_gateway", true},
		{"read, no answer", "GET", "/api/v1/odr/fills/", "", true, 504, "gateway_timeout", false},
		{"cancel, no answer", "DELETE", "/api/v1/odr/orders/3/", "", true, 504, "gateway_timeout", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := startOrdersConfig(t, func(w http.ResponseWriter, r *http.Request) {
				if tc.hang {
					<-r.Context().Done()
					return
				}
				c, _, err := w.(http.Hijacker).Hijack()
				if err == nil {
					c.Close()
				}
			}, nil, func(c *config.Config) {
				if !tc.hang { // a closed connection must not race the route's timeout
					c.Route("place_order").Timeout = 20 * time.Second
					return
				}
				c.Route("list_fills").Timeout = 100 * time.Millisecond
				c.Route("cancel_order").Timeout = 100 * time.Millisecond
			})
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
			}
			res := do(t, tc.method, e.url+tc.path, body, "Authorization", "Bearer tok", "Content-Type", "application/json")
			eb := assertError(t, res, tc.status, tc.code)
			if got := strings.Contains(eb.Detail, "outcome is unknown"); got != tc.unknown {
				t.Errorf("detail %q: says the outcome is unknown %v, want %v", eb.Detail, got, tc.unknown)
			}
			if e.backend.count() == 0 {
				t.Error("the backend received nothing")
			}
		})
	}
}
