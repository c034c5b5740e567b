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

// dropForwardedFamily removes every X-Forwarded-* header from a request a
// client sent directly: the backend trusts exgate as its proxy and would
// take a client's X-Forwarded-Port or -Prefix for exgate's word. From a
// trusted proxy they are kept, as its X-Forwarded-For chain is; exgate
// sets -For, -Host and -Proto itself either way (Gateway.rewrite). Header
// names are canonical here (net/http's servers canonicalise them).
func dropForwardedFamily(h http.Header) {
	for k := range h {
		if strings.HasPrefix(k, forwardedPrefix) {
			delete(h, k)
		}
	}
}
