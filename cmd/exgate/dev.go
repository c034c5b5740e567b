package main

import (
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/exgate/exgate/config"
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
	if a.limits.Kind == config.BackendRedis {
		return "Redis at " + strings.Join(a.cfg.Limiter.Redis.Addrs, ",") + " (shared with every instance using it)"
	}
	return "in memory (this process only; EXGATE_LIMITER_BACKEND=redis and EXGATE_LIMITER_REDIS_ADDRS share them)"
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
