package clientip

import (
	"net/netip"
	"strings"
	"testing"
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
		if !a.IsValid() || a.Zone() != "" || ClientForm(a) != a {
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
