//go:build unix

package unreachable

import (
	"net"
	"syscall"
	"testing"
)

// Refused returns a "127.0.0.1:port" address whose connects are refused,
// held until the test ends: a socket bound to the port and never
// listening. The kernel answers a SYN to it with a reset, and no other
// process can bind the port meanwhile (it was not bound with
// SO_REUSEADDR), as a port merely found free could be — by a Redis or a
// backend another test package starts at the same time.
func Refused(t testing.TB) string {
	t.Helper()
	_, addr := bound(t)
	return addr
}

// bound returns a TCP socket bound to a free port of 127.0.0.1, closed
// when the test ends, and its "127.0.0.1:port" address.
func bound(t testing.TB) (int, string) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	syscall.CloseOnExec(fd)
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fd, (&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sa.(*syscall.SockaddrInet4).Port}).String()
}
