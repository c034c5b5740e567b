package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/redistest"
	"github.com/exgate/exgate/internal/tlstest"
)

// TestDevModeSharesLimitsThroughRedis starts two dev-mode gateways with
// an explicit EXGATE_LIMITER_BACKEND=redis, as a developer would to try
// shared limits: they count one address together, and the banner says
// where the limits are kept. Without it, dev mode keeps them in memory.
func TestDevModeSharesLimitsThroughRedis(t *testing.T) {
	rs := redistest.Start(t)
	env := map[string]string{
		"EXGATE_LIMITER_BACKEND":     "redis",
		"EXGATE_LIMITER_REDIS_ADDRS": rs.Addr,
		// Dev mode's 25ms deadline falls back to local limits whenever a
		// loaded machine stalls; sharing is what is under test here.
		"EXGATE_LIMITER_REDIS_TIMEOUT": "1s",
		"EXGATE_LISTEN":                "127.0.0.1:0",
		"EXGATE_ADMIN_LISTEN":          "127.0.0.1:0",
	}
	getenv := devSecret(func(k string) (string, bool) { v, ok := env[k]; return v, ok }, "EXGATE_KEY_SECRET")
	var urls []string
	for range 2 {
		cfg, err := config.Load("", getenv)
		if err != nil {
			t.Fatal(err)
		}
		devOverrides(cfg)
		matchesLimit(cfg, 3)
		a := startApp(t, cfg, deps{log: zap.NewNop(), now: time.Now, dev: true, getenv: getenv})
		var banner bytes.Buffer
		printDevBanner(&banner, a)
		if !strings.Contains(banner.String(), "limits    Redis at "+rs.Addr) {
			t.Fatalf("banner does not name the Redis store:\n%s", banner.String())
		}
		urls = append(urls, "http://"+a.addr+"/api/v1/mth/matches/BTC_USDT/")
	}
	var codes []int
	for i := range 5 {
		code, _, _ := call(t, "GET", urls[i%2], "")
		codes = append(codes, code)
	}
	if want := []int{200, 200, 200, 429, 429}; !slices.Equal(codes, want) {
		t.Fatalf("codes across the two dev instances %v, want %v", codes, want)
	}

	cfg := config.Default()
	devOverrides(cfg)
	if cfg.Limiter.Backend != config.BackendMemory {
		t.Fatalf("dev mode without an explicit backend uses %q", cfg.Limiter.Backend)
	}
}

// TestCheckConfigReadsCertificates runs check-config on configurations
// whose certificate files are good, missing, mismatched and expired.
func TestCheckConfigReadsCertificates(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir)
	good := ca.Issue(dir, "good", []string{"api.example.test"}, tlstest.Options{})
	other := ca.Issue(dir, "other", []string{"api.example.test"}, tlstest.Options{})
	expired := ca.Issue(dir, "expired", []string{"api.example.test"}, tlstest.Options{NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	for _, tc := range []struct {
		name, cert, key string
		want            string
	}{
		{"good, relative to the file", "good.crt", "good.key", "ok"},
		{"missing", "none.crt", "good.key", "server.tls.certificates[0].cert_file: open "},
		{"key of another certificate", filepath.Base(good.CertFile), filepath.Base(other.KeyFile), "server.tls.certificates[0]: "},
		{"expired", expired.CertFile, expired.KeyFile, "certificate expired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "exgate.yaml")
			yaml := "server:\n  tls:\n    certificates:\n      - {cert_file: " + tc.cert + ", key_file: " + tc.key + "}\n"
			if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			code := run(context.Background(), []string{"check-config", path}, func(string) (string, bool) { return "", false }, &out, &errb)
			if !strings.Contains(out.String(), tc.want) || (code == 0) != (tc.want == "ok") {
				t.Fatalf("exit %d, output %q; want %q", code, out.String(), tc.want)
			}
		})
	}
}
