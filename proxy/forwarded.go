package proxy

import (
	"net/http"
	"strings"
)

// forwardedPrefix is the family of headers a proxy tells its backend about
// the original request with: -For, -Host and -Proto, which exgate sets,
// and -Port, -Prefix, -Ssl, -Scheme, -Server, -Uri…, which backends read
// from the proxy they trust (Werkzeug's ProxyFix, Django's
// USE_X_FORWARDED_PORT, Spring's ForwardedHeaderFilter).
const forwardedPrefix = "X-Forwarded-"

// dropForwardedFamily removes every X-Forwarded-* header, and every other
// header a backend may read the client's address from (isAddressHeader),
// from a request a client sent directly: the backend trusts exgate as its
// proxy and would take a client's X-Forwarded-Port or -Prefix, or its
// True-Client-IP, for exgate's word. From a trusted proxy they are kept,
// as its X-Forwarded-For chain is; exgate sets -For, -Host and -Proto and
// X-Real-IP itself either way (Gateway.rewrite). Header names are
// canonical here (net/http's servers canonicalise them).
func dropForwardedFamily(h http.Header) {
	for k := range h {
		if strings.HasPrefix(k, forwardedPrefix) || isAddressHeader(k) {
			delete(h, k)
		}
	}
}

// isAddressHeader reports whether k, a canonical header name, is one that
// CDNs, load balancers and proxies put the client's address in and that
// backends read it from instead of X-Real-IP or X-Forwarded-For: chi's
// RealIP and httprate's KeyByRealIP read True-Client-IP (Akamai,
// Cloudflare) before X-Real-IP; npm's request-ip X-Client-IP before
// X-Forwarded-For, then CF-Connecting-IP, DO-Connecting-IP,
// Fastly-Client-IP, X-Cluster-Client-IP, X-Forwarded, Forwarded-For,
// X-Appengine-User-IP and CF-Pseudo-IPv4; Rails' remote_ip and
// django-ipware Client-IP; gin a trusted platform's header such as
// CF-Connecting-IP. A client that wrote one would be another address to
// the backend's own limits and allow-lists than the one exgate counted it
// as. X-Real-IP is not one: exgate replaces it.
func isAddressHeader(k string) bool {
	switch k {
	case "True-Client-Ip", "X-Client-Ip", "Client-Ip", "Cf-Connecting-Ip", "Cf-Connecting-Ipv6",
		"Cf-Pseudo-Ipv4", "Do-Connecting-Ip", "Fastly-Client-Ip", "X-Cluster-Client-Ip", "X-Forwarded",
		"Forwarded-For", "X-Original-Forwarded-For", "X-Appengine-User-Ip", "X-Originating-Ip", "X-Remote-Ip", "X-Remote-Addr":
		return true
	}
	return false
}

// envoyPrefix is the family of headers Envoy reads as instructions from
// the request it forwards: x-envoy-retry-on and x-envoy-max-retries (retry
// it), x-envoy-hedge-on-per-try-timeout (send it again beside the first),
// x-envoy-upstream-rq-timeout-ms (wait longer)…, taken from a request it
// judges internal by its X-Forwarded-For.
const envoyPrefix = "X-Envoy-"

// dropEnvoyHeaders removes every X-Envoy-* header from a request, whoever
// sent it: an Envoy between exgate and the backend (a service mesh's
// sidecar) would act on a client's x-envoy-retry-on for a request exgate's
// X-Forwarded-For shows coming from a private address, and retry an order
// after a 5xx or a reset, placing it twice behind duplicate protection's
// back. A trusted proxy that writes X-Forwarded-For passes a client's
// through, so its are dropped too. Header names are canonical here.
func dropEnvoyHeaders(h http.Header) {
	for k := range h {
		if strings.HasPrefix(k, envoyPrefix) {
			delete(h, k)
		}
	}
}
