package proxy

import (
	"net/http"
	"strconv"

	"github.com/exgate/exgate/apierror"
)

// Errors answered by exgate. Codes follow Django REST framework's where one
// exists, so existing clients recognise them.
var (
	errNotAuthenticated = apierror.Static(http.StatusUnauthorized, "not_authenticated",
		"Authentication credentials were not provided.",
		"WWW-Authenticate", `Bearer realm="exgate"`)
	errBadAuthHeader = apierror.Static(http.StatusUnauthorized, "authentication_failed",
		`Invalid Authorization header: expected "Bearer <token>".`,
		"WWW-Authenticate", `Bearer realm="exgate", error="invalid_token"`)
	errNotFound       = apierror.NotFound()
	errMethodOverride = apierror.Static(http.StatusBadRequest, "method_override",
		"Method overrides (the X-HTTP-Method-Override, X-HTTP-Method and X-Method-Override headers, a _method parameter in the query or the body) are not accepted: send the request with the method itself.")
	errPathOverride = apierror.Static(http.StatusBadRequest, "path_override",
		"Path-override headers (X-Original-URL, X-Rewrite-URL) are not accepted: send the request to the path itself.")
	// errInvalidAuthority answers an HTTP/2 request whose :authority is
	// not a Host net/http's HTTP/1 server would take (checkHead).
	errInvalidAuthority = apierror.Static(http.StatusBadRequest, "invalid_header",
		"The request's :authority is not a valid host.")
	errBadGateway     = apierror.Static(http.StatusBadGateway, "bad_gateway", "The upstream service is unavailable.")
	errGatewayTimeout = apierror.Static(http.StatusGatewayTimeout, "gateway_timeout", "The upstream service did not answer in time.")
	// errWriteBadGateway and errWriteTimeout answer a write (an order, a
	// cancel: any method but GET and HEAD) that reached the backend and
	// got no answer: it may have taken effect, and the client must not
	// read "unavailable" as "not done".
	errWriteBadGateway = apierror.Static(http.StatusBadGateway, "bad_gateway",
		"The upstream service failed after this request reached it, so its outcome is unknown: check whether it took effect (your orders) before sending it again.")
	errWriteTimeout = apierror.Static(http.StatusGatewayTimeout, "gateway_timeout",
		"The upstream service did not answer this request in time, so its outcome is unknown: check whether it took effect (your orders) before sending it again.")
	// errLimitsUnavailable answers when the rate-limit store failed on a
	// route whose on_store_error is "closed".
	errLimitsUnavailable = apierror.Static(http.StatusServiceUnavailable, "rate_limit_unavailable",
		"Rate limiting is temporarily unavailable. Try again shortly.",
		"Retry-After", "1")
)

// waitAnswers holds the 429 answers of one kind for waits up to 120
// seconds, encoded once; longer waits are encoded per request.
type waitAnswers struct {
	encoded []*apierror.Error
	build   func(secs int64) *apierror.Error
}

func newWaitAnswers(build func(secs int64) *apierror.Error) *waitAnswers {
	w := &waitAnswers{encoded: make([]*apierror.Error, 121), build: build}
	for i := 1; i < len(w.encoded); i++ {
		w.encoded[i] = build(int64(i))
	}
	return w
}

// get returns the answer for a wait of secs whole seconds, at least 1.
func (w *waitAnswers) get(secs int64) *apierror.Error {
	secs = max(secs, 1)
	if secs < int64(len(w.encoded)) {
		return w.encoded[secs]
	}
	return w.build(secs)
}

var (
	throttledAnswers     = newWaitAnswers(newThrottled)
	tooManyTokensAnswers = newWaitAnswers(newTooManyTokens)
)

// throttled returns the 429 answer for a wait of secs whole seconds
// (at least 1): the body Django REST framework clients already parse, and
// Retry-After.
func throttled(secs int64) *apierror.Error { return throttledAnswers.get(secs) }

// tooManyTokens returns the 429 answer to a token counted as anonymous
// because its address presented too many distinct tokens, when the
// allowance it shares with the address's other excess tokens is spent:
// not its own limit, and it says so.
func tooManyTokens(secs int64) *apierror.Error { return tooManyTokensAnswers.get(secs) }

// expected writes "Expected available in N second(s)." and returns N.
func expected(secs int64) (string, string) {
	n := strconv.FormatInt(secs, 10)
	unit := " seconds."
	if secs == 1 {
		unit = " second."
	}
	return "Expected available in " + n + unit, n
}

func newThrottled(secs int64) *apierror.Error {
	when, n := expected(secs)
	return apierror.Static(http.StatusTooManyRequests, "throttled", "Request was throttled. "+when, "Retry-After", n)
}

func newTooManyTokens(secs int64) *apierror.Error {
	when, n := expected(secs)
	return apierror.Static(http.StatusTooManyRequests, "too_many_tokens",
		"Too many different tokens were used from your network address recently, so this token shares the allowance of the address's further tokens, which is spent; this token's own limit is not. "+when,
		"Retry-After", n)
}

// pathErrors holds the pre-encoded 400 answer of each path refusal.
var pathErrors = func() map[pathError]*apierror.Error {
	m := map[pathError]*apierror.Error{}
	for _, pe := range []pathError{errPathNotAbsolute, errPathBadEscape, errPathEncodedSep, errPathBadChar, errPathAboveRoot, errPathTooManySlash} {
		m[pe] = apierror.Static(http.StatusBadRequest, "invalid_path", string(pe))
	}
	return m
}()

// headerTooLarge returns the 431 answer for headers over limit bytes.
// checkHead has an HTTP/1 connection closed after it; an HTTP/2 stream
// ends alone (a Connection: close there would become a GOAWAY).
func headerTooLarge(limit int64) *apierror.Error {
	return apierror.Static(http.StatusRequestHeaderFieldsTooLarge, "request_header_too_large",
		"Request headers are larger than "+strconv.FormatInt(limit, 10)+" bytes.")
}

// WriteError writes e as the response, with the request id. It is the one
// place that writes an answer exgate gives itself; every rejection goes
// through it.
func WriteError(w http.ResponseWriter, requestID string, e *apierror.Error) {
	body := e.Body()
	h := w.Header()
	for k, v := range e.Header {
		h[k] = v
	}
	h["Content-Type"] = jsonContentType
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	h["Cache-Control"] = noStore
	h["X-Content-Type-Options"] = nosniff
	if requestID != "" {
		h["X-Request-Id"] = []string{requestID}
	}
	w.WriteHeader(e.Status)
	_, _ = w.Write(body)
}

// Shared header values; never modified.
var (
	jsonContentType = []string{"application/json"}
	noStore         = []string{"no-store"}
	nosniff         = []string{"nosniff"}
)
