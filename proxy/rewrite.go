package proxy

import (
	"net/http"
	"net/http/httputil"
	"strings"
)

// rewrite turns the inbound request into the outbound one, st's: sent
// with st's forwarded context (forward), the client's request keeping its
// own. The inbound URL
// path is already the route's canonical path.
func (g *Gateway) rewrite(st *requestState, pr *httputil.ProxyRequest) {
	out := pr.Out // its URL is the instance's, set by forward (target)
	if st.fwdCtx != nil {
		setContext(out, st.fwdCtx)
		st.fwdCtx = nil
	}
	fwdHost := g.forwardsHost(pr.In.Host)
	if !fwdHost {
		// The instance's host:port (out.URL's), as net/http sends it
		// when Host is empty; else the client's, one of the API's names,
		// which ReverseProxy's copy of the request kept: the name a
		// backend builds its absolute links from (Location, pagination).
		out.Host = ""
	}
	// The query as the client sent it, which checkQuery held to what
	// ReverseProxy forwards unchanged: ReverseProxy re-encodes every query
	// (sorted, escaped anew, past its bound dropped whole) when GODEBUG
	// names urlmaxqueryparams, whatever its value.
	out.URL.RawQuery = pr.In.URL.RawQuery
	closeAfterHead(out)
	src := out.Header // ReverseProxy's copy of the client's header
	if st.inHeader != nil {
		src, pr.In.Header = st.inHeader, st.inHeader // hidden by forward: out's is empty (hideHeader)
	}
	keepInMemoryBody(pr)
	dropRequestTrailers(out)
	p := g.forwardedPeer(pr.In, st)
	// Tracing off, a client's trace context is still not the backend's
	// to sample by or read baggage from (tracing.trust_incoming);
	// scanHeader saw the W3C fields.
	dropTrace := g.tracer == nil && (!st.noDrops || g.formats.NonW3C()) && !g.trustsTraceOf(p)
	out.Header = g.backendHeader(pr, st, src, p, dropTrace)
	// What httputil.ProxyRequest.SetXForwarded sets, from the
	// connection's peer worked out once per connection, with shared
	// header values instead of new ones per request. The client's
	// (and Forwarded) are not copied (sentAs).
	if p.ok {
		xff := p.realIP
		switch {
		case !p.trusted: // from anyone else, the chain is dropped
		case g.proxies.Forwarded():
			// The trusted proxies wrote Forwarded: the chain read there,
			// never the X-Forwarded-For they passed through unread.
			if fwd := pr.In.Header["Forwarded"]; len(fwd) > 0 {
				xff = []string{g.proxies.Chain(p.addr, fwd)}
			}
		default:
			// Keep the chain the trusted proxy built and append the peer.
			if prior := pr.In.Header["X-Forwarded-For"]; len(prior) > 0 {
				xff = []string{strings.Join(prior, ", ") + ", " + p.realIP[0]}
			}
		}
		out.Header["X-Forwarded-For"] = xff
	}
	if fwdHost {
		// The client's Host only when the backend gets it as Host: a
		// backend that builds links from X-Forwarded-Host (Django's
		// USE_X_FORWARDED_HOST, Rails, Express behind "trust proxy")
		// would otherwise build them from a name the client chose, the
		// Host poisoning forward_hosts keeps from Host.
		out.Header["X-Forwarded-Host"] = g.forwardedHost(pr.In.Host)
	}
	proto := forwardedHTTP
	if pr.In.TLS != nil {
		proto = forwardedHTTPS
	}
	if p.trusted {
		switch v := g.proxies.Proto(pr.In.Header); {
		case asciiEqualFold(v, "http"):
			proto = forwardedHTTP
		case asciiEqualFold(v, "https"):
			proto = forwardedHTTPS
		}
	}
	out.Header["X-Forwarded-Proto"] = proto
	if _, ok := out.Header["User-Agent"]; !ok {
		// What ReverseProxy sets after the rewrite (so that the
		// Transport sends none of Go's own), in a shared value.
		out.Header["User-Agent"] = noUserAgent
	}
}

// setBackendHeaders sets in h, the outbound request's header, the headers
// exgate sends the backend in place of the client's (which sentAs leaves
// out): X-Request-ID when exgate chose the id sent (idValue), and
// X-Real-IP, the client address (none when it is not known). They are set
// on the outbound request alone, in values never modified: the inbound
// header stays as the client sent it.
func (st *requestState) setBackendHeaders(h http.Header) {
	if st.idValue != nil {
		h["X-Request-Id"] = st.idValue
	}
	if st.realIP != nil {
		h["X-Real-Ip"] = st.realIP
	}
}

// forwardedPeer returns the peer of in, a request forward sends: the one
// setClientAddress derived (st's), else the connection's.
func (g *Gateway) forwardedPeer(in *http.Request, st *requestState) *peer {
	if st.peer != nil {
		return st.peer
	}
	return g.peerOf(in)
}

// forwardsHost reports whether the backend gets host, a request's Host,
// as its own: one of upstream.forward_hosts (its name compared whatever
// the case, the port and a final dot), or any with "*"; never an empty
// one, nor one whose port is not digits or that is bracketed but not an
// IPv6 address followed by nothing but its port: net/http takes such a
// Host ("api.example:.evil.example"), which the backend, or a link it
// builds from it, would read as another name than exgate compared. It
// allocates nothing.
func (g *Gateway) forwardsHost(host string) bool {
	if host == "" || len(g.forwardHosts) == 0 {
		return false
	}
	if g.forwardAny {
		return true
	}
	name, port := host, ""
	if strings.HasPrefix(name, "[") {
		i := strings.IndexByte(name, ']')
		if i < 0 || strings.IndexByte(name[:i], ':') < 0 {
			return false
		}
		name, port = name[1:i], name[i+1:]
		if port != "" && port[0] != ':' {
			return false
		}
		port = strings.TrimPrefix(port, ":")
	} else if i := strings.LastIndexByte(name, ':'); i >= 0 && strings.IndexByte(name[:i], ':') < 0 {
		name, port = name[:i], name[i+1:]
	}
	for i := range len(port) {
		if port[i] < '0' || port[i] > '9' {
			return false
		}
	}
	name = strings.TrimSuffix(name, ".")
	for _, h := range g.forwardHosts {
		if asciiEqualFold(name, h) {
			return true
		}
	}
	return false
}

// forwardedHost returns the X-Forwarded-Host value of host: the one last
// made, shared by the requests that name the same host (almost all do:
// a gateway serves a few names), never modified; a new one for another.
func (g *Gateway) forwardedHost(host string) []string {
	if v := g.lastHost.Load(); v != nil && v[0] == host {
		return v[:]
	}
	v := &[1]string{host}
	g.lastHost.Store(v)
	return v[:]
}

// Shared X-Forwarded-Proto values and the empty User-Agent of a request
// that came without one, never modified.
var (
	forwardedHTTP  = []string{"http"}
	forwardedHTTPS = []string{"https"}
	noUserAgent    = []string{""}
)
