package proxy

import "net/http"

// methodOverridden reports whether the request carries a method-override
// header. Frameworks behind exgate (Django middleware, Express's
// method-override, Rails, Spring's HiddenHttpMethodFilter variants) may
// honour one and run a GET as a POST or a POST as a DELETE; exgate routes,
// authenticates and limits by the request's own method, so a request that
// asks for another is refused rather than forwarded.
func methodOverridden(h http.Header) bool {
	return h["X-Http-Method-Override"] != nil || h["X-Http-Method"] != nil || h["X-Method-Override"] != nil
}
