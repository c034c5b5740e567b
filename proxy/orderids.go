package proxy

import (
	"io"
	"net/http"
	"strings"

	"github.com/exgate/exgate/apierror"
	"github.com/exgate/exgate/validate"
)

// Order ids in a path. A route with validate: order_ids (by default
// cancel_order, DELETE /api/v1/odr/orders/{id}/, and get_orders,
// GET /api/v1/odr/orders/{ids}/) carries one order id, or several joined
// by commas, as its last path parameter: the API's clients ask the status
// of several orders as GET /api/v1/odr/orders/3,2/. exgate checks the
// list as it checks a bulk cancel's ids, before any limit is charged, and
// charges the route's limits one unit per id: a backend that reads a list
// where exgate read one opaque segment would otherwise serve k ids for the
// price of one (a list of cancels past the cancel limit), and one that
// reads "03" as order 3, "3,,2" as two ids or "bulk" as a view could
// serve what exgate never checked. A list that checks is its own
// canonical form, forwarded as it came; any other (an empty element, a
// sign, a leading zero, braces, a repeated id, more than
// validation.bulk.max_orders ids) is refused with 400 invalid_order,
// naming the element as a bulk cancel would ("ids[1]").
//
// Such a request carries no body: the ids are the path's. Django REST
// framework parses request.data on a DELETE as on a POST, so a cancel
// view that reads {"ids": [4, 5, 6]} beside the path's one id would be a
// mass cancel exgate neither checked nor charged; a body on such a route
// (a Content-Length above 0, or chunked) is refused with 400
// unexpected_body before any limit is charged. A body of unknown length
// that ends before its first byte (the empty last chunk; an HTTP/2
// client that leaves a DELETE's stream open and ends it with an empty
// DATA frame) is none: that cancel goes through.

// errIDsBody refuses a body on a route whose order ids are its path's.
var errIDsBody = apierror.Static(http.StatusBadRequest, "unexpected_body",
	"This request takes no body: its order ids go in the path (3, or 3,2).")

// pathIDs checks the order id list of st's route, if it takes one, and
// returns what the request is charged in the route's limits: one unit
// per id, or one for a route without a list. A request with a body is
// refused on a route with a list (errIDsBody).
func (g *Gateway) pathIDs(st *requestState, r *http.Request) (int64, *apierror.Error) {
	if st.route.maxIDs == 0 {
		return 1, nil
	}
	if bodySent(r) {
		g.metrics.ValidationRejected(errIDsBody.Code)
		return 0, errIDsBody
	}
	n, e := validate.CheckIDList(lastSegment(st.path), st.route.maxIDs)
	if e != nil {
		g.metrics.ValidationRejected(e.Code)
		return 0, e
	}
	return int64(n), nil
}

// lastSegment returns the last segment of a canonical path, without its
// trailing slash.
func lastSegment(p string) string {
	p = strings.TrimSuffix(p, "/")
	return p[strings.LastIndexByte(p, '/')+1:]
}

// bodySent reports whether r carries a body: a Content-Length above 0, or
// a body of unknown length (chunked, or HTTP/2 without a Content-Length)
// whose first read gives a byte or fails. One that ends at once is none,
// and r is then left with none (http.NoBody), so that the backend is sent
// none either.
func bodySent(r *http.Request) bool {
	if r.ContentLength >= 0 && len(r.TransferEncoding) == 0 {
		return r.ContentLength > 0
	}
	var first [1]byte
	if n, err := io.ReadAtLeast(r.Body, first[:], 1); n > 0 || err != io.EOF {
		return true
	}
	r.Body, r.ContentLength, r.TransferEncoding = http.NoBody, 0, nil
	return false
}
