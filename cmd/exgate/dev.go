package main

import (
	"fmt"
	"io"
	"net"
	"slices"
	"strings"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/sim"
)

// printDevBanner tells a developer what runs where, where the limits are
// kept, and how to try it. The curl lines are the README's quick start.
func printDevBanner(w io.Writer, a *app) {
	gw := curlBase(a.addr)
	curl := "curl"
	if a.certs != nil {
		gw = "https" + strings.TrimPrefix(gw, "http")
		curl = "curl -k" // a developer's own certificate is rarely trusted
	}
	store := limitStore(a)
	fmt.Fprintf(w, `
exgate dev mode: gateway and reference backend in one process.

  gateway   %[2]s
  admin     http://%[3]s/healthz  /readyz
  backend   http://%[4]s  (reference exchange; accounts api_key/secret_key "dev"/"dev" and "dev2"/"dev2")
  limits    %[1]s
  tokens    %[6]s

Try it:

  TOKEN=$(%[5]s -s -X POST %[2]s/api/v1/usr/authenticate/ -H 'Content-Type: application/json' \
      -d '{"api_key":"dev","secret_key":"dev"}' | sed -E 's/.*"access":"([^"]+)".*/\1/')
  %[5]s -s %[2]s/api/v1/mkt/markets/
  %[5]s -s -X POST %[2]s/api/v1/odr/orders/ -H "Authorization: Bearer $TOKEN" \
      -H 'Content-Type: application/json' \
      -d '{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.001"}'
  %[5]s -s %[2]s/api/v1/mth/matches/BTC_USDT/

Ctrl-C stops everything.
`, store, gw, a.adminAd, a.backAddr, curl, tokensMode(a))
}

// tokensMode says how the dev gateway reads tokens.
func tokensMode(a *app) string {
	if a.cfg.Identity.Verify {
		return "verified at the edge with the reference backend's secret; limits count per account"
	}
	return "opaque (the configuration counts token strings); limits count per token"
}

// devKeySecret is the token-key secret of dev instances that share
// limits through Redis without setting one: every dev instance uses it, so
// they count a token under the same key. Never for production.
const devKeySecret = "exgate-dev-mode-key-secret-not-for-production"

// devSecret returns getenv with the key secret variable defaulting to
// devKeySecret.
func devSecret(getenv func(string) (string, bool), name string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := getenv(k)
		if k == name && !ok {
			return devKeySecret, true
		}
		return v, ok
	}
}

// limitStore says where rate limits are kept.
func limitStore(a *app) string {
	if a.limits.Kind == config.StoreRedis {
		return "Redis at " + strings.Join(a.cfg.Limiter.Redis.Addrs, ",") + " (shared with every instance using it)"
	}
	return "in memory (this process only; EXGATE_LIMITER_STORE=redis and EXGATE_LIMITER_REDIS_ADDRS share them)"
}

// curlBase turns a bound listen address into a URL a developer can paste:
// an unspecified host becomes localhost.
func curlBase(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "localhost"
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port == "80" {
		return "http://" + host
	}
	return "http://" + host + ":" + port
}

// devOverrides adapts a configuration to dev mode: limits in this process
// unless limiter.store is explicitly "redis" (so that two dev instances
// can share limits through a real Redis), no drain delay at Ctrl-C, and,
// unless the file configures identity itself, access tokens verified with
// the reference backend's signing secret, so that limits count per
// account out of the box (a route table that still counts token strings
// keeps tokens opaque). The reference backend's address is set once it
// listens.
func devOverrides(cfg *config.Config) {
	if cfg.Limiter.Store != config.StoreRedis {
		cfg.Limiter.Store = config.StoreMemory
	}
	cfg.Server.DrainDelay = 0
	if cfg.Identity.Verify {
		return
	}
	verified := *cfg
	verified.Routes = slices.Clone(cfg.Routes)
	for i := range verified.Routes {
		verified.Routes[i].Limits = slices.Clone(cfg.Routes[i].Limits)
	}
	verified.Identity.Verify = true
	verified.Identity.JWT.Keys = []config.JWTKey{{Algorithms: []string{"HS256"}, SecretEnv: devSecretEnv}}
	if verified.Validate() == nil {
		*cfg = verified
	}
}

// devSecretEnv is the variable dev mode reads the reference backend's
// signing secret from; dev mode answers it with sim.DevSecret.
const devSecretEnv = "EXGATE_DEV_SIM_JWT_SECRET"

// devGetenv is getenv with the reference backend's signing secret.
func devGetenv(getenv func(string) (string, bool)) func(string) (string, bool) {
	return func(k string) (string, bool) {
		if k == devSecretEnv {
			return sim.DevSecret, true
		}
		return getenv(k)
	}
}
