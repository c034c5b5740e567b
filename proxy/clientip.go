package proxy

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/exgate/exgate/edge"
	"github.com/exgate/exgate/limiter"
)

// peerAddr parses an http.Request RemoteAddr ("ip:port") into the
// client-address form (limiter.ClientForm).
func peerAddr(remoteAddr string) (netip.Addr, bool) {
	ap, err := netip.ParseAddrPort(remoteAddr)
	if err != nil {
		return netip.Addr{}, false
	}
	return limiter.ClientForm(ap.Addr()), true
}

func inPrefixes(a netip.Addr, ps []netip.Prefix) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
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
			if !inPrefixes(a, trusted) {
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
		return limiter.ClientForm(a), true
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
		return limiter.ClientForm(a), true
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
		if asciiEqualFold(name, param) {
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

// peer is what exgate knows of a connection's TCP peer, worked out once
// per connection (Server.ConnContext) rather than per request.
type peer struct {
	addr    netip.Addr // in client form
	ok      bool       // addr parsed
	trusted bool       // addr is one of the trusted proxies
	realIP  []string   // X-Real-IP value when the peer is the client; never modified
	// token is the last bearer token a request on the connection was
	// accepted with, and its id (tokenMemo), or nil.
	token atomic.Pointer[tokenMemo]
}

// peerKey is the context key of a connection's *connPeer.
type peerKey struct{}

// ConnContext records c for the requests that come on it: their peer, and
// whether c was accepted past its client's share, each worked out on
// first use — once per connection, not per request, and not here: the
// server calls ConnContext on its accept loop, and with the PROXY
// protocol the remote address is known only once the connection's
// goroutine has read the header. edge.NewServer calls it.
func (g *Gateway) ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, peerKey{}, &connPeer{conn: c, trusted: g.trusted})
}

// connPeer is a connection's peer, worked out on first use, and whether
// the connection was accepted past its client's share (edge.ShareConnections).
type connPeer struct {
	conn     net.Conn
	trusted  []netip.Prefix
	once     sync.Once
	p        *peer
	pastOnce sync.Once
	past     bool
}

// pastShare reports whether the connection was accepted past its client's
// share, working it out on the first call.
func (c *connPeer) pastShare() bool {
	c.pastOnce.Do(func() { c.past = edge.PastShare(c.conn) })
	return c.past
}

// get returns the peer, working it out on the first call.
func (c *connPeer) get() *peer {
	c.once.Do(func() { c.p = newPeer(c.conn.RemoteAddr().String(), c.trusted) })
	return c.p
}

// newPeer works out the peer of a connection whose remote address is
// remoteAddr.
func newPeer(remoteAddr string, trusted []netip.Prefix) *peer {
	p := &peer{}
	p.addr, p.ok = peerAddr(remoteAddr)
	if p.ok {
		p.trusted = inPrefixes(p.addr, trusted)
		p.realIP = []string{p.addr.String()}
	}
	return p
}

// peerOf returns the peer of r's connection: the one the server recorded
// (Server.ConnContext), else worked out from r.RemoteAddr.
func (g *Gateway) peerOf(r *http.Request) *peer {
	if p, ok := r.Context().Value(peerKey{}).(*connPeer); ok && p != nil {
		return p.get()
	}
	return newPeer(r.RemoteAddr, g.trusted)
}

// client derives the request's client address and its X-Real-IP value,
// from p, the connection's peer, and, when p is a trusted proxy, the
// configured forwarding header (client_ip.header).
func (g *Gateway) client(r *http.Request, p *peer) (netip.Addr, []string) {
	if !p.ok {
		return netip.Addr{}, nil
	}
	a := g.clientAddrOf(r, p)
	if a == p.addr {
		return a, p.realIP
	}
	return a, []string{a.String()}
}

// clientAddrOf is client's address alone, allocating nothing: p's, or,
// when p is a trusted proxy, the one read in client_ip.header; none when
// p has none.
func (g *Gateway) clientAddrOf(r *http.Request, p *peer) netip.Addr {
	switch {
	case !p.ok:
		return netip.Addr{}
	case !p.trusted:
		return p.addr
	}
	return clientAddr(p.addr, r.Header[g.clientHeader], g.forwarded, g.trusted)
}

// trustedProto returns the scheme a trusted peer says its client used, as
// the peer itself wrote it: the proto= of the last Forwarded element
// (client_ip.header: forwarded; the peer passes an X-Forwarded-Proto
// through unread), else the last entry of X-Forwarded-Proto (a proxy that
// appends one leaves the client's before it); "" when it says none.
func (g *Gateway) trustedProto(h http.Header) string {
	name := "X-Forwarded-Proto"
	if g.forwarded {
		name = "Forwarded"
	}
	v := h[name]
	if len(v) == 0 {
		return ""
	}
	last := v[len(v)-1]
	if g.forwarded {
		last, _ = lastForwardedElement(last)
		proto, _ := forwardedParam(last, "proto")
		return proto
	}
	if i := strings.LastIndexByte(last, ','); i >= 0 {
		last = last[i+1:]
	}
	return trimOWS(last)
}
