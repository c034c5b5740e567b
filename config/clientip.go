package config

// ClientIP says how the client address is derived.
type ClientIP struct {
	// TrustedProxies lists the peers (CIDR or single address) whose
	// Header is believed, read right to left. Default: none.
	TrustedProxies []Prefix `yaml:"trusted_proxies"`
	// Header is the header the trusted proxies append the client's
	// address to: "x-forwarded-for" or "forwarded" (RFC 7239, its for=
	// parameters). Only that one is read: a proxy that writes one header
	// passes the other through from the client unchecked. Default
	// "x-forwarded-for".
	Header string `yaml:"header"`
	// IPv6Prefix is the prefix length that groups IPv6 clients into one
	// address for limiting. Default 64.
	IPv6Prefix int `yaml:"ipv6_prefix" reload:"live"`
}

// Values of client_ip.header.
const (
	HeaderXForwardedFor = "x-forwarded-for"
	HeaderForwarded     = "forwarded"
)

// DefaultClientIP returns the client address defaults: no trusted
// proxies, so the peer address is the client's.
func DefaultClientIP() ClientIP {
	return ClientIP{Header: HeaderXForwardedFor, IPv6Prefix: 64}
}

// check reports problems in the client_ip section at p.
func (c *ClientIP) check(col *collector, p path) {
	for i, pr := range c.TrustedProxies {
		if !pr.IsValid() {
			col.addf(p.key("trusted_proxies").index(i), "not a valid IP prefix")
		}
	}
	col.oneOf(p.key("header"), c.Header, HeaderXForwardedFor, HeaderForwarded)
	if n := c.IPv6Prefix; n < 1 || n > 128 {
		col.addf(p.key("ipv6_prefix"), "must be from 1 to 128, got %d", n)
	}
}
