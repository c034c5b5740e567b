package main

import (
	"fmt"
	"io"
	"net"
	"strings"
)

// printDevBanner tells a developer what runs where and how to try it. The
// curl lines are the README's quick start.
func printDevBanner(w io.Writer, a *app) {
	gw := curlBase(a.addr)
	fmt.Fprintf(w, `
exgate dev mode: gateway, reference backend and in-memory limits in one process.

  gateway   %s
  admin     http://%s/healthz  /readyz
  backend   http://%s  (reference exchange; credentials api_key "dev", secret_key "dev")

Try it:

  TOKEN=$(curl -s -X POST %s/api/v1/usr/authenticate/ -H 'Content-Type: application/json' \
      -d '{"api_key":"dev","secret_key":"dev"}' | sed -E 's/.*"access":"([^"]+)".*/\1/')
  curl -s %s/api/v1/mkt/markets/
  curl -s -X POST %s/api/v1/odr/orders/ -H "Authorization: Bearer $TOKEN" \
      -H 'Content-Type: application/json' \
      -d '{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.001"}'
  curl -s %s/api/v1/mth/matches/BTC_USDT/

Ctrl-C stops everything.
`, gw, a.adminAd, a.backAddr, gw, gw, gw, gw)
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
