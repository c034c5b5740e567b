//go:build linux

package unreachable

import (
	"net"
	"syscall"
	"testing"
	"time"
)

// Addr returns the "127.0.0.1:port" address of a backend whose connects
// time out, as with a host that went silent or whose accept queue is
// full: a loopback listener whose queue is full and never drained, so
// that the kernel drops further SYNs. It is closed when the test ends.
// It skips the test on a kernel that accepts connections past the
// backlog.
func Addr(t testing.TB) string {
	t.Helper()
	fd, addr := bound(t)
	if err := syscall.Listen(fd, 0); err != nil { // a queue of one
		t.Fatal(err)
	}
	for i := 0; ; i++ { // fill the queue until a connect times out
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			return addr
		}
		t.Cleanup(func() { c.Close() })
		if i == 8 {
			t.Skip("the kernel accepts connections past the backlog; cannot make connects time out")
		}
	}
}
