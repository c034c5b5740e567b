package proxy

import (
	"net/http"
	"strings"

	"github.com/exgate/exgate/apierror"
)

// headerScan is what one pass over a request's header block finds.
type headerScan struct {
	size           int64 // the request line and headers as they were read, approximately
	underscore     bool  // a header name contains an underscore
	forwarded      bool  // a header name starts with X-Forwarded-, or is an address header (isAddressHeader)
	envoy          bool  // a header name starts with X-Envoy- (dropEnvoyHeaders)
	connection     bool  // a Connection header
	methodOverride bool  // a method-override header (isMethodOverride)
	pathOverride   bool  // a path-override header (isPathOverride)
	bodyDescribing bool  // a header describing the body's bytes (isBodyDescribing)
	rewritten      bool  // a header forwarding removes or renames (isRewritten)
}

// scanHeader reads the request line and every header name once: the
// size for server.max_header_bytes, names with an underscore (refused:
// errUnderscoreHeader), the X-Forwarded-* family and the other headers
// of a client's address (dropped from clients that are not trusted
// proxies: dropForwardedFamily), the X-Envoy-* family (dropped from every
// request: dropEnvoyHeaders), and the headers
// checkHead reads or refuses and those forwarding removes or renames, so
// that a request without them is not looked up for each of them again.
func scanHeader(r *http.Request) headerScan {
	sc := headerScan{size: int64(len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4 + len("Host: \r\n") + len(r.Host))}
	for k, vs := range r.Header {
		for _, v := range vs {
			sc.size += int64(len(k) + len(v) + 4)
		}
		if strings.IndexByte(k, '_') >= 0 {
			sc.underscore = true
		}
		if strings.HasPrefix(k, forwardedPrefix) || isAddressHeader(k) {
			sc.forwarded = true
		} else if strings.HasPrefix(k, envoyPrefix) {
			sc.envoy = true
		}
		switch {
		case vs == nil: // a name without a header (net/http never makes one)
		case k == "Connection":
			sc.connection = true
		case isMethodOverride(k):
			sc.methodOverride = true
		case isPathOverride(k):
			sc.pathOverride = true
		case isBodyDescribing(k):
			sc.bodyDescribing = true
		case isRewritten(k):
			sc.rewritten = true
		}
	}
	return sc
}

// errUnderscoreHeader refuses a request with a header name that contains
// an underscore. CGI, WSGI (Django), Rack and PHP name a header by its
// name in upper case with "-" turned into "_", so X_Request_ID and
// X-Request-ID become one variable: depending on the server the two are
// joined with a comma or one replaces the other. A client could add a
// request id, a forwarded address or a proto of its own to those exgate
// sets, or send a header exgate never reads under the name of one the
// backend does. NGINX drops such headers by default
// (underscores_in_headers off); exgate refuses the request, before any
// limit is charged.
var errUnderscoreHeader = apierror.Static(http.StatusBadRequest, "invalid_header",
	"Header names may not contain an underscore: a backend behind CGI or WSGI reads X_Forwarded_For as X-Forwarded-For.")

// isRewritten reports whether forwarding removes or renames the header
// name when the client sent it: rewrite on the outbound request (sentAs:
// an offer to switch protocols, Expect, keepFromReplay's replayHeaders,
// and with tracing off an untrusted client's W3C trace context:
// traceheader.Formats.Carries; the other formats' fields are looked up on every
// request), and forwardReader on a body read whole (Transfer-Encoding,
// Expect). A request without any of them is not looked up for an
// Upgrade either (hideHeader).
func isRewritten(name string) bool {
	switch name {
	case "Upgrade", "Http2-Settings", "Expect", "Transfer-Encoding", replayHeaders[0][0], replayHeaders[1][0],
		"Traceparent", "Tracestate", "Baggage":
		return true
	}
	return false
}
