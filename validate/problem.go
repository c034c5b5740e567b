package validate

import (
	"net/http"
	"strconv"
)

// Problem is a refusal of an order request, in the error shape clients of
// the API already parse (Django REST framework's):
//
//	{"detail": "Invalid order.", "code": "invalid_order", "fields": {"price": ["must be a multiple of 0.01"]}}
//
// The proxy writes it as its own error: the same Status, Code, Detail and
// Fields. A Problem returned by a Validator must be treated as read-only;
// static ones are shared between requests.
type Problem struct {
	// Status is the HTTP status code: 400, 413, 415 or 503.
	Status int `json:"-"`
	// Detail is a human-readable sentence. It never echoes client input.
	Detail string `json:"detail"`
	// Code is a stable machine-readable code (see the Code constants).
	Code string `json:"code"`
	// Fields maps a body field to its problems, or is nil. Problems that
	// belong to no single field are under "non_field_errors".
	Fields map[string][]string `json:"fields,omitempty"`
}

// Error returns the detail, so that a *Problem can travel as an error.
func (p *Problem) Error() string { return p.Detail }

// Problem codes.
const (
	// CodeInvalidOrder (400): the body is a JSON value but breaks field
	// rules; Fields says which and why.
	CodeInvalidOrder = "invalid_order"
	// CodeParseError (400): the body is not one well-formed JSON value
	// (syntax, invalid UTF-8, nesting too deep, trailing data).
	CodeParseError = "parse_error"
	// CodeTooLarge (413): the body is larger than the limit.
	CodeTooLarge = "request_too_large"
	// CodeUnsupportedMediaType (415): Content-Type is not
	// application/json with an optional UTF-8 charset.
	CodeUnsupportedMediaType = "unsupported_media_type"
	// CodeCatalogueUnavailable (503): the market catalogue has not loaded
	// yet, so the order cannot be checked.
	CodeCatalogueUnavailable = "catalogue_unavailable"
)

// NonFieldErrors is the Fields key of problems that belong to no single
// field, as Django REST framework names it.
const NonFieldErrors = "non_field_errors"

func tooLarge(limit int64) *Problem {
	return &Problem{Status: http.StatusRequestEntityTooLarge, Code: CodeTooLarge,
		Detail: "Request body is larger than " + strconv.FormatInt(limit, 10) + " bytes."}
}

func unsupportedMediaType() *Problem {
	return &Problem{Status: http.StatusUnsupportedMediaType, Code: CodeUnsupportedMediaType,
		Detail: `Unsupported media type: send "Content-Type: application/json" (charset, if given, utf-8).`}
}

func catalogueUnavailable() *Problem {
	return &Problem{Status: http.StatusServiceUnavailable, Code: CodeCatalogueUnavailable,
		Detail: "The market catalogue has not been loaded from the exchange yet, so orders cannot be checked; retry shortly."}
}

// parseError returns the 400 answer for a body that is not well-formed
// JSON; reason never contains client input.
func parseError(reason string, offset int) *Problem {
	return &Problem{Status: http.StatusBadRequest, Code: CodeParseError,
		Detail: "JSON parse error: " + reason + " at byte " + strconv.Itoa(offset) + "."}
}

// report collects field problems, allocating only when there is one.
type report struct{ p *Problem }

func (r *report) add(field, msg string) {
	if r.p == nil {
		r.p = &Problem{Status: http.StatusBadRequest, Code: CodeInvalidOrder, Detail: "Invalid order.",
			Fields: make(map[string][]string, 2)}
	}
	r.p.Fields[field] = append(r.p.Fields[field], msg)
}

func (r *report) has(field string) bool {
	if r.p == nil {
		return false
	}
	_, ok := r.p.Fields[field]
	return ok
}
