package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
)

// TestAdminListenerHoldsAtMostMaxConnections: the admin listener serves
// admin.max_connections connections at once; another waits, unserved and
// holding no descriptor of the process, until one of them closes (before,
// it was served: anyone who could reach the listener could open
// connections until the process ran out of descriptors). Each comes from
// an address of its own, within its share (TestAdminConnectionShare).
func TestAdminListenerHoldsAtMostMaxConnections(t *testing.T) {
	for _, tc := range []struct {
		name       string
		max, held  int
		servedNext bool
	}{
		{"under the limit", 2, 1, true},
		{"at the limit", 2, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := startStack(t, func(c *config.Config) { c.Admin.MaxConnections = tc.max })
			var held []net.Conn
			for i := range tc.held {
				c := dialAdminFrom(t, st.app.adminAd, "127.0.0."+string(rune('2'+i)))
				if err := healthz(c, time.Now().Add(10*time.Second)); err != nil {
					t.Fatalf("held connection: %v", err)
				}
				held = append(held, c)
			}
			next := dialAdminFrom(t, st.app.adminAd, "127.0.0.9")
			// Waiting long enough to be served when it is to be; when it
			// is not to be, any wait shows it.
			wait := 10 * time.Second
			if !tc.servedNext {
				wait = 300 * time.Millisecond
			}
			err := healthz(next, time.Now().Add(wait))
			if served := err == nil; served != tc.servedNext {
				t.Fatalf("connection %d of %d served: %v (%v), want %v", tc.held+1, tc.max, served, err, tc.servedNext)
			}
			if tc.servedNext {
				return
			}
			held[0].Close() // its place goes to the connection waiting
			if err := answer(next, time.Now().Add(10*time.Second)); err != nil {
				t.Errorf("waiting connection not served once another closed: %v", err)
			}
		})
	}
}

// Addresses of TestAdminConnectionShare (Linux routes all of 127/8 to lo).
const (
	adminLeaky = "127.0.0.20" // a caller that leaves its connections open
	adminScrap = "127.0.0.30" // Prometheus and the probes, on another host
	adminLocal = "127.0.0.1"  // every caller on the gateway's own host
)

// TestAdminConnectionShare: with admin.max_connections 8, a share pool of
// 6 (2 kept for refused connections), one address holds at most 3 of the
// admin listener's connections, however many it opens; a scrape and the
// probes from another address are answered beside them (before, one
// caller's 8 idle or stalled connections held all of them, until
// server.idle_timeout or read_header_timeout, and the scrapes and probes
// waited in the kernel's queue until they timed out). From the same
// address — on one host every caller is 127.0.0.1 — a new connection
// closes the address's oldest idle one and is answered; only when the
// address keeps all of its share busy is it refused, 503
// too_many_connections in the one error shape with Retry-After, and
// closed, and past the refused connections' room closed unanswered. A
// connection is known idle when the server says so (deps.adminConnState).
func TestAdminConnectionShare(t *testing.T) {
	for _, tc := range []struct {
		name  string
		from  string // the caller that holds its share
		busy  bool   // its connections stall in a request's headers, else idle
		opens int    // how many it opens
		// then asks from probe: answered, or refused (the address's next
		// connections: 503 too_many_connections, then closed unanswered)
		probe       string
		wantRefused bool
		wantLeft    int // of from's connections, still served at the end
	}{
		{"idle, another address", adminLeaky, false, 8, adminScrap, false, 3},
		{"idle, the same loopback address", adminLocal, false, 8, adminLocal, false, 0},
		{"busy, another address", adminLeaky, true, 8, adminScrap, false, 3},
		{"busy, the same address", adminLeaky, true, 3, adminLeaky, true, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			idle := make(chan string, 64)
			st := startStackDeps(t, func(c *config.Config) {
				c.Admin.MaxConnections = 8
				c.Server.ReadHeaderTimeout = time.Minute // stalled heads stay for the test
			}, deps{adminConnState: func(c net.Conn, s http.ConnState) {
				if s == http.StateIdle {
					select {
					case idle <- c.RemoteAddr().String():
					default: // none waits for it
					}
				}
			}})
			held := holdAdmin(t, st.app.adminAd, tc.from, tc.opens, tc.busy, idle)
			if tc.wantRefused {
				checkAdminRefused(t, st.app.adminAd, tc.probe)
			} else {
				for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
					if status, code := adminAsk(t, st.app.adminAd, tc.probe, path); status != http.StatusOK {
						t.Errorf("GET %s from %s beside %s's 3 connections: %d %s, want 200", path, tc.probe, tc.from, status, code)
					}
				}
			}
			if served := servedConns(held, tc.busy); served != tc.wantLeft {
				t.Errorf("%d of %s's %d connections still served, want %d", served, tc.from, tc.opens, tc.wantLeft)
			}
		})
	}
}

// holdAdmin opens n connections from from to the admin listener at addr
// and keeps them: idle after an answered /healthz, once the server says
// so (idle), or busy, a request's head begun and never finished.
func holdAdmin(t *testing.T, addr, from string, n int, busy bool, idle <-chan string) []net.Conn {
	t.Helper()
	var held []net.Conn
	for range n {
		c := dialAdminFrom(t, addr, from)
		held = append(held, c)
		if busy {
			if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := healthz(c, time.Now().Add(10*time.Second)); err != nil {
			t.Fatalf("connection from %s: %v", from, err)
		}
		waitIdle(t, idle, c.LocalAddr().String())
	}
	return held
}

// waitIdle waits until the server says the connection from local is idle.
func waitIdle(t *testing.T, idle <-chan string, local string) {
	t.Helper()
	stop := time.After(10 * time.Second) // only to end a hung test
	for {
		select {
		case a := <-idle:
			if a == local {
				return
			}
		case <-stop:
			t.Fatalf("the connection from %s never idle", local)
		}
	}
}

// checkAdminRefused checks that from, whose share is busy, is refused:
// its next connections get 503 too_many_connections (Retry-After: 1, in
// the one error shape) and are closed, two of them (the refused
// connections' room) held meanwhile; the third, while they are, is
// closed unanswered. Another address is answered beside them.
func checkAdminRefused(t *testing.T, addr, from string) {
	t.Helper()
	var refused []net.Conn
	for range 2 {
		c := dialAdminFrom(t, addr, from)
		refused = append(refused, c)
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	dropped := dialAdminFrom(t, addr, from)
	_ = dropped.SetDeadline(time.Now().Add(10 * time.Second)) // only to end a hung test
	if n, err := dropped.Read(make([]byte, 1)); n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("a connection past the refused connections' room: read %d bytes, %v; want it closed unanswered", n, err)
	}
	if status, code := adminAsk(t, addr, adminScrap, "/metrics"); status != http.StatusOK {
		t.Errorf("GET /metrics from another address beside the refused ones: %d %s, want 200", status, code)
	}
	for _, c := range refused {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "\r\n"); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("a connection past its share: %v", err)
		}
		var body struct{ Detail, Code string }
		err = json.NewDecoder(res.Body).Decode(&body)
		res.Body.Close()
		if res.StatusCode != http.StatusServiceUnavailable || body.Code != "too_many_connections" || body.Detail == "" || err != nil ||
			res.Header.Get("Retry-After") != "1" || !res.Close {
			t.Errorf("a connection past its share: %d %+v (%v), Retry-After %q, closed %v; want 503 too_many_connections, Retry-After 1, closed",
				res.StatusCode, body, err, res.Header.Get("Retry-After"), res.Close)
		}
	}
}

// servedConns returns how many of cs the server still serves: an idle one
// answers a request 200, a busy one (its head begun) its request once
// finished (one past its share: 503; one closed: nothing).
func servedConns(cs []net.Conn, busy bool) int {
	served := 0
	for _, c := range cs {
		req := "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
		if busy {
			req = "\r\n"
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second)) // only to end a hung test
		if _, err := io.WriteString(c, req); err != nil {
			continue
		}
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			continue
		}
		res.Body.Close()
		if res.StatusCode == http.StatusOK {
			served++
		}
	}
	return served
}

// adminAsk asks path on a new connection from from to the admin listener
// at addr and returns the answer's status and error code.
func adminAsk(t *testing.T, addr, from, path string) (int, string) {
	t.Helper()
	c := dialAdminFrom(t, addr, from)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second)) // only to end a hung test
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET %s from %s: %v", path, from, err)
	}
	defer res.Body.Close()
	var body struct{ Code string }
	if res.Header.Get("Content-Type") == "application/json" {
		_ = json.NewDecoder(res.Body).Decode(&body)
	}
	return res.StatusCode, body.Code
}

// dialAdminFrom opens a connection from the loopback address from to the
// admin listener at addr, closed when the test ends.
func dialAdminFrom(t *testing.T, addr, from string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// healthz asks /healthz on c, keeping c open, and reads the answer by
// deadline.
func healthz(c net.Conn, deadline time.Time) error {
	if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")); err != nil {
		return err
	}
	return answer(c, deadline)
}

// answer reads an answer on c by deadline.
func answer(c net.Conn, deadline time.Time) error {
	if err := c.SetDeadline(deadline); err != nil {
		return err
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	return res.Body.Close()
}

// TestAdminHeaderTimeout: the admin listener closes a connection whose
// request head does not arrive within server.read_header_timeout (a
// slowloris holds none of its connections longer).
func TestAdminHeaderTimeout(t *testing.T) {
	for _, head := range []string{"", "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"} {
		t.Run(strconv.Quote(head), func(t *testing.T) {
			st := startStack(t, func(c *config.Config) { c.Server.ReadHeaderTimeout = 100 * time.Millisecond })
			c := dialAdminFrom(t, st.app.adminAd, adminLeaky)
			if _, err := io.WriteString(c, head); err != nil {
				t.Fatal(err)
			}
			_ = c.SetDeadline(time.Now().Add(10 * time.Second)) // only to end a hung test
			if _, err := io.ReadAll(c); errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("a connection whose head stalls is still open: %v", err)
			}
		})
	}
}
