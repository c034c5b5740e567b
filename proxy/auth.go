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
	} else if !st.lastToken(t) && identity.IsJWS(t) && !identity.CanonicalJWS(t) {
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
	case st.caller.token != "" && g.limits != nil:
		if id := st.tokenID(); id != "" {
			return id
		}
		id := g.limits.TokenID(st.caller.token)
		st.rememberTokenID(id)
		return id
	}
	return ""
}

// tokenMemo is a bearer token a request on a connection was accepted
// with, and its id under the limiter's key secret (limiter.Keyer): a
// client sends its token on every request of a connection, and its id, an
// HMAC, is worked out once per connection rather than once per request.
// A connection keeps one, of its last token (at most maxTokenLen bytes),
// its own: no other connection reads it, so no client can evict another's
// or be given another's id. The id is a function of the whole token; a
// request whose token differs in any byte works its own out. It holds
// no verdict on the token: a verifier (identity.verify) decides every
// request as before, from its own caches.
type tokenMemo struct {
	token, id string
}

// lastToken reports whether token is the one the last request of st's
// connection was accepted with (tokenMemo): its spelling was checked then.
func (st *requestState) lastToken(token string) bool {
	if st.peer == nil {
		return false
	}
	m := st.peer.token.Load()
	return m != nil && m.token == token
}

// tokenID returns the id of the request's opaque token when it is known
// without working it out: from an earlier decision of the request, or
// from the connection's last request with the same token (tokenMemo);
// else "".
func (st *requestState) tokenID() string {
	if st.decision.TokenID != "" || st.peer == nil || st.caller.token == "" {
		return st.decision.TokenID
	}
	if m := st.peer.token.Load(); m != nil && m.token == st.caller.token {
		return m.id
	}
	return ""
}

// rememberTokenID keeps id, the id of the request's opaque token, for the
// next requests of its connection (tokenMemo).
func (st *requestState) rememberTokenID(id string) {
	if st.peer == nil || id == "" || st.caller.token == "" {
		return
	}
	if m := st.peer.token.Load(); m != nil && m.token == st.caller.token && m.id == id {
		return
	}
	st.peer.token.Store(&tokenMemo{token: st.caller.token, id: id})
}

// limitRequest is what the route's limits look at for st: the token's id
// is taken from an earlier decision of the request (an order whose claim
// rides with its limits is first looked up in the deny cache) or from its
// connection's last request with the same token (tokenID), not worked out
// again.
func (st *requestState) limitRequest() limiter.Request {
	if id := &st.caller.id; id.Account != "" {
		return limiter.Request{Account: id.Account, User: id.User, Tier: id.Tier, Addr: st.addr}
	}
	return limiter.Request{Token: st.caller.token, TokenID: st.tokenID(), Addr: st.addr}
}
