package proxy

import "net/http"

// pathOverridden reports whether the request carries a header that names
// another path than its own. Backends behind IIS's URL Rewrite module,
// Zend Framework and Symfony before 3.4.14 route by X-Original-URL or
// X-Rewrite-URL; exgate routes, authenticates, limits and validates by the
// request's own path, so a request that asks for another is refused
// rather than forwarded, as a method override is.
func pathOverridden(h http.Header) bool {
	return h["X-Original-Url"] != nil || h["X-Rewrite-Url"] != nil
}
