package proxy

import (
	"net/http"
	"strings"

	"github.com/exgate/exgate/apierror"
	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/identity"
	"github.com/exgate/exgate/limiter"
)

// caller is who sent a request, as the auth step established it.
type caller struct {
	// token is the bearer token in its canonical spelling, or "".
	token string
	// id is the verified account behind token when identity.verify is
	// on; zero otherwise.
	id identity.Identity
}

// errTokenNotValid answers a bearer token exgate refuses, in the words
// and code djangorestframework-simplejwt uses for the same refusal.
var errTokenNotValid = apierror.Static(http.StatusUnauthorized, "token_not_valid",
	"Given token not valid for any token type",
	"WWW-Authenticate", `Bearer realm="exgate", error="invalid_token"`)

// authenticate is the auth step of a route that reads tokens: it reads the
// bearer token (required or optional, as the route says), refuses a token
// that is not in its canonical spelling or, with identity.verify, does not
// verify as an access token (before any limit is charged), and rewrites
// the Authorization header the backend receives to exactly
// "Bearer <token>", so that exgate and the backend read the same token.
// It returns the answer to refuse the request with, or nil; st.caller
// holds the token and its account.
func (g *Gateway) authenticate(st *requestState, r *http.Request) *apierror.Error {
	e := g.checkCredentials(st, r)
	if st.rec {
		g.traceAuth(st, e)
	}
	return e
}

// checkCredentials is authenticate's check, untraced.
func (g *Gateway) checkCredentials(st *requestState, r *http.Request) *apierror.Error {
	route := st.route
	if route.Auth == config.AuthNone {
		return nil
	}
	t, present, ok := bearerToken(r.Header)
	switch {
	case !present:
		if route.Auth == config.AuthRequired {
			st.authFailed = "no_credentials"
			return errNotAuthenticated
		}
		return nil
	case !ok:
		st.authFailed = badAuthHeader(r.Header["Authorization"])
		return errBadAuthHeader
	}
	if g.verifier != nil {
		id, reason := g.verifier.Verify(t)
		if reason != "" {
			g.metrics.AuthFailure(string(reason))
			st.authFailed = string(reason)
			return errTokenNotValid
		}
		st.caller.id = id
	} else if identity.IsJWS(t) && !identity.CanonicalJWS(t) {
		g.metrics.AuthFailure(string(identity.ReasonNoncanonical))
		st.authFailed = string(identity.ReasonNoncanonical)
		return errTokenNotValid
	}
	if v := r.Header["Authorization"][0]; !strings.HasPrefix(v, bearerPrefix) {
		r.Header["Authorization"] = []string{bearerPrefix + t}
	}
	st.caller.token = t
	return nil
}

// bearerPrefix is the scheme as the backend receives it.
const bearerPrefix = "Bearer "

// maxTokenLen bounds the bearer token accepted.
const maxTokenLen = 4096

// bearerToken reads "Authorization: Bearer <token>". present reports
// whether any Authorization header was sent; ok whether it is exactly one
// header of the Bearer scheme (case-insensitive) with an RFC 6750 token68.
func bearerToken(h http.Header) (token string, present, ok bool) {
	vs := h["Authorization"]
	switch len(vs) {
	case 0:
		return "", false, false
	case 1:
	default:
		return "", true, false // two headers: which one would the backend read?
	}
	v := vs[0]
	if len(v) <= len(bearerPrefix) || !strings.EqualFold(v[:len(bearerPrefix)], bearerPrefix) {
		return "", true, false
	}
	t := v[len(bearerPrefix):]
	if len(t) > maxTokenLen || !isToken68(t) {
		return "", true, false
	}
	return t, true, true
}

// badAuthHeader says why bearerToken refused Authorization headers vs,
// for the access log: repeated, another scheme than Bearer, or a
// malformed token (not a token68, or too long).
func badAuthHeader(vs []string) string {
	switch {
	case len(vs) > 1:
		return "repeated_header"
	case len(vs[0]) <= len(bearerPrefix) || !strings.EqualFold(vs[0][:len(bearerPrefix)], bearerPrefix):
		return "not_bearer"
	}
	return "malformed_token"
}

// isToken68 reports whether s is an RFC 7235 token68:
// 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"=".
func isToken68(s string) bool {
	i := 0
	for ; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '.' || c == '_' || c == '~' || c == '+' || c == '/' {
			continue
		}
		break
	}
	if i == 0 {
		return false
	}
	for ; i < len(s); i++ {
		if s[i] != '=' {
			return false
		}
	}
	return true
}

// identityKey returns the key the request's caller counts by: the
// verified account's key, else the opaque token's id (computed here when
// no limit did), else "" for an anonymous request. Duplicate protection
// keys identifiers by it, so that with verification no token of an
// account, however spelled, places an identifier twice.
func (g *Gateway) identityKey(st *requestState) string {
	switch {
	case st.caller.id.Account != "":
		return st.caller.id.Account
	case st.decision.TokenID != "":
		return st.decision.TokenID
	case st.caller.token != "" && g.limits != nil:
		return g.limits.TokenID(st.caller.token)
	}
	return ""
}

// limitRequest is what the route's limits look at for st: the token's id
// is taken from an earlier decision of the request (an order whose claim
// rides with its limits is first looked up in the deny cache), not worked
// out again.
func (st *requestState) limitRequest() limiter.Request {
	if id := &st.caller.id; id.Account != "" {
		return limiter.Request{Account: id.Account, User: id.User, Tier: id.Tier, Addr: st.addr}
	}
	return limiter.Request{Token: st.caller.token, TokenID: st.decision.TokenID, Addr: st.addr}
}
