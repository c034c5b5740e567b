package proxy

// isPathOverride reports whether a header of the name (canonical) names
// another path than the request's own. Backends behind IIS's URL Rewrite module,
// Zend Framework and Symfony before 3.4.14 route by X-Original-URL or
// X-Rewrite-URL; exgate routes, authenticates, limits and validates by the
// request's own path, so a request that asks for another is refused
// rather than forwarded, as a method override is.
func isPathOverride(name string) bool {
	return name == "X-Original-Url" || name == "X-Rewrite-Url"
}
