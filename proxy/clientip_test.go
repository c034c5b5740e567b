package proxy

import (
	"fmt"
	"io"
	"net/netip"
	"testing"

	"github.com/exgate/exgate/clientip"
	"github.com/exgate/exgate/config"
)

func TestPeerInClientForm(t *testing.T) {
	for in, want := range map[string]string{
		"203.0.113.7:1":            "203.0.113.7",
		"[::ffff:203.0.113.7]:1":   "203.0.113.7",
		"[64:ff9b::203.0.113.7]:1": "203.0.113.7",
		"[fe80::1%eth0]:1":         "fe80::1",
		"[2001:db8::1]:1":          "2001:db8::1",
	} {
		p := newPeer(in, &clientip.Proxies{})
		if !p.ok || p.addr.String() != want || len(p.realIP) != 1 || p.realIP[0] != want {
			t.Errorf("newPeer(%q) = %v %v %q, want %s", in, p.addr, p.ok, p.realIP, want)
		}
	}
}

// TestForwardedEntriesKeyedAsWritten: behind a trusted proxy, entries with
// ports, brackets, zones and IPv4-embedding forms are keyed as the address
// they carry, and X-Real-IP carries it without a zone.
func TestForwardedEntriesKeyedAsWritten(t *testing.T) {
	for _, mode := range []string{config.HeaderXForwardedFor, config.HeaderForwarded} {
		t.Run(mode, func(t *testing.T) {
			e := startLimited(t, nil, func(c *config.Config) {
				smallMatches(c)
				c.ClientIP.TrustedProxies = []config.Prefix{{Prefix: mustPrefix("127.0.0.0/8")}}
				c.ClientIP.Header = mode
			})
			name, wrap := "X-Forwarded-For", func(s string) string { return s }
			if mode == config.HeaderForwarded {
				name, wrap = "Forwarded", func(s string) string { return `for="` + s + `"` }
			}
			get := func(entry string) (int, string) {
				res := do(t, "GET", e.url+"/api/v1/mth/matches/BTC_USDT/", nil, name, wrap(entry))
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				return res.StatusCode, e.backend.last(t).Header.Get("X-Real-Ip")
			}
			// One IPv4 client under four spellings: one bucket of 3.
			for i, entry := range []string{"9.9.9.9:1111", "::ffff:9.9.9.9", "[64:ff9b::909:909]:80", "9.9.9.9"} {
				code, realIP := get(entry)
				switch {
				case i < 3 && (code != 200 || realIP != "9.9.9.9"):
					t.Fatalf("%s: %d, X-Real-Ip %q; want 200 as 9.9.9.9", entry, code, realIP)
				case i == 3 && code != 429:
					t.Fatalf("%s: %d, want 429 (the same client's 4th request)", entry, code)
				}
			}
			// Others are not the proxy: their own buckets.
			for entry, want := range map[string]string{"[2001:db8::1]:4711": "2001:db8::1", "fe80::1%eth0": "fe80::1", "198.51.100.1:2": "198.51.100.1"} {
				if code, realIP := get(entry); code != 200 || realIP != want {
					t.Errorf("%s: %d, X-Real-Ip %q; want 200 as %s", entry, code, realIP, want)
				}
			}
		})
	}
}

// TestSpoofedForwardedForChangesNothing: an untrusted peer cannot choose
// the address it is limited as.
func TestSpoofedForwardedForChangesNothing(t *testing.T) {
	e := startLimited(t, nil, smallMatches)
	codes := map[int]int{}
	for i := 0; i < 10; i++ {
		res := do(t, "GET", e.url+"/api/v1/mth/matches/BTC_USDT/", nil,
			"X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i), "X-Real-IP", fmt.Sprintf("198.51.100.%d", i),
			"Forwarded", fmt.Sprintf("for=192.0.2.%d", i))
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		codes[res.StatusCode]++
	}
	if codes[200] != 3 || codes[429] != 7 {
		t.Errorf("statuses %v, want 3×200 and 7×429: spoofed headers must not create allowances", codes)
	}
}

func TestTrustedProxyForwardedFor(t *testing.T) {
	e := startLimited(t, nil, func(c *config.Config) {
		smallMatches(c)
		c.ClientIP.TrustedProxies = []config.Prefix{{Prefix: mustPrefix("127.0.0.0/8")}, {Prefix: mustPrefix("10.0.0.0/8")}}
	})
	get := func(xff string) int {
		res := do(t, "GET", e.url+"/api/v1/mth/matches/BTC_USDT/", nil, "X-Forwarded-For", xff)
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	// Client 203.0.113.1 behind a trusted load balancer 10.0.0.2; the
	// left-most entry is whatever the client claimed.
	for i := 0; i < 3; i++ {
		if c := get(fmt.Sprintf("198.51.100.%d, 203.0.113.1, 10.0.0.2", i)); c != 200 {
			t.Fatalf("request %d: %d", i, c)
		}
	}
	if c := get("198.51.100.99, 203.0.113.1, 10.0.0.2"); c != 429 {
		t.Errorf("4th request of 203.0.113.1 with a new spoofed prefix: %d, want 429", c)
	}
	if c := get("203.0.113.2"); c != 200 {
		t.Errorf("another client behind the proxy: %d, want 200", c)
	}
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }
