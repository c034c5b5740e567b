package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/redistest"
)

// TestDevModeSharesLimitsThroughRedis starts two dev-mode gateways with
// an explicit EXGATE_LIMITER_STORE=redis, as a developer would to try
// shared limits: they count one address together, and the banner says
// where the limits are kept. Without it, dev mode keeps them in memory.
func TestDevModeSharesLimitsThroughRedis(t *testing.T) {
	rs := redistest.Start(t)
	env := map[string]string{
		"EXGATE_LIMITER_STORE":       "redis",
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
	if cfg.Limiter.Store != config.StoreMemory {
		t.Fatalf("dev mode without an explicit backend uses %q", cfg.Limiter.Store)
	}
}

// TestDevModeHonoursOTelVariables: go run ./cmd/exgate -dev with the
// standard OTEL_* variables traces as they say, as the README's quick
// start and docs/operations.md ("Tracing") promise: dev mode's own
// settings leave the tracing section to them.
func TestDevModeHonoursOTelVariables(t *testing.T) {
	env := map[string]string{
		"OTEL_TRACES_EXPORTER":        "otlp",
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector.example:4317",
		"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
		"OTEL_TRACES_SAMPLER":         "parentbased_traceidratio",
		"OTEL_TRACES_SAMPLER_ARG":     "0.25",
		"OTEL_SERVICE_NAME":           "exgate-dev",
		"OTEL_RESOURCE_ATTRIBUTES":    "deployment.environment.name=dev",
	}
	cfg, err := config.Load("", func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	devOverrides(cfg)
	tr := cfg.Tracing
	if !tr.On() || tr.Protocol != config.TraceProtocolGRPC || tr.ExportURL() != "http://collector.example:4317" ||
		tr.Sampler != "parentbased_traceidratio" || tr.SamplerArg != 0.25 || tr.ServiceName != "exgate-dev" ||
		tr.ResourceAttributes["deployment.environment.name"] != "dev" {
		t.Errorf("dev mode's tracing %+v, want the variables' settings", tr)
	}
}
