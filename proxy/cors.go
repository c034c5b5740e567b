package proxy

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/exgate/exgate/apierror"
	"github.com/exgate/exgate/config"
)

// corsPolicy is the cors section compiled for the hot path; nil when the
// policy is off. Header values are built once and shared, never modified.
type corsPolicy struct {
	anyOrigin   bool
	origins     map[string]bool
	methods     map[string]bool
	headers     map[string]bool // lower case
	allowMethod []string
	allowHeader []string
	expose      []string
	credentials bool
	maxAge      []string // nil: not sent
}

// compileCORS compiles c, or returns nil when it allows no origin.
func compileCORS(c config.CORS) *corsPolicy {
	if !c.Enabled() {
		return nil
	}
	p := &corsPolicy{origins: map[string]bool{}, methods: map[string]bool{}, headers: map[string]bool{}, credentials: c.AllowCredentials}
	for _, o := range c.AllowedOrigins {
		if o == "*" {
			p.anyOrigin = true
		}
		p.origins[o] = true
	}
	for _, m := range c.AllowedMethods {
		p.methods[m] = true
	}
	for _, h := range c.AllowedHeaders {
		p.headers[strings.ToLower(h)] = true
	}
	p.allowMethod = []string{strings.Join(c.AllowedMethods, ", ")}
	p.allowHeader = []string{strings.Join(c.AllowedHeaders, ", ")}
	if len(c.ExposedHeaders) > 0 {
		p.expose = []string{strings.Join(c.ExposedHeaders, ", ")}
	}
	if c.MaxAge > 0 {
		p.maxAge = []string{strconv.FormatInt(int64(c.MaxAge.Seconds()), 10)}
	}
	return p
}

// Shared CORS header values.
var (
	varyOrigin    = []string{"Origin"}
	varyPreflight = []string{"Origin, Access-Control-Request-Method, Access-Control-Request-Headers"}
	starOrigin    = []string{"*"}
	trueValue     = []string{"true"}
)

// corsResponseHeaders are the headers the policy owns: a backend's own
// are dropped from its answers while the policy is on.
var corsResponseHeaders = []string{
	"Access-Control-Allow-Origin", "Access-Control-Allow-Credentials", "Access-Control-Expose-Headers",
	"Access-Control-Allow-Methods", "Access-Control-Allow-Headers", "Access-Control-Max-Age",
}

// allows reports whether origin (the one Origin header value) is allowed.
func (p *corsPolicy) allows(origin string) bool {
	return p.anyOrigin || p.origins[origin]
}

// decorate adds to h the headers of an answer to a request from an
// allowed origin: every answer, exgate's refusals included, so that the
// page can read it.
func (p *corsPolicy) decorate(h http.Header, origin []string) {
	h["Vary"] = varyOrigin
	if !p.allows(origin[0]) {
		return
	}
	if p.anyOrigin && !p.credentials {
		h["Access-Control-Allow-Origin"] = starOrigin
	} else {
		h["Access-Control-Allow-Origin"] = origin // the request's own slice, echoed
	}
	if p.credentials {
		h["Access-Control-Allow-Credentials"] = trueValue
	}
	if p.expose != nil {
		h["Access-Control-Expose-Headers"] = p.expose
	}
}

// isPreflight reports whether r is a CORS preflight: OPTIONS with an
// Origin and an Access-Control-Request-Method.
func isPreflight(r *http.Request) bool {
	return r.Method == http.MethodOptions && len(r.Header["Origin"]) == 1 && len(r.Header["Access-Control-Request-Method"]) == 1
}

// errPreflightBody refuses a preflight that carries a body: browsers never
// send one, and a preflight passes to the backend without a token.
var errPreflightBody = apierror.Static(http.StatusBadRequest, "invalid_preflight", "A CORS preflight (OPTIONS with Access-Control-Request-Method) must not have a body.")

// hasBody reports whether r declares a body.
func hasBody(r *http.Request) bool {
	return r.ContentLength != 0 || len(r.TransferEncoding) > 0
}

// Preflight refusals. The detail never repeats the client's values.
var (
	errCORSOrigin = apierror.Static(http.StatusForbidden, "cors_refused", "CORS preflight refused: the origin is not in cors.allowed_origins.")
	errCORSMethod = apierror.Static(http.StatusForbidden, "cors_refused", "CORS preflight refused: the requested method is not in cors.allowed_methods.")
	errCORSHeader = apierror.Static(http.StatusForbidden, "cors_refused", "CORS preflight refused: a requested header is not in cors.allowed_headers.")
)

// answerPreflight answers a preflight at the edge: no backend call and no
// limit charged. An allowed one gets 204 with the policy's headers (and
// answerPreflight returns answered); one the policy does not allow is
// refused 403 without them, so the browser blocks the request and its
// console says why.
func (g *Gateway) answerPreflight(st *requestState, r *http.Request, p *corsPolicy) *apierror.Error {
	h := st.rw.Header()
	h["Vary"] = varyPreflight
	switch {
	case !p.allows(r.Header["Origin"][0]):
		return errCORSOrigin
	case !p.methods[r.Header["Access-Control-Request-Method"][0]]:
		delete(h, "Access-Control-Allow-Origin")
		return errCORSMethod
	}
	for _, v := range r.Header["Access-Control-Request-Headers"] {
		for _, name := range strings.Split(v, ",") {
			if name = strings.ToLower(strings.TrimSpace(name)); name != "" && !p.headers[name] {
				delete(h, "Access-Control-Allow-Origin")
				return errCORSHeader
			}
		}
	}
	h["Access-Control-Allow-Methods"] = p.allowMethod
	h["Access-Control-Allow-Headers"] = p.allowHeader
	if p.maxAge != nil {
		h["Access-Control-Max-Age"] = p.maxAge
	}
	h["X-Request-Id"] = []string{st.id}
	st.rw.WriteHeader(http.StatusNoContent)
	return answered
}

// dropBackendCORS removes a backend's own CORS headers from its answer
// while the policy is on, so that exgate's stand alone.
func dropBackendCORS(h http.Header) {
	for _, k := range corsResponseHeaders {
		delete(h, k)
	}
}
