package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
	"go.uber.org/zap"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// stallAnswers counts the answers to stalled bodies by status and code.
type stallAnswers struct {
	mu    sync.Mutex
	codes map[string]int // "503 server_busy"
	bad   []string       // answers other than 503 server_busy with Retry-After: 1
}

func (a *stallAnswers) add(status, code, retryAfter string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.codes == nil {
		a.codes = make(map[string]int)
	}
	a.codes[status+" "+code]++
	if status != "503" || code != "server_busy" || retryAfter != "1" {
		a.bad = append(a.bad, status+" "+code+" Retry-After "+strconv.Quote(retryAfter))
	}
}

func (a *stallAnswers) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, k := range a.codes {
		n += k
	}
	return n
}

// stallH2 opens an HTTP/2 connection over TLS from the loopback address
// from and, on it, n POST streams to path, each with its headers only
// (every other one with a Content-Length of 4 KiB, the others with none)
// and no byte of body, and counts their answers in a until the test ends.
func stallH2(t *testing.T, addr, from, path string, tlsCfg *tls.Config, n int, a *stallAnswers) net.Conn {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	conn, err := tls.DialWithDialer(d, "tcp", addr, tlsCfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex // fr's writes
	go readStallAnswers(conn, fr, &mu, a)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for i := range n {
		hb.Reset()
		fields := [][2]string{{":method", "POST"}, {":scheme", "https"}, {":authority", "api.example.test"}, {":path", path},
			{"authorization", "Bearer tok"}, {"content-type", "application/json"}}
		if i%2 == 0 {
			fields = append(fields, [2]string{"content-length", "4096"})
		}
		for _, f := range fields {
			_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		mu.Lock()
		err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: hb.Bytes(), EndHeaders: true})
		mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
	}
	return conn
}

// readStallAnswers reads the server's frames on conn, acknowledging its
// settings, and counts each stream's answer (its :status, and the code of
// its JSON error) in a.
func readStallAnswers(conn net.Conn, w *http2.Framer, mu *sync.Mutex, a *stallAnswers) {
	rfr := http2.NewFramer(io.Discard, conn)
	dec := hpack.NewDecoder(4096, nil)
	type answer struct{ status, retryAfter, body string }
	open := map[uint32]*answer{}
	for {
		f, err := rfr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				mu.Lock()
				_ = w.WriteSettingsAck()
				mu.Unlock()
			}
		case *http2.HeadersFrame:
			fields, _ := dec.DecodeFull(f.HeaderBlockFragment())
			ans := &answer{}
			for _, hf := range fields {
				switch hf.Name {
				case ":status":
					ans.status = hf.Value
				case "retry-after":
					ans.retryAfter = hf.Value
				}
			}
			open[f.StreamID] = ans
		case *http2.DataFrame:
			ans := open[f.StreamID]
			if ans == nil {
				continue
			}
			ans.body += string(f.Data())
			if f.StreamEnded() {
				a.add(ans.status, errorCode(ans.body), ans.retryAfter)
				delete(open, f.StreamID)
			}
		}
	}
}

// errorCode returns the "code" of a JSON error body.
func errorCode(body string) string {
	const key = `"code":"`
	i := bytes.Index([]byte(body), []byte(key))
	if i < 0 {
		return "?"
	}
	rest := body[i+len(key):]
	if j := bytes.IndexByte([]byte(rest), '"'); j >= 0 {
		return rest[:j]
	}
	return "?"
}

// stallH1 opens n connections from the loopback address from, each
// sending the head of a POST to path with a Content-Length of 4 KiB and
// no byte of body, and counts their answers in a until the test ends.
func stallH1(t *testing.T, addr, from, path string, n int, a *stallAnswers) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	for range n {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		conns = append(conns, c)
		if _, err := io.WriteString(c, "POST "+path+" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\n"+
			"Content-Type: application/json\r\nContent-Length: 4096\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		go func() {
			res, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				return // closed when the test ends
			}
			body, _ := io.ReadAll(res.Body)
			a.add(strconv.Itoa(res.StatusCode), errorCode(string(body)), res.Header.Get("Retry-After"))
		}()
	}
	return conns
}

// TestStalledBodiesCharged: a request whose body is being read is charged
// config.BodyReadCharge of its client's share of the body budget before
// its first byte, until the read ends. Three addresses each open 96
// requests that send their headers and never a byte of body — HTTP/2
// streams (raw frames, with a Content-Length and without) over one
// connection each, or HTTP/1.1 connections — against a budget of 1 MiB.
// Each stalled request is held and charged, or refused 503 server_busy
// with Retry-After: 1; what is held stays within the budget's dynamic
// threshold (three clients: 3/4 of it); another address's request passes
// beside them; once the clients go, every charge is given back. Before the
// charge, all 288 were held and the budget counted nothing.
func TestStalledBodiesCharged(t *testing.T) {
	const (
		budget  = 1 << 20
		perAddr = 96
		path    = "/api/v1/usr/upload/"
	)
	froms := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}
	for _, proto := range []string{"HTTP/2", "HTTP/1.1"} {
		t.Run(proto, func(t *testing.T) {
			be := &backend{}
			bs := httptest.NewServer(be)
			t.Cleanup(bs.Close)
			cfg := config.Default()
			cfg.Upstream.URL = config.MustURL(bs.URL)
			cfg.Server.MaxBufferedBytes, cfg.Server.MaxBodyBytes = budget, 64<<10
			answers := make([]stallAnswers, len(froms))
			var conns []net.Conn
			var gw *Gateway
			var victim func() (string, string)
			if proto == "HTTP/2" {
				var err error
				if gw, err = newGateway(cfg, Options{Logger: zap.NewNop()}); err != nil {
					t.Fatal(err)
				}
				certs, ca := apiCertificates(t)
				tlsCfg := &tls.Config{RootCAs: ca.Pool, ServerName: "api.example.test", NextProtos: []string{"h2"}}
				addr := serveTLS(t, cfg, gw, nil, certs)
				for i, from := range froms {
					conns = append(conns, stallH2(t, addr, from, path, tlsCfg, perAddr, &answers[i]))
				}
				victim = func() (string, string) {
					c := dialH2(t, addr, tlsCfg)
					c.send(1, "/api/v1/mkt/currencies/", [][2]string{{"authorization", "Bearer tok"}})
					return c.answer(1)
				}
			} else {
				e := serve(t, cfg, be, Options{})
				gw = e.gw
				for i, from := range froms {
					conns = append(conns, stallH1(t, e.addr, from, path, perAddr, &answers[i])...)
				}
				victim = func() (string, string) {
					res, err := http.Get(e.url + "/api/v1/mkt/currencies/")
					if err != nil {
						t.Fatal(err)
					}
					defer res.Body.Close()
					b, _ := io.ReadAll(res.Body)
					return strconv.Itoa(res.StatusCode), string(b)
				}
			}
			total := len(froms) * perAddr
			answered := func() int {
				n := 0
				for i := range answers {
					n += answers[i].count()
				}
				return n
			}
			held := func() int64 { return gw.budget.Buffered() / config.BodyReadCharge }
			deadline := time.Now().Add(10 * time.Second)
			for gw.budget.Buffered()%config.BodyReadCharge != 0 || int(held())+answered() != total {
				if time.Now().After(deadline) {
					t.Fatalf("of %d stalled requests, %d charged (%d bytes) and %d answered: want each charged or refused",
						total, held(), gw.budget.Buffered(), answered())
				}
				time.Sleep(5 * time.Millisecond)
			}
			t.Logf("%s: %d stalled requests from %d addresses: %d held (%d bytes charged of %d)", proto, total, len(froms), held(), gw.budget.Buffered(), budget)
			if n := gw.budget.Buffered(); n > budget-config.BodyReadCharge {
				t.Errorf("%d bytes charged for %d held requests: a new client would find no room in %d", n, held(), budget)
			}
			for i := range answers {
				a := &answers[i]
				kept := perAddr - a.count()
				t.Logf("%s: %d held, answered %v", froms[i], kept, a.codes)
				if kept == 0 || kept*config.BodyReadCharge > budget/2 {
					t.Errorf("%s holds %d stalled requests (%d bytes), want at least one and at most half of %d", froms[i], kept, kept*config.BodyReadCharge, budget)
				}
				if len(a.bad) != 0 || a.codes["503 server_busy"] != a.count() || a.count() == 0 {
					t.Errorf("%s: answers %v, want some, each refused 503 server_busy with Retry-After: 1 (other: %v)", froms[i], a.codes, a.bad)
				}
			}
			if n := gw.budget.Clients(); n != len(froms) {
				t.Errorf("%d clients hold the budget, want %d", n, len(froms))
			}
			if n := be.countPath(path); n != 0 {
				t.Errorf("the backend saw %d stalled requests, want none", n)
			}
			if status, body := victim(); status != "200" {
				t.Errorf("another address's read beside them: %s %s", status, body)
			}
			for _, c := range conns {
				c.Close()
			}
			waitFor(t, "every charge given back", func() bool { return gw.budget.Buffered() == 0 && gw.budget.Clients() == 0 })
		})
	}
}
