package main

import (
	"fmt"
	"net"
	"strings"
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
	traffic := fmt.Sprintf("127.0.0.1:%d", freePort(t))
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
