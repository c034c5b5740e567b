package proxy

import (
	"net/http"

	"github.com/exgate/exgate/apierror"
	"github.com/exgate/exgate/config"
)

// Query strings on order routes. An order route (validate: order or
// order_bulk) checks its body and forwards it re-encoded; a query string
// would go to the backend unchecked beside it. Exchange backends that read
// order parameters from the query (Binance-style signed query strings),
// and frameworks that merge the query into the parsed parameters (Flask's
// request.values, Express with body and query merged, Rails' params),
// would then place an order with fields exgate never validated; Django
// REST framework keeps request.data apart from the query, yet its
// ?format= chooses the renderer (?format=api answers an order with an
// HTML page). No client of the trading API sends a query to place an
// order, so an order route refuses any; a bare "?" is dropped. Every
// other route forwards its query as it came: a list filter such as
// GET /api/v1/odr/orders/?state=active is unaffected.

var errOrderQuery = apierror.Static(http.StatusBadRequest, "invalid_query",
	"An order route takes no query string: the order's fields go in the JSON body.")

// checkQuery refuses a query string on a route that validates its body,
// before any limit is charged, and drops an empty one ("?") so that the
// backend receives the bare path.
func (g *Gateway) checkQuery(st *requestState, r *http.Request) *apierror.Error {
	if v := st.route.Config.Validate; v != config.ValidateOrd && v != config.ValidateBulk {
		return nil
	}
	r.URL.ForceQuery = false
	if r.URL.RawQuery == "" {
		return nil
	}
	g.metrics.ValidationRejected(errOrderQuery.Code)
	return errOrderQuery
}
