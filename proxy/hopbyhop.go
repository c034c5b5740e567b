package proxy

import (
	"iter"
	"net/http"
	"net/textproto"
	"strings"

	"github.com/exgate/exgate/apierror"
)

// endToEndHeaders are the headers exgate reads or sets, and the backend
// relies on, that a Connection header must not name. httputil.ReverseProxy
// removes every header the Connection header lists (RFC 9110 §7.6.1): a
// client sending "Connection: Authorization" would be counted under its
// token by exgate and arrive anonymous at the backend; "Connection:
// X-Real-Ip" would remove the address exgate sets. Such a request is
// refused before any limit is charged.
var endToEndHeaders = [...]string{
	"authorization",
	"content-encoding",
	"content-length",
	"content-type",
	"cookie",
	"forwarded",
	"host",
	"idempotency-key",
	"idempotent-replayed",
	"transfer-encoding",
	"x-real-ip",
	"x-request-id",
}

// endToEndPrefix names a family of end-to-end headers exgate sets
// (X-Forwarded-For, -Host, -Proto) or that backends read
// (X-Forwarded-Port, -Prefix, …).
const endToEndPrefix = "x-forwarded-"

var errHopByHopAbuse = apierror.Static(http.StatusBadRequest, "invalid_header",
	"The Connection header may not name an end-to-end header (such as Authorization, Content-Type, "+
		"Content-Length, Host, Forwarded, X-Forwarded-For, X-Real-IP or X-Request-ID).")

// checkConnection refuses a request whose Connection header names one of
// the end-to-end headers exgate reads or sets. Connection options are a
// comma-separated list across any number of header lines, compared
// case-insensitively after trimming white space, as ReverseProxy reads
// them.
func checkConnection(h http.Header) *apierror.Error {
	for opt := range connectionOptions(h["Connection"]) {
		if namesEndToEnd(opt) {
			return errHopByHopAbuse
		}
	}
	return nil
}

// connectionOptions yields the options of the Connection field lines vs:
// each comma-separated element of each line, trimmed of white space,
// empty ones skipped (RFC 9110 §7.6.1, §5.6.1), as ReverseProxy reads them.
func connectionOptions(vs []string) iter.Seq[string] {
	return func(yield func(string) bool) {
		for _, v := range vs {
			for opt := range strings.SplitSeq(v, ",") {
				if opt = textproto.TrimString(opt); opt != "" && !yield(opt) {
					return
				}
			}
		}
	}
}

// namesEndToEnd reports whether the connection option opt names an
// end-to-end header, ignoring ASCII case.
func namesEndToEnd(opt string) bool {
	if len(opt) > len(endToEndPrefix) && asciiEqualFold(opt[:len(endToEndPrefix)], endToEndPrefix) {
		return true
	}
	for _, name := range endToEndHeaders {
		if asciiEqualFold(opt, name) {
			return true
		}
	}
	return false
}

// asciiEqualFold reports whether a equals b, ignoring ASCII case only:
// net/http canonicalises header names by ASCII case, so Unicode
// look-alikes never name the same header. Either may be in any case (a
// media type or parameter name of the backend's, as of the client's).
func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if asciiLower(a[i]) != asciiLower(b[i]) {
			return false
		}
	}
	return true
}

// asciiLower returns c in lower case when it is an ASCII letter.
func asciiLower(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// isHopByHop reports whether the field k (canonical) is one of the fields
// ReverseProxy removes from a request and a final answer (RFC 9110
// §7.6.1; RFC 9113 §8.2.2 has an HTTP/2 client reset a stream whose
// answer carries one), besides those a Connection field names.
func isHopByHop(k string) bool {
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}
