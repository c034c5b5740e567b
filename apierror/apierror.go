// Package apierror defines Error, the one answer exgate gives a client
// itself — a refusal, or a failure to reach the backend — in the shape
// clients of the API already parse, Django REST framework's:
//
//	{"detail": "Request was throttled. Expected available in 12 seconds.", "code": "throttled"}
//	{"detail": "Invalid order: price must be a multiple of 0.01.", "code": "invalid_order", "fields": {"price": ["must be a multiple of 0.01"]}}
//
// The packages that decide answers (proxy, validate, idempotency) return
// an *Error; proxy.WriteError is the one place that writes it.
package apierror

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Error is an answer exgate gives a client itself. An Error built by
// Static, or returned by a package as a shared answer, must be treated as
// read-only: it is shared between requests.
type Error struct {
	// Status is the HTTP status code.
	Status int `json:"-"`
	// Detail is a human-readable sentence. It never echoes raw client
	// input.
	Detail string `json:"detail"`
	// Code is a stable machine-readable code.
	Code string `json:"code"`
	// Fields maps a field of the request to its problems, or is nil.
	// Problems that belong to no single field are under NonFieldErrors.
	Fields map[string][]string `json:"fields,omitempty"`
	// Header holds extra response headers (Allow, Retry-After,
	// WWW-Authenticate, …), or is nil.
	Header http.Header `json:"-"`

	body []byte // the encoded body of a static answer
}

// NonFieldErrors is the Fields key of problems that belong to no single
// field, as Django REST framework names it.
const NonFieldErrors = "non_field_errors"

// CodeTooLarge is the code of the 413 answer to a body over its limit.
const CodeTooLarge = "request_too_large"

// Error returns the detail, so that an *Error can travel as an error.
func (e *Error) Error() string { return e.Detail }

// New returns an answer that is encoded each time it is written: one that
// varies per request.
func New(status int, code, detail string) *Error {
	return &Error{Status: status, Code: code, Detail: detail}
}

// Static returns an answer encoded once, for an answer shared between
// requests. header holds extra response headers as name, value pairs.
func Static(status int, code, detail string, header ...string) *Error {
	e := New(status, code, detail)
	if len(header) > 0 {
		e.Header = make(http.Header, len(header)/2)
		for i := 0; i+1 < len(header); i += 2 {
			e.Header.Set(header[i], header[i+1])
		}
	}
	e.body = e.encode()
	return e
}

// Body returns the JSON body of e, ending in a newline. The body of a
// static answer is shared and must not be modified.
func (e *Error) Body() []byte {
	if e.body != nil {
		return e.body
	}
	return e.encode()
}

func (e *Error) encode() []byte {
	b, err := json.Marshal(e)
	if err != nil { // only strings and string slices: cannot happen
		return []byte(`{"detail":"Internal error.","code":"internal_error"}` + "\n")
	}
	return append(b, '\n')
}

var internal = Static(http.StatusInternalServerError, "internal_error", "Internal error.")

// Internal returns the 500 answer to a bug: a recovered panic, or a state
// that cannot happen. It is shared: read-only.
func Internal() *Error { return internal }

// TooLarge returns the 413 answer to a body over limit bytes.
func TooLarge(limit int64) *Error {
	return Static(http.StatusRequestEntityTooLarge, CodeTooLarge,
		"Request body is larger than "+strconv.FormatInt(limit, 10)+" bytes.")
}

var notFound = Static(http.StatusNotFound, "not_found", "Not found.")

// NotFound returns the 404 answer to a path nothing serves. It is shared:
// read-only.
func NotFound() *Error { return notFound }

// MethodNotAllowed returns the 405 answer to method, with allow (the
// methods the path accepts) as its Allow header.
func MethodNotAllowed(method, allow string) *Error {
	e := New(http.StatusMethodNotAllowed, "method_not_allowed", "Method "+strconv.Quote(method)+" not allowed.")
	e.Header = http.Header{"Allow": {allow}}
	return e
}
