package main

import (
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
)

// TestStartFailureReleasesListeners: when a part cannot start (here the
// admin listener, its address taken), start returns an error naming it
// and the parts already started are stopped: the traffic address it had
// bound is free again, so a supervisor's restart can bind it.
func TestStartFailureReleasesListeners(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	traffic := reservedAddr(t)
	cfg := config.Default()
	cfg.Listen, cfg.AdminListen = traffic, taken.Addr().String()
	cfg.Server.DrainDelay = 0
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	a, err := start(cfg, deps{log: zap.NewNop(), now: time.Now, getenv: secretEnv})
	if err == nil {
		_ = a.shutdown()
		t.Fatal("start with the admin address taken succeeded")
	}
	if !strings.Contains(err.Error(), "admin listen "+cfg.AdminListen) {
		t.Errorf("error %q does not name the admin listener", err)
	}
	ln, err := net.Listen("tcp", traffic)
	if err != nil {
		t.Fatalf("traffic address still bound after the failed start: %v", err)
	}
	ln.Close()
	if c, err := net.DialTimeout("tcp", traffic, time.Second); err == nil {
		c.Close()
		t.Error("something still accepts connections on the traffic address")
	}
}

// reservedAddr returns a "127.0.0.1:port" address nothing listens on,
// held until the test ends by a socket bound to it with SO_REUSEADDR and
// never listening: a listener bound to the port by its number with
// SO_REUSEADDR, as net.Listen binds, may still take it, but no socket
// bound to port 0 is given it, as a port merely found free could be
// given to a server another test package starts meanwhile.
func reservedAddr(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	syscall.CloseOnExec(fd)
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}
