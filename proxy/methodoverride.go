package proxy

// isMethodOverride reports whether a header of the name (canonical) is a
// method override. Frameworks behind exgate (Django middleware, Express's
// method-override, Rails, Spring's HiddenHttpMethodFilter variants) may
// honour one and run a GET as a POST or a POST as a DELETE; exgate routes,
// authenticates and limits by the request's own method, so a request that
// asks for another is refused rather than forwarded (checkHead finds
// them in scanHeader's one pass over the names).
func isMethodOverride(name string) bool {
	switch name {
	case "X-Http-Method-Override", "X-Http-Method", "X-Method-Override":
		return true
	}
	return false
}
