//go:build unix

package unreachable

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

// TestRefused: a connect to the address is refused at once, and nothing
// else can listen on its port while the test holds it.
func TestRefused(t *testing.T) {
	addr := Refused(t)
	c, err := net.DialTimeout("tcp", addr, 30*time.Second) // refused, not timed out

	if err == nil {
		c.Close()
		t.Fatalf("connect to %s succeeded", addr)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("connect to %s: %v, want connection refused", addr, err)
	}
	if ln, err := net.Listen("tcp", addr); err == nil {
		ln.Close()
		t.Errorf("another listener took %s", addr)
	}
}
