package clientip

import "net/netip"

// ClientForm is the form in which a client address is keyed — by the
// rate limits, the shared pools and the connection share (edge) — compared
// with the trusted proxies and peers, and forwarded in X-Real-IP: without a
// zone (a zone names an interface of the host that saw the address,
// meaningless elsewhere), and an IPv6 address that embeds an IPv4 one as
// that IPv4 address — IPv4-mapped (::ffff:0:0/96), IPv4-translated
// (::ffff:0:0:0/96), NAT64 well-known prefix (64:ff9b::/96) and
// IPv4-compatible (::a.b.c.d, except :: and ::1). Otherwise every IPv4
// client seen through such a form would share one IPv6 /64 bucket.
func ClientForm(a netip.Addr) netip.Addr {
	a = a.WithZone("")
	if !a.Is6() {
		return a
	}
	b := a.As16()
	var v4 [4]byte
	copy(v4[:], b[12:])
	switch {
	case isZero(b[:10]) && b[10] == 0xff && b[11] == 0xff: // ::ffff:a.b.c.d
	case isZero(b[:8]) && b[8] == 0xff && b[9] == 0xff && b[10] == 0 && b[11] == 0: // ::ffff:0:a.b.c.d
	case b[0] == 0 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && isZero(b[4:12]): // 64:ff9b::a.b.c.d
	case isZero(b[:12]) && !(isZero(v4[:3]) && v4[3] <= 1): // ::a.b.c.d, not :: or ::1
	default:
		return a
	}
	return netip.AddrFrom4(v4)
}

// isZero reports whether every byte of b is zero.
func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// AddrGroup returns the address a client is limited as: IPv4 addresses
// as they are, IPv6 addresses reduced to their first v6Prefix bits (a
// /64 is what one subscriber usually gets), so that a client cannot
// multiply its allowance by cycling through its own IPv6 range.
func AddrGroup(a netip.Addr, v6Prefix int) netip.Addr {
	a = a.Unmap()
	if a.Is6() && v6Prefix > 0 && v6Prefix < 128 {
		if p, err := a.WithZone("").Prefix(v6Prefix); err == nil {
			return p.Addr()
		}
	}
	return a.WithZone("")
}

// InPrefixes reports whether a is inside one of ps.
func InPrefixes(a netip.Addr, ps []netip.Prefix) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
