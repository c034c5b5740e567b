package config

import (
	"slices"
	"testing"
	"time"
)

// TestDiscoveryAndSplitConfig: a service's dns block and a route's split,
// as decoded and as refused, each problem at its YAML path.
func TestDiscoveryAndSplitConfig(t *testing.T) {
	runParseCases(t, []parseCase{
		{name: "dns for the default service and SRV for another",
			yaml: "upstream:\n  dns: {name: orders.test, port: 8000}\n  services:\n    mkt:\n      dns: {srv: _http._tcp.mkt.test, scheme: https, interval: 1s, resolver: '10.0.0.10:53'}\n",
			check: func(t *testing.T, c *Config) {
				d, _ := c.Upstream.Service(DefaultService)
				if want := (Discovery{Name: "orders.test", Port: 8000, Scheme: "http", Interval: 5 * time.Second}); d.DNS != want {
					t.Errorf("default service's dns: %+v, want %+v", d.DNS, want)
				}
				m, _ := c.Upstream.Service("mkt")
				if want := (Discovery{SRV: "_http._tcp.mkt.test", Scheme: "https", Interval: time.Second, Resolver: "10.0.0.10:53"}); m.DNS != want {
					t.Errorf("mkt's dns: %+v, want %+v", m.DNS, want)
				}
			}},
		{name: "dns problems",
			yaml: "upstream:\n  dns: {name: a.test, srv: _x._tcp.a.test, port: 80, scheme: ftp, interval: 0s, resolver: 'nowhere'}\n  services:\n" +
				"    b: {dns: {name: b.test}}\n    c: {dns: {srv: _x._tcp.c.test, port: 80}}\n    d: {urls: ['http://d:80'], dns: {name: d.test, port: 80}}\n    e: {dns: {port: 80}}\n",
			paths: []string{"upstream.dns.scheme", "upstream.dns.interval", "upstream.dns.resolver", "upstream.dns.srv",
				"upstream.services.b.dns.port", "upstream.services.c.dns.port", "upstream.services.d.dns",
				"upstream.services.e.urls", "upstream.services.e.dns.port"}},
		{name: "a sticky split",
			yaml: "upstream:\n  services:\n    canary: {urls: ['http://c:80']}\nroutes:\n  - {name: o, match: 'POST /o/', split: [{service: default, weight: 95}, {service: canary, weight: 5}], sticky: account}\n",
			check: func(t *testing.T, c *Config) {
				r := c.Routes[0]
				if want := []SplitTarget{{"default", 95}, {"canary", 5}}; !slices.Equal(r.Split, want) || r.Sticky != StickyAccount {
					t.Errorf("split %+v sticky %q", r.Split, r.Sticky)
				}
			}},
		{name: "split problems",
			yaml: "upstream:\n  services:\n    canary: {urls: ['http://c:80']}\nroutes:\n" +
				"  - {name: a, match: 'GET /a/', service: canary, split: [{service: default, weight: 1}, {service: nope, weight: 1}], sticky: user}\n" +
				"  - {name: b, match: 'GET /b/', split: [{service: canary, weight: 0}, {service: canary, weight: -1}]}\n" +
				"  - {name: c, match: 'GET /c/', split: [{service: canary, weight: 1}]}\n" +
				"  - {name: d, match: 'GET /d/', sticky: account}\n",
			paths: []string{"routes[0].service", "routes[0].sticky", "routes[0].split[1].service",
				"routes[1].split[1].service", "routes[1].split[1].weight", "routes[1].split",
				"routes[2].split", "routes[3].sticky"}},
	})
}
