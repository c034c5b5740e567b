package main

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/redistest"
	"github.com/exgate/exgate/sim"
)

// TestReplicaClocksDisagree runs two replicas on one Redis whose clocks
// disagree by 90 seconds either way against a limit of 20 per minute:
// they admit exactly 20 between them, what one clock would. A decision
// takes Redis's time (the GCRA scripts read TIME), never the replica's;
// had the replica 90s ahead used its own clock, it would have found the
// burst refilled and admitted 20 more.
func TestReplicaClocksDisagree(t *testing.T) {
	for _, skew := range []time.Duration{90 * time.Second, -90 * time.Second} {
		t.Run(fmt.Sprint(skew), func(t *testing.T) {
			srv := redistest.Start(t)
			bs := httptest.NewServer(sim.New(sim.Options{}))
			t.Cleanup(bs.Close)
			var urls []string
			for _, off := range []time.Duration{0, skew} {
				cfg := config.Default()
				cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
				cfg.Upstream.URL = config.MustURL(bs.URL)
				cfg.Server.DrainDelay = 0
				cfg.Log.Access = false
				cfg.Limiter.Redis.Addrs = []string{srv.Addr}
				cfg.Limiter.Redis.Timeout = time.Second
				cfg.Limiter.OnStoreError = config.StoreClosed // a store failure is not an allowance
				cfg.Limiter.Replicas = 2
				cfg.Limiter.TokenSpray.MaxTokens = 0
				cfg.Route("list_markets").Limits[1].Rate = config.Rate{N: 20, Period: time.Minute}
				cfg.Route("list_markets").Limits[1].Burst = 20
				if err := cfg.Validate(); err != nil {
					t.Fatal(err)
				}
				now := func() time.Time { return time.Now().Add(off) }
				a := startApp(t, cfg, deps{log: zap.NewNop(), now: now, getenv: secretEnv})
				waitCatalogue(t, a)
				urls = append(urls, "http://"+a.addr)
			}
			t.Cleanup(client.CloseIdleConnections)
			began := time.Now()
			allowed := 0
			for i := range 40 {
				code, _ := get(t, urls[i%2]+"/api/v1/mkt/markets/", "Authorization", "Bearer clock-skew")
				switch code {
				case 200:
					allowed++
				case 429:
				default:
					t.Fatalf("request %d: %d", i, code)
				}
			}
			// One request refills every 3s of Redis's time.
			refill := int(time.Since(began) / (3 * time.Second))
			if allowed < 20 || allowed > 20+refill {
				t.Errorf("replicas %v apart allowed %d of 40 against 20/1m, want 20 (+%d refilled)", skew, allowed, refill)
			}
		})
	}
}
