package proxy

import (
	"fmt"
	"io"
	"net/netip"
	"strings"
	"testing"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/limiter"
)

func TestNodeAddr(t *testing.T) {
	tests := []struct {
		in   string
		want string // "" means unreadable
	}{
		{"203.0.113.7", "203.0.113.7"},
		{"203.0.113.7:1111", "203.0.113.7"},
		{"203.0.113.7:0", "203.0.113.7"},
		{"203.0.113.7:65535", "203.0.113.7"},
		{"203.0.113.7:_obf.port-1", "203.0.113.7"},
		{"2001:db8::1", "2001:db8::1"},
		{"[2001:db8::1]", "2001:db8::1"},
		{"[2001:db8::1]:4711", "2001:db8::1"},
		{"[2001:db8::1]:_x", "2001:db8::1"},
		{"fe80::1%eth0", "fe80::1"},
		{"[fe80::1%eth0]:80", "fe80::1"},
		{"[fe80::1%25eth0]", "fe80::1"},
		// IPv4 embedded in IPv6 is keyed as the IPv4 address.
		{"::ffff:198.51.100.9", "198.51.100.9"},
		{"[::ffff:198.51.100.9]:80", "198.51.100.9"},
		{"::ffff:c633:6409", "198.51.100.9"},
		{"::ffff:0:198.51.100.9", "198.51.100.9"},
		{"64:ff9b::198.51.100.9", "198.51.100.9"},
		{"[64:ff9b::c633:6409]:1", "198.51.100.9"},
		{"::198.51.100.9", "198.51.100.9"},
		{"::1", "::1"},
		{"::", "::"},
		{"64:ff9b:1::198.51.100.9", "64:ff9b:1::c633:6409"}, // local-use NAT64 prefix: not a fixed position
		{"2002:c633:6409::1", "2002:c633:6409::1"},
		// Unreadable.
		{"", ""},
		{"unknown", ""},
		{"_hidden", ""},
		{"203.0.113.7:", ""},
		{"203.0.113.7:65536", ""},
		{"203.0.113.7:123456", ""},
		{"203.0.113.7:x", ""},
		{"203.0.113.7:_", ""},
		{"[203.0.113.7]", ""},
		{"[203.0.113.7]:80", ""},
		{"[2001:db8::1", ""},
		{"[2001:db8::1]80", ""},
		{"[2001:db8::1]:", ""},
		{"2001:db8::1:80:", ""},
		{"203.0.113.7 ", ""},
		{"203.0.113.007", ""},
		{"example.com", ""},
		{"example.com:80", ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			a, ok := nodeAddr(tt.in)
			if tt.want == "" {
				if ok {
					t.Fatalf("nodeAddr(%q) = %v, want unreadable", tt.in, a)
				}
				return
			}
			if !ok || a.String() != tt.want {
				t.Fatalf("nodeAddr(%q) = %v, %v; want %s", tt.in, a, ok, tt.want)
			}
			// A readable entry is read on every request from a trusted
			// proxy: it allocates nothing.
			if n := testing.AllocsPerRun(100, func() { _, _ = nodeAddr(tt.in) }); n != 0 {
				t.Errorf("nodeAddr(%q): %v allocations, want none", tt.in, n)
			}
		})
	}
}

func TestClientAddrWalk(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	peer := netip.MustParseAddr("10.0.0.1")
	tests := []struct {
		name      string
		forwarded bool
		values    []string
		want      string
	}{
		{"no header", false, nil, "10.0.0.1"},
		{"one client", false, []string{"203.0.113.7"}, "203.0.113.7"},
		{"client with a port", false, []string{"203.0.113.7:1111"}, "203.0.113.7"},
		{"bracketed IPv6 with a port", false, []string{"[2001:db8::1]:4711"}, "2001:db8::1"},
		{"mapped IPv4", false, []string{"::ffff:203.0.113.7"}, "203.0.113.7"},
		{"zone dropped", false, []string{"fe80::1%eth0"}, "fe80::1"},
		{"spoofed left part ignored", false, []string{"1.1.1.1, 203.0.113.7, 10.0.0.2"}, "203.0.113.7"},
		{"across lines", false, []string{"1.1.1.1, 203.0.113.7", "10.0.0.3:80", "10.0.0.2"}, "203.0.113.7"},
		{"trusted proxy with a port and mapped form", false, []string{"203.0.113.7, [::ffff:10.0.0.2]:80"}, "203.0.113.7"},
		{"trusted IPv6 proxy in brackets", false, []string{"203.0.113.7, [fd00::2]:80"}, "203.0.113.7"},
		{"garbage stops at the last trusted hop", false, []string{"203.0.113.7, unknown, 10.0.0.2"}, "10.0.0.2"},
		{"garbage right after the peer", false, []string{"203.0.113.7, garbage"}, "10.0.0.1"},
		{"empty entry stops", false, []string{"203.0.113.7,, 10.0.0.2"}, "10.0.0.2"},
		{"all trusted", false, []string{"10.0.0.3, 10.0.0.2"}, "10.0.0.3"},
		// Forwarded (RFC 7239).
		{"forwarded one element", true, []string{"for=203.0.113.7"}, "203.0.113.7"},
		{"forwarded quoted IPv6 with port", true, []string{`for="[2001:db8:cafe::17]:4711"`}, "2001:db8:cafe::17"},
		{"forwarded case and other pairs", true, []string{`proto=https;FOR=203.0.113.7:80;by=10.0.0.2`}, "203.0.113.7"},
		{"forwarded chain", true, []string{`for=1.1.1.1, for=203.0.113.7;proto=http, for="10.0.0.2"`}, "203.0.113.7"},
		{"forwarded quoted comma", true, []string{`for=203.0.113.7;ext="a,b", for=10.0.0.2`}, "203.0.113.7"},
		{"forwarded escaped quote", true, []string{`for=203.0.113.7;ext="a\",b", for=10.0.0.2`}, "203.0.113.7"},
		{"forwarded unknown stops", true, []string{`for=203.0.113.7, for=unknown, for=10.0.0.2`}, "10.0.0.2"},
		{"forwarded obfuscated stops", true, []string{`for=203.0.113.7, for=_hidden`}, "10.0.0.1"},
		{"forwarded without for stops", true, []string{`for=203.0.113.7, proto=https`}, "10.0.0.1"},
		{"forwarded for twice stops", true, []string{`for=203.0.113.7;for=1.1.1.1`}, "10.0.0.1"},
		{"forwarded unterminated quote stops", true, []string{`for="203.0.113.7`}, "10.0.0.1"},
		{"forwarded header ignored in XFF mode", false, []string{`for=203.0.113.7`}, "10.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := clientAddr(peer, tt.values, tt.forwarded, trusted)
			if got.String() != tt.want {
				t.Errorf("clientAddr(%q) = %v, want %s", tt.values, got, tt.want)
			}
		})
	}
}

func TestPeerInClientForm(t *testing.T) {
	for in, want := range map[string]string{
		"203.0.113.7:1":            "203.0.113.7",
		"[::ffff:203.0.113.7]:1":   "203.0.113.7",
		"[64:ff9b::203.0.113.7]:1": "203.0.113.7",
		"[fe80::1%eth0]:1":         "fe80::1",
		"[2001:db8::1]:1":          "2001:db8::1",
	} {
		p := newPeer(in, nil)
		if !p.ok || p.addr.String() != want || len(p.realIP) != 1 || p.realIP[0] != want {
			t.Errorf("newPeer(%q) = %v %v %q, want %s", in, p.addr, p.ok, p.realIP, want)
		}
	}
}

// FuzzClientAddr: whatever a trusted proxy's header holds, the walk ends
// on an address in client form (no zone, no embedded IPv4 form) that is
// the peer or was read from an entry, and never panics.
func FuzzClientAddr(f *testing.F) {
	for _, s := range []string{
		"203.0.113.7, 10.0.0.2", "[2001:db8::1]:80", "::ffff:1.2.3.4", "fe80::1%eth0", "unknown",
		`for="[2001:db8:cafe::17]:4711";proto=http, for=10.0.0.2`, `for=1.2.3.4;ext="a\",b"`, `for="\`,
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	peer := netip.MustParseAddr("10.0.0.1")
	f.Fuzz(func(t *testing.T, h string, forwarded bool) {
		a := clientAddr(peer, strings.Split(h, "\n"), forwarded, trusted)
		if !a.IsValid() || a.Zone() != "" || limiter.ClientForm(a) != a {
			t.Fatalf("clientAddr(%q) = %v, not in client form", h, a)
		}
		if forwarded {
			return
		}
		if a == peer {
			return
		}
		found := false
		for _, e := range strings.FieldsFunc(h, func(r rune) bool { return r == ',' || r == '\n' }) {
			if b, ok := nodeAddr(trimOWS(e)); ok && b == a {
				found = true
			}
		}
		if !found {
			t.Fatalf("clientAddr(%q) = %v, read from no entry", h, a)
		}
	})
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

// TestForwardedChainAllocatesOnlyItsValue: the X-Forwarded-For value a
// trusted peer's request gets in forwarded mode is built with one
// allocation, its own, the hops walked and its text kept on the stack.
func TestForwardedChainAllocatesOnlyItsValue(t *testing.T) {
	peer := netip.MustParseAddr("127.0.0.1")
	trusted := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/8")}
	for _, tc := range []struct {
		name   string
		values []string
		want   string
	}{
		{"one hop", []string{"for=198.51.100.7"}, "198.51.100.7, 127.0.0.1"},
		{"through trusted proxies", []string{`for=198.51.100.7;proto=https, for=10.0.0.2, for="10.0.0.3:80"`}, "198.51.100.7, 10.0.0.2, 10.0.0.3, 127.0.0.1"},
		{"IPv6 on a second line", []string{"for=203.0.113.66", `for="[2001:db8::1]:4711"`}, "2001:db8::1, 127.0.0.1"},
		{"none", nil, "127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := forwardedChain(peer, tc.values, trusted); got != tc.want {
				t.Fatalf("forwardedChain = %q, want %q", got, tc.want)
			}
			if n := testing.AllocsPerRun(100, func() { _ = forwardedChain(peer, tc.values, trusted) }); n > 1 {
				t.Errorf("%v allocations, want at most 1, the value", n)
			}
		})
	}
}
