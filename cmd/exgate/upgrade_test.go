package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/sim"
)

// switchingBackend is the reference backend with a WebSocket-style
// endpoint: a request offering to upgrade is answered 101 Switching
// Protocols and its connection kept as a raw tunnel whose bytes are
// recorded, as any backend that speaks another protocol after a 101 (a
// WebSocket or h2c server) reads them. A request to /switch-anyway/ is
// answered 101 whether it asked or not, as a broken backend would.
type switchingBackend struct {
	sim      http.Handler
	mu       sync.Mutex
	offers   int          // requests that arrived with an Upgrade header
	tunneled bytes.Buffer // bytes read after a 101
}

func (b *switchingBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, offered := r.Header["Upgrade"]
	if offered {
		b.mu.Lock()
		b.offers++
		b.mu.Unlock()
	}
	if !offered && r.URL.Path != "/switch-anyway/" {
		b.sim.ServeHTTP(w, r)
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nX-Request-Id: %s\r\n\r\n", r.Header.Get("X-Request-Id"))
	_ = brw.Flush()
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 4096)
	for {
		n, err := brw.Read(buf)
		b.mu.Lock()
		b.tunneled.Write(buf[:n])
		b.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// TestUpgradeNeverTunnels offers every upgrade a client can to a backend
// that accepts them. httputil.ReverseProxy would forward the offer and,
// after the backend's 101, join the two connections: the client's next
// request (here an order with no token) would reach the backend with no
// check at all. exgate forwards the request without the offer, answers it
// as an ordinary request, and refuses a 101 the backend sends anyway with
// its JSON 502.
func TestUpgradeNeverTunnels(t *testing.T) {
	be := &switchingBackend{sim: sim.New(sim.Options{})}
	bs := httptest.NewServer(be)
	t.Cleanup(bs.Close)
	cfg := config.Default()
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Upstream.URL = config.MustURL(bs.URL)
	cfg.Server.DrainDelay = 0
	cfg.Limiter.Store = config.StoreMemory
	a := startApp(t, cfg, deps{log: zap.NewNop(), now: time.Now})
	waitCatalogue(t, a)

	// The order a client would send through the tunnel: no token, no
	// valid field. exgate answers it 401 itself.
	const smuggled = "POST /api/v1/odr/orders/ HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
	offers := []struct{ name, head string }{
		{"websocket", "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"},
		{"h2c as curl --http2 sends it", "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n"},
		{"h2c, settings not named by Connection", "Connection: upgrade\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n"},
		{"two Connection lines", "Connection: keep-alive\r\nConnection: UPGRADE\r\nUpgrade: websocket\r\n"},
	}
	for _, o := range offers {
		t.Run(o.name, func(t *testing.T) {
			be.mu.Lock()
			be.offers = 0
			be.tunneled.Reset()
			be.mu.Unlock()
			c, err := net.Dial("tcp", a.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			br := bufio.NewReader(c)
			if _, err := io.WriteString(c, "GET /api/v1/mkt/markets/ HTTP/1.1\r\nHost: x\r\n"+o.head+"\r\n"); err != nil {
				t.Fatal(err)
			}
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK || res.Header.Get("Upgrade") != "" {
				t.Fatalf("upgrade offer answered %d (Upgrade %q), want the markets with 200 and no switch", res.StatusCode, res.Header.Get("Upgrade"))
			}
			if _, err := io.WriteString(c, smuggled); err != nil {
				t.Fatal(err)
			}
			res, err = http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusUnauthorized || errCode(t, b) != "not_authenticated" {
				t.Errorf("the next request on the connection: %d %s, want exgate's 401 not_authenticated", res.StatusCode, b)
			}
			be.mu.Lock()
			defer be.mu.Unlock()
			if be.offers != 0 || be.tunneled.Len() != 0 {
				t.Errorf("the backend received %d upgrade offers and %q through a tunnel", be.offers, be.tunneled.String())
			}
		})
	}

	t.Run("backend switches unasked", func(t *testing.T) {
		code, h, b := call(t, "GET", "http://"+a.addr+"/switch-anyway/", "")
		if code != http.StatusBadGateway || errCode(t, b) != "bad_gateway" || h.Get("Upgrade") != "" {
			t.Fatalf("a backend's 101: %d %q %s, want exgate's JSON 502", code, h.Get("Upgrade"), b)
		}
		if !strings.HasPrefix(h.Get("Content-Type"), "application/json") {
			t.Fatalf("Content-Type %q", h.Get("Content-Type"))
		}
	})
}
