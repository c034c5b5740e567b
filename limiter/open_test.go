package limiter

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/exgate/exgate/config"
)

func TestOpenBackends(t *testing.T) {
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	t.Run("memory without secret", func(t *testing.T) {
		b, err := Open(config.Default(), OpenOptions{})
		if err != nil || b.Kind != config.StoreMemory || b.Memory == nil || b.Client != nil {
			t.Fatalf("%+v %v", b, err)
		}
		if err := b.Ping(context.Background()); err != nil {
			t.Error(err)
		}
	})
	t.Run("redis needs the secret", func(t *testing.T) {
		cfg := config.Default()
		cfg.Limiter.Redis.Addrs = []string{"127.0.0.1:1"}
		_, err := Open(cfg, OpenOptions{})
		if err == nil || !strings.Contains(err.Error(), "EXGATE_KEY_SECRET is not set") {
			t.Errorf("error %v", err)
		}
	})
	t.Run("short secret", func(t *testing.T) {
		_, err := Open(config.Default(), OpenOptions{Getenv: env(map[string]string{"EXGATE_KEY_SECRET": "short"})})
		if err == nil || !strings.Contains(err.Error(), "at least 16 bytes") {
			t.Errorf("error %v", err)
		}
	})
	t.Run("redis down is a store failure, not a start failure", func(t *testing.T) {
		cfg := config.Default()
		cfg.Limiter.Redis.Addrs = []string{"127.0.0.1:1"}
		b, err := Open(cfg, OpenOptions{Getenv: env(map[string]string{"EXGATE_KEY_SECRET": string(testSecret)})})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if b.Kind != config.StoreRedis || b.Deny == nil {
			t.Errorf("backend %+v", b)
		}
		if err := b.Ping(context.Background()); err == nil {
			t.Error("ping of a closed port succeeded")
		}
		var d Decision
		rs := Compile(cfg, nil)
		b.Enforcer.Decide(context.Background(), rs.Route("list_matches"), Request{Addr: netip.MustParseAddr("192.0.2.9")}, &d)
		if !d.Allowed || d.Outcomes[0].Fallback != config.StoreLocal {
			t.Errorf("decision with Redis down: %+v", d)
		}
	})
}
