package proxy

import (
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// The header of the request to the backend is made once, at its final
// size, from the client's fields it keeps, sharing their values
// (backendHeader). ReverseProxy would copy the client's header whole
// (Header.Clone: a map sized for the client's fields and one slice for
// all their values), remove from the copy what it does not forward, and
// exgate would then remove, rename and add its own: from about four
// fields of a client's (User-Agent, Accept, Accept-Encoding,
// Authorization) the copy outgrew Go's small map of one group and was
// grown into a table as exgate added its five (X-Forwarded-For, -Host,
// -Proto, X-Real-IP, X-Request-ID). forward hides the client's header
// from ReverseProxy for that (hideHeader), and rewrite gives it back.

// smallMapFields is the most fields a map of Go's runtime holds in its
// small form, one group of slots: one more and it becomes a table, a
// larger allocation and a directory.
const smallMapFields = 8

// keptOnStack is how many of the client's fields backendHeader lists on
// its stack before it sizes the header; a request with more lists them
// on the heap.
const keptOnStack = 16

// headerField is one field of the request to the backend: its name and
// its values, the client's.
type headerField struct {
	name   string
	values []string
}

// hideHeader hides r's header from ReverseProxy while it copies r, for
// rewrite to make the backend's from it (backendHeader): it is kept in st
// and r's set to nil, and rewrite, which ReverseProxy calls next, gives
// it back (forward does, if ReverseProxy never calls rewrite). Until
// then ReverseProxy reads r's header only to copy it and for its TE
// (rewrite reads that itself). It is not hidden from a request that asks
// to switch protocols: ReverseProxy refuses one that names a protocol
// in other than printable ASCII (502), which it reads from its copy, and
// rewrite then drops the offer from what it copied (sentAs). net/http's
// server reads no request header once the handler runs (it read what it
// needs before: golang.org/issue/14940).
func hideHeader(st *requestState, r *http.Request) {
	if !st.noDrops && len(r.Header["Upgrade"]) > 0 {
		return
	}
	st.inHeader, r.Header = r.Header, nil
}

// unhideHeader gives r the header hideHeader hid, if it is still hidden.
func unhideHeader(st *requestState, r *http.Request) {
	if st.inHeader != nil {
		r.Header, st.inHeader = st.inHeader, nil
	}
}

// backendHeader makes the header of pr.Out, the request to the backend,
// from src, the client's fields: the client's header itself when forward
// hid it (hideHeader; ReverseProxy's copy, pr.Out's, is then empty), else
// ReverseProxy's copy of it (a request that asks to switch protocols, or
// one rewrite sees without forward). The fields that go (sentAs) keep
// their values, never modified: the client's request and the backend's
// share them, and none is a value the pooled state holds (net/http's
// HTTP/2 Transport may write the header after the request ended:
// stateContext.traceparent). With them go exgate's X-Request-ID and X-Real-IP
// (setBackendHeaders) and, when the client asked for trailers, TE:
// trailers (as ReverseProxy sends it); the header is sized for those and
// rewrite's X-Forwarded-For, -Host, -Proto and empty User-Agent, so that
// it never grows. One of at most smallMapFields fields is ReverseProxy's
// empty copy filled in (of a client that sent none, always: exgate's are
// at most six).
func (g *Gateway) backendHeader(pr *httputil.ProxyRequest, st *requestState, src http.Header, p *peer, dropTrace bool) http.Header {
	h := pr.Out.Header
	if len(src) > 0 {
		h = g.clientFields(pr, st, src, p, dropTrace)
	}
	st.setBackendHeaders(h)
	return h
}

// clientFields is backendHeader's header with the fields of src, not
// empty, that go (sentAs).
func (g *Gateway) clientFields(pr *httputil.ProxyRequest, st *requestState, src http.Header, p *peer, dropTrace bool) http.Header {
	var buf [keptOnStack]headerField
	kept := buf[:0]
	if len(src) > len(buf) {
		kept = make([]headerField, 0, len(src))
	}
	unsafe := !safeMethod(pr.Out.Method)
	te := false
	var conn []string
	for k, v := range src {
		switch k {
		case "Te":
			// ReverseProxy sends TE: trailers for a client's TE that
			// names trailers, the hop-by-hop field removed. (Its copy,
			// when src, has that one or none.)
			te = httpguts.HeaderValuesContainsToken(v, "trailers")
			continue
		case "Connection":
			conn = v // the fields it names are dropped below; it never goes
			continue
		}
		if name := g.sentAs(st, k, unsafe, dropTrace); name != "" {
			kept = append(kept, headerField{name, v})
		}
	}
	if len(conn) > 0 {
		kept = dropNamed(kept, conn)
	}
	agent := false
	for _, f := range kept {
		agent = agent || f.name == "User-Agent"
	}
	n := len(kept) + 2 + count(te) + count(!agent) + count(p.ok) + // TE, X-Forwarded-Host, -Proto, User-Agent, X-Forwarded-For
		count(st.idValue != nil) + count(st.realIP != nil)
	h := pr.Out.Header
	if len(h) > 0 || n > smallMapFields {
		h = make(http.Header, n)
	}
	for _, f := range kept {
		h[f.name] = f.values
	}
	if te {
		h["Te"] = teTrailers
	}
	return h
}

// teTrailers is the TE value ReverseProxy sends for a client's that names
// trailers (golang.org/issue/21096), shared, never modified.
var teTrailers = []string{"trailers"}

// count is 1 for true, 0 for false.
func count(b bool) int {
	if b {
		return 1
	}
	return 0
}

// safeMethod reports whether net/http's Transport sends a request of
// method again whatever its headers (keepFromReplay).
func safeMethod(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// sentAs returns the name under which the client's field k goes to the
// backend, or "" when it does not go. unsafe is that the request is not
// safe to send twice; dropTrace, that the client's trace context does not
// go (rewrite). What does not go, besides the fields the client's
// Connection header names (dropNamed):
//
//   - the hop-by-hop fields of httputil.ReverseProxy's list, which it
//     removes;
//   - Forwarded and X-Forwarded-For, -Host and -Proto, which ReverseProxy
//     removes for rewrite to set from the connection's peer;
//   - an offer to switch protocols (Upgrade with the Connection that
//     names it, hop-by-hop, and HTTP2-Settings): exgate has no route that
//     switches protocols, and after a backend's 101 Switching Protocols
//     ReverseProxy would join the client's connection to the backend's
//     byte for byte, every later request on it reaching the backend
//     unseen, with no token check, rate limit, order validation or
//     duplicate protection (checkNoSwitch); the request goes as the
//     ordinary HTTP/1.1 request it also is, as a server that does not
//     take the offer answers it (RFC 9110 §7.8);
//   - Expect: exgate's own server answers a client's 100-continue when the
//     body is first read, which is when it starts to go to the backend;
//     forwarded, it would make the Transport wait for the backend's 100
//     Continue before sending the body, up to its ExpectContinueTimeout
//     (a second) on every such request to a backend that never sends one
//     (HTTP/1.0 servers such as Python's wsgiref); NGINX, HAProxy and
//     Envoy answer it themselves too;
//   - X-Real-IP, and X-Request-ID when exgate chose the id sent: exgate's
//     own go in their place (setBackendHeaders);
//   - Accept-Encoding on an order whose claim is held
//     (claimState.identityEncoded);
//   - the client's trace context when dropTrace (traceheader.Formats.Carries).
//
// Idempotency-Key and X-Idempotency-Key on a request not safe to send
// twice go under their lower-case names (keepFromReplay).
func (g *Gateway) sentAs(st *requestState, k string, unsafe, dropTrace bool) string {
	if isHopByHop(k) {
		return ""
	}
	switch k {
	case "Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto",
		"Http2-Settings", "Expect", "X-Real-Ip":
		return ""
	case "X-Request-Id":
		if st.idValue != nil {
			return ""
		}
	case "Accept-Encoding":
		if st.claim.identityEncoded() {
			return ""
		}
	case "Idempotency-Key", "X-Idempotency-Key":
		if unsafe {
			return keepFromReplay(k)
		}
	}
	if dropTrace && g.formats.Carries(k) {
		return ""
	}
	return k
}

// dropNamed removes from kept the fields the client's Connection values
// conn name, as ReverseProxy reads them: comma-separated options across
// any number of lines, trimmed of white space, each the name of a field
// to remove (of its canonical form: net/http's names are canonical, and
// the canonical form of a name differs from it only in ASCII case, as
// keepFromReplay's lower-case names differ from the client's).
// checkConnection has refused a Connection that names a field exgate
// reads or sets.
func dropNamed(kept []headerField, conn []string) []headerField {
	for _, v := range conn {
		for v != "" {
			var opt string
			opt, v, _ = strings.Cut(v, ",")
			opt = textproto.TrimString(opt)
			for i := 0; i < len(kept); i++ {
				if asciiEqualFold(kept[i].name, opt) {
					kept[i] = kept[len(kept)-1]
					kept = kept[:len(kept)-1]
					i--
				}
			}
		}
	}
	return kept
}
