package validate

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/exgate/exgate/apierror"
)

// Codes of the answers a Validator refuses an order body with (an
// *apierror.Error). A refusal returned by a Validator must be treated as
// read-only: the static ones are shared between requests.
const (
	// CodeInvalidOrder (400): the body is a JSON value but breaks field
	// rules; Fields says which and why.
	CodeInvalidOrder = "invalid_order"
	// CodeParseError (400): the body is not one well-formed JSON value
	// (syntax, invalid UTF-8, nesting too deep, trailing data).
	CodeParseError = "parse_error"
	// CodeTooLarge (413): the body is larger than the limit.
	CodeTooLarge = apierror.CodeTooLarge
	// CodeUnsupportedMediaType (415): Content-Type is not
	// application/json with an optional UTF-8 charset.
	CodeUnsupportedMediaType = "unsupported_media_type"
	// CodeCatalogueUnavailable (503): the market catalogue has not loaded
	// yet, so the order cannot be checked.
	CodeCatalogueUnavailable = "catalogue_unavailable"
)

// NonFieldErrors is the Fields key of problems that belong to no single
// field, as Django REST framework names it.
const NonFieldErrors = apierror.NonFieldErrors

// Answers that do not vary per request, encoded once.
var (
	errMediaType = apierror.Static(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType,
		`Unsupported media type: send "Content-Type: application/json" (charset, if given, utf-8).`)
	errUnavailable = apierror.Static(http.StatusServiceUnavailable, CodeCatalogueUnavailable,
		"The market catalogue has not been loaded from the exchange yet, so orders cannot be checked; retry shortly.")
)

// parseError returns the 400 answer for a body that is not well-formed
// JSON; reason never contains client input.
func parseError(reason string, offset int) *apierror.Error {
	return apierror.New(http.StatusBadRequest, CodeParseError,
		"JSON parse error: "+reason+" at byte "+strconv.Itoa(offset)+".")
}

// report collects field problems, allocating only when there is one.
type report struct {
	p     *apierror.Error
	order []string // the keys of p.Fields in the order their first problem was found
}

func (r *report) add(field, msg string) {
	if r.p == nil {
		r.p = &apierror.Error{Status: http.StatusBadRequest, Code: CodeInvalidOrder, Fields: make(map[string][]string, 2)}
	}
	if _, seen := r.p.Fields[field]; !seen {
		r.order = append(r.order, field)
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

// done writes the report's detail and returns its answer, or nil.
func (r *report) done() *apierror.Error { return r.doneAs("Invalid order") }

// doneAs is done with the detail starting with lead.
func (r *report) doneAs(lead string) *apierror.Error {
	if r.p != nil {
		r.p.Detail = invalidDetail(lead, r.order, r.p.Fields)
	}
	return r.p
}

// maxDetailProblems bounds how many problems the detail sentence spells
// out; Fields always holds them all.
const maxDetailProblems = 6

// invalidDetail is the detail of an invalid_order answer: one sentence
// that names every field and says what is wrong with it, so that a client
// showing only "detail" tells its user what to fix:
//
//	Invalid order: price must be a multiple of 0.01; base_amount is required.
func invalidDetail(lead string, order []string, fields map[string][]string) string {
	var b strings.Builder
	b.WriteString(lead)
	n := 0
	for _, f := range order {
		for _, msg := range fields[f] {
			if n == maxDetailProblems {
				total := 0
				for _, ms := range fields {
					total += len(ms)
				}
				b.WriteString("; and " + strconv.Itoa(total-n) + " more (see fields)")
				b.WriteByte('.')
				return b.String()
			}
			if n == 0 {
				b.WriteString(": ")
			} else {
				b.WriteString("; ")
			}
			b.WriteString(sentence(f, msg))
			n++
		}
	}
	b.WriteByte('.')
	return b.String()
}

// sentence joins a field name and one of its messages into a clause:
// "price must be a multiple of 0.01", "symbol is required", "foo is an
// unknown field". A problem of no single field is its message alone.
func sentence(field, msg string) string {
	name := field
	if i := strings.LastIndexByte(field, '.'); i >= 0 && field[i+1:] == NonFieldErrors {
		name = field[:i] // "orders[2].non_field_errors": the element itself
	} else if field == NonFieldErrors {
		return msg
	}
	switch {
	case msg == "unknown field":
		return name + " is an unknown field"
	case strings.HasPrefix(msg, "required"), strings.HasPrefix(msg, "not used"):
		return name + " is " + msg
	case strings.HasPrefix(msg, "must"), strings.HasPrefix(msg, "may"), strings.HasPrefix(msg, "is "),
		strings.HasPrefix(msg, "contains"), strings.HasPrefix(msg, "repeats"):
		return name + " " + msg
	}
	return name + ": " + msg
}
