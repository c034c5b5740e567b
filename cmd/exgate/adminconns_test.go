package main

import (
	"bufio"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
)

// TestAdminListenerHoldsAtMostMaxConnections: the admin listener serves
// admin.max_connections connections at once; another waits, unserved and
// holding no descriptor of the process, until one of them closes (before,
// it was served: anyone who could reach the listener could open
// connections until the process ran out of descriptors).
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
			for range tc.held {
				c := dialAdmin(t, st.app.adminAd)
				t.Cleanup(func() { c.Close() })
				if err := healthz(c, time.Now().Add(10*time.Second)); err != nil {
					t.Fatalf("held connection: %v", err)
				}
				held = append(held, c)
			}
			next := dialAdmin(t, st.app.adminAd)
			defer next.Close()
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

func dialAdmin(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
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
