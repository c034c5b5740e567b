package proxy

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Error is an answer exgate gives itself, in the one error shape clients
// of the API already parse (Django REST framework's):
//
//	{"detail": "Request was throttled. Expected available in 12 seconds.", "code": "throttled"}
//	{"detail": "Invalid order: price must be a multiple of 0.01.", "code": "invalid_order", "fields": {"price": ["must be a multiple of 0.01"]}}
type Error struct {
	// Status is the HTTP status code.
	Status int `json:"-"`
	// Detail is a human-readable sentence. It never echoes raw client input.
	Detail string `json:"detail"`
	// Code is a stable machine-readable code.
	Code string `json:"code"`
	// Fields holds per-field messages, or nil.
	Fields map[string][]string `json:"fields,omitempty"`
	// Header holds extra response headers (Allow, Retry-After,
	// WWW-Authenticate, …), or nil.
	Header http.Header `json:"-"`

	body []byte // pre-encoded body of a static error
}

// Error returns the detail, so an *Error can travel as an error.
func (e *Error) Error() string { return e.Detail }

// static returns an Error whose body is encoded once, for answers that do
// not vary per request.
func static(status int, code, detail string, header ...string) *Error {
	e := &Error{Status: status, Code: code, Detail: detail}
	if len(header) > 0 {
		e.Header = http.Header{}
		for i := 0; i+1 < len(header); i += 2 {
			e.Header.Set(header[i], header[i+1])
		}
	}
	e.body = e.encode()
	return e
}

func (e *Error) encode() []byte {
	b, err := json.Marshal(e)
	if err != nil { // only strings and string slices: cannot happen
		return []byte(`{"detail":"Internal error.","code":"internal_error"}`)
	}
	return append(b, '\n')
}

// Errors answered by exgate. Codes follow Django REST framework's where one
// exists, so existing clients recognise them.
var (
	errNotAuthenticated = static(http.StatusUnauthorized, "not_authenticated",
		"Authentication credentials were not provided.",
		"WWW-Authenticate", `Bearer realm="exgate"`)
	errBadAuthHeader = static(http.StatusUnauthorized, "authentication_failed",
		`Invalid Authorization header: expected "Bearer <token>".`,
		"WWW-Authenticate", `Bearer realm="exgate", error="invalid_token"`)
	errNotFound       = static(http.StatusNotFound, "not_found", "Not found.")
	errMethodOverride = static(http.StatusBadRequest, "method_override",
		"Method-override headers (X-HTTP-Method-Override, X-HTTP-Method, X-Method-Override) are not accepted: send the request with the method itself.")
	errBadGateway     = static(http.StatusBadGateway, "bad_gateway", "The upstream service is unavailable.")
	errGatewayTimeout = static(http.StatusGatewayTimeout, "gateway_timeout", "The upstream service did not answer in time.")
	errInternal       = static(http.StatusInternalServerError, "internal_error", "Internal error.")
	// errLimitsUnavailable answers when the rate-limit store failed on a
	// route whose on_store_error is "closed".
	errLimitsUnavailable = static(http.StatusServiceUnavailable, "rate_limit_unavailable",
		"Rate limiting is temporarily unavailable. Try again shortly.",
		"Retry-After", "1")
)

// waitAnswers holds the 429 answers of one kind for waits up to 120
// seconds, encoded once; longer waits are encoded per request.
type waitAnswers struct {
	encoded []*Error
	build   func(secs int64) *Error
}

func newWaitAnswers(build func(secs int64) *Error) *waitAnswers {
	w := &waitAnswers{encoded: make([]*Error, 121), build: build}
	for i := 1; i < len(w.encoded); i++ {
		w.encoded[i] = build(int64(i))
	}
	return w
}

// get returns the answer for a wait of secs whole seconds, at least 1.
func (w *waitAnswers) get(secs int64) *Error {
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
func throttled(secs int64) *Error { return throttledAnswers.get(secs) }

// tooManyTokens returns the 429 answer to a token counted as anonymous
// because its address presented too many distinct tokens, when the
// allowance it shares with the address's other excess tokens is spent:
// not its own limit, and it says so.
func tooManyTokens(secs int64) *Error { return tooManyTokensAnswers.get(secs) }

// expected writes "Expected available in N second(s)." and returns N.
func expected(secs int64) (string, string) {
	n := strconv.FormatInt(secs, 10)
	unit := " seconds."
	if secs == 1 {
		unit = " second."
	}
	return "Expected available in " + n + unit, n
}

func newThrottled(secs int64) *Error {
	when, n := expected(secs)
	return static(http.StatusTooManyRequests, "throttled", "Request was throttled. "+when, "Retry-After", n)
}

func newTooManyTokens(secs int64) *Error {
	when, n := expected(secs)
	return static(http.StatusTooManyRequests, "too_many_tokens",
		"Too many different tokens were used from your network address recently, so this token shares the allowance of the address's further tokens, which is spent; this token's own limit is not. "+when,
		"Retry-After", n)
}

// pathErrors holds the pre-encoded 400 answer of each path refusal.
var pathErrors = func() map[pathError]*Error {
	m := map[pathError]*Error{}
	for _, pe := range []pathError{errPathNotAbsolute, errPathBadEscape, errPathEncodedSep, errPathBadChar, errPathAboveRoot, errPathTooManySlash} {
		m[pe] = static(http.StatusBadRequest, "invalid_path", string(pe))
	}
	return m
}()

// methodNotAllowed returns the 405 answer for method with the given Allow
// header.
func methodNotAllowed(method, allow string) *Error {
	e := &Error{
		Status: http.StatusMethodNotAllowed,
		Code:   "method_not_allowed",
		Detail: "Method " + strconv.Quote(method) + " not allowed.",
		Header: http.Header{"Allow": {allow}},
	}
	return e
}

// tooLarge returns the 413 answer for a body over limit bytes.
func tooLarge(limit int64) *Error {
	return static(http.StatusRequestEntityTooLarge, "request_too_large",
		"Request body is larger than "+strconv.FormatInt(limit, 10)+" bytes.")
}

// headerTooLarge returns the 431 answer for headers over limit bytes.
func headerTooLarge(limit int64) *Error {
	return static(http.StatusRequestHeaderFieldsTooLarge, "request_header_too_large",
		"Request headers are larger than "+strconv.FormatInt(limit, 10)+" bytes.",
		"Connection", "close")
}

// WriteError writes e as the response, with the request id. It is the one
// place that writes an answer exgate gives itself; every rejection goes
// through it.
func WriteError(w http.ResponseWriter, requestID string, e *Error) {
	body := e.body
	if body == nil {
		body = e.encode()
	}
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
