// Package clientip reads who a request's client is (the client_ip
// section; docs/limits.md, "Client address"): the TCP peer, or, when the
// peer is one of the trusted proxies, the address they name in the header
// they write (X-Forwarded-For, or Forwarded, RFC 7239), read right to
// left. Every address it returns is in client form (ClientForm), the
// form every package keys, groups (AddrGroup) and compares a client
// address in.
// It reads addresses and header values, never a request: the gateway
// works out a connection's peer once and asks here for each request's
// client.
package clientip

import (
	"net/http"
	"net/netip"
	"strings"

	"github.com/exgate/exgate/config"
)

// Proxies is the client_ip section as requests are read by it: the peers
// whose forwarding header is believed (trusted_proxies) and which header
// that is (header). Its zero value trusts no peer.
type Proxies struct {
	trusted   []netip.Prefix
	forwarded bool   // the header is Forwarded, else X-Forwarded-For
	header    string // its canonical name
}

// New returns the proxies c trusts.
func New(c config.ClientIP) *Proxies {
	p := &Proxies{header: "X-Forwarded-For"}
	if c.Header == config.HeaderForwarded {
		p.forwarded, p.header = true, "Forwarded"
	}
	for _, pr := range c.TrustedProxies {
		p.trusted = append(p.trusted, pr.Prefix)
	}
	return p
}

// Trusts reports whether a, in client form, is one of the trusted proxies.
func (p *Proxies) Trusts(a netip.Addr) bool { return InPrefixes(a, p.trusted) }

// Forwarded reports whether the trusted proxies write Forwarded
// (client_ip.header: forwarded) rather than X-Forwarded-For.
func (p *Proxies) Forwarded() bool { return p.forwarded }

// Client returns the client a trusted peer names in h, its request's
// header (clientAddr), allocating nothing.
func (p *Proxies) Client(peer netip.Addr, h http.Header) netip.Addr {
	return clientAddr(peer, h[p.header], p.forwarded, p.trusted)
}

// Chain returns the X-Forwarded-For value sent the backend for a trusted
// peer whose proxies write Forwarded, values its lines (forwardedChain).
func (p *Proxies) Chain(peer netip.Addr, values []string) string {
	return forwardedChain(peer, values, p.trusted)
}

// Proto returns the scheme a trusted peer says its client used, as the
// peer itself wrote it: the proto= of the last Forwarded element
// (client_ip.header: forwarded; the peer passes an X-Forwarded-Proto
// through unread), else the last entry of X-Forwarded-Proto (a proxy that
// appends one leaves the client's before it); "" when it says none.
func (p *Proxies) Proto(h http.Header) string {
	name := "X-Forwarded-Proto"
	if p.forwarded {
		name = "Forwarded"
	}
	v := h[name]
	if len(v) == 0 {
		return ""
	}
	last := v[len(v)-1]
	if p.forwarded {
		last, _ = lastForwardedElement(last)
		proto, _ := forwardedParam(last, "proto")
		return proto
	}
	if i := strings.LastIndexByte(last, ','); i >= 0 {
		last = last[i+1:]
	}
	return trimOWS(last)
}

// Peer parses an http.Request RemoteAddr ("ip:port") into the
// client-address form (ClientForm).
func Peer(remoteAddr string) (netip.Addr, bool) {
	ap, err := netip.ParseAddrPort(remoteAddr)
	if err != nil {
		return netip.Addr{}, false
	}
	return ClientForm(ap.Addr()), true
}

// clientAddr derives the client's address from a trusted peer's
// forwarding header values (X-Forwarded-For, or Forwarded when forwarded
// is set), read right to left across all their lines: the first address
// that is not a trusted proxy is the client. Entries are read as proxies
// write them (nodeAddr): with or without a port, IPv6 in brackets, with a
// zone. An entry that cannot be read (garbage, "unknown", an obfuscated
// identifier, an empty entry, a Forwarded element without exactly one
// for=) stops the walk: the client is then the last trusted hop, the one
// that wrote the entry, never anything further left, which whoever sent
// the request to that hop chose.
func clientAddr(peer netip.Addr, values []string, forwarded bool, trusted []netip.Prefix) netip.Addr {
	client, _ := walkClient(peer, values, forwarded, trusted, nil, false)
	return client
}

// forwardedChain returns the X-Forwarded-For value exgate sends the backend
// for a trusted peer whose client it read in Forwarded (values, its
// lines): the addresses clientAddr walked through, from the client to the
// last trusted proxy, in client form, then the peer's. The proxies wrote
// Forwarded and passed a client's X-Forwarded-For through unread, so the
// backend gets the chain exgate read, as proxies appending to
// X-Forwarded-For would have written it from the client on: its client is
// the one exgate counted, read right to left past exgate and the proxies,
// or as the left-most entry.
//
// It allocates only the value: the hops of a chain of up to 8 and the
// text of one up to 512 bytes are kept on the stack.
func forwardedChain(peer netip.Addr, values []string, trusted []netip.Prefix) string {
	var hopBuf [8]netip.Addr
	_, hops := walkClient(peer, values, true, trusted, hopBuf[:0], true)
	var textBuf [512]byte
	b := textBuf[:0]
	for i := len(hops) - 1; i >= 0; i-- {
		b = hops[i].AppendTo(b)
		b = append(b, ", "...)
	}
	b = peer.AppendTo(b)
	return string(b)
}

// walkClient is clientAddr, and, when collect is set, hops with every
// address it reads on its way appended (right to left), the client's
// last.
func walkClient(peer netip.Addr, values []string, forwarded bool, trusted []netip.Prefix, hops []netip.Addr, collect bool) (netip.Addr, []netip.Addr) {
	client := peer
	for i := len(values) - 1; i >= 0; i-- {
		h := values[i]
		for h != "" {
			var entry string
			if forwarded {
				entry, h = lastForwardedElement(h)
			} else if j := strings.LastIndexByte(h, ','); j >= 0 {
				entry, h = h[j+1:], h[:j]
			} else {
				entry, h = h, ""
			}
			var node string
			ok := true
			if forwarded {
				node, ok = forwardedFor(entry)
			} else {
				node = trimOWS(entry)
			}
			a, parsed := nodeAddr(node)
			if !ok || !parsed {
				return client, hops
			}
			client = a
			if collect {
				hops = append(hops, a)
			}
			if !InPrefixes(a, trusted) {
				return client, hops
			}
		}
	}
	return client, hops
}

// nodeAddr reads one forwarding entry's address, in client form: "a.b.c.d",
// "a.b.c.d:port", an IPv6 address bare or in brackets ("[v6]",
// "[v6]:port"), each with an optional zone. A port is 1 to 5 digits up to
// 65535, or an RFC 7239 obfuscated port ("_" then letters, digits, ".",
// "_", "-"). Brackets hold only IPv6; an IPv4 address with a port is never
// bracketed and an IPv6 address with a port always is.
func nodeAddr(s string) (netip.Addr, bool) {
	if s == "" {
		return netip.Addr{}, false
	}
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		if rest := s[end+1:]; rest != "" && (rest[0] != ':' || !validPort(rest[1:])) {
			return netip.Addr{}, false
		}
		a, err := netip.ParseAddr(s[1:end])
		if err != nil || !a.Is6() {
			return netip.Addr{}, false
		}
		return ClientForm(a), true
	}
	i := strings.IndexByte(s, ':')
	if i < 0 || strings.IndexByte(s[i+1:], ':') >= 0 {
		// No colon (IPv4) or two or more (IPv6): an address alone. One
		// colon is never an address alone, and trying one would allocate
		// ParseAddr's error for every IPv4 entry with a port.
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Addr{}, false
		}
		return ClientForm(a), true
	}
	if !validPort(s[i+1:]) {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(s[:i])
	if err != nil || !a.Is4() {
		return netip.Addr{}, false
	}
	return a, true
}

// validPort reports whether s is a port number (at most 65535, at most
// five digits) or an RFC 7239 obfuscated port.
func validPort(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	if s[0] == '_' {
		for i := 1; i < len(s); i++ {
			c := s[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
				return false
			}
		}
		return len(s) > 1
	}
	if len(s) > 5 {
		return false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n <= 65535
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// trimOWS removes spaces and tabs from both ends of s.
func trimOWS(s string) string { return strings.Trim(s, " \t") }

// lastForwardedElement splits a Forwarded header value (RFC 7239: elements
// separated by commas, quoted strings may hold commas) into its last
// element and what precedes it.
func lastForwardedElement(h string) (last, rest string) {
	split := -1 // the last comma outside a quoted string
	quoted := false
	for i := 0; i < len(h); i++ {
		switch c := h[i]; {
		case quoted && c == '\\':
			i++ // the escaped character
		case c == '"':
			quoted = !quoted
		case !quoted && c == ',':
			split = i
		}
	}
	if split < 0 {
		return h, ""
	}
	return h[split+1:], h[:split]
}

// forwardedFor returns the value of the for= parameter of one Forwarded
// element (forwardedParam).
func forwardedFor(elem string) (node string, ok bool) { return forwardedParam(elem, "for") }

// forwardedParam returns the value of the parameter called name of one
// Forwarded element (pairs separated by ";", names compared ignoring case,
// values a token or a quoted string). ok is false when the element cannot
// be read or does not have exactly one such parameter. Unquoted values may
// hold ":", "[" and "]" (RFC 7239 requires quotes there; proxies omit
// them).
func forwardedParam(elem, param string) (node string, ok bool) {
	s := elem
	found := false
	for {
		s = trimOWS(s)
		i := strings.IndexByte(s, '=')
		if i <= 0 {
			return "", false
		}
		name := s[:i]
		for j := 0; j < len(name); j++ {
			if !isTchar(name[j]) {
				return "", false
			}
		}
		s = s[i+1:]
		var val string
		if s != "" && s[0] == '"' {
			var good bool
			if val, s, good = unquote(s); !good {
				return "", false
			}
		} else {
			j := 0
			for j < len(s) && s[j] != ';' && s[j] != ' ' && s[j] != '\t' && s[j] != '"' {
				j++
			}
			val, s = s[:j], s[j:]
		}
		if strings.EqualFold(name, param) { // name is all tchar: ASCII
			if found {
				return "", false
			}
			node, found = val, true
		}
		s = trimOWS(s)
		if s == "" {
			return node, found
		}
		if s[0] != ';' {
			return "", false
		}
		s = s[1:]
	}
}

// unquote reads the quoted string at the start of s (RFC 9110: "\"
// escapes the next character) and returns its content and the rest.
func unquote(s string) (val, rest string, ok bool) {
	var b []byte // only when there is an escape
	for i := 1; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			if b != nil {
				return string(b), s[i+1:], true
			}
			return s[1:i], s[i+1:], true
		case '\\':
			if i+1 == len(s) {
				return "", "", false
			}
			if b == nil {
				b = append([]byte(nil), s[1:i]...)
			}
			i++
			b = append(b, s[i])
		default:
			if b != nil {
				b = append(b, c)
			}
		}
	}
	return "", "", false
}

// isTchar reports whether c may appear in an RFC 9110 token.
func isTchar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
