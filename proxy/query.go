package proxy

import (
	"net/http"

	"github.com/exgate/exgate/apierror"
	"github.com/exgate/exgate/config"
)

// Query strings on the order family. An order route (validate: order or
// order_bulk) checks its body and forwards it re-encoded; a query string
// would go to the backend unchecked beside it. Exchange backends that read
// order parameters from the query (Binance-style signed query strings),
// and frameworks that merge the query into the parsed parameters (Flask's
// request.values, Express with body and query merged, Rails' params),
// would then place an order with fields exgate never validated; Django
// REST framework keeps request.data apart from the query, yet its
// ?format= chooses the renderer (?format=api answers an order with an
// HTML page). An order id route (validate: order_ids: a cancel, a status
// read) checks the ids of its path and charges one unit per id; a query
// beside them (?ids=4,5,6, ?symbol=BTC_USDT&all=true) would reach a
// backend that reads ids or a mass cancel from it uncharged and
// unchecked, past the per-id charge and on the cancel lane, and DRF
// still cancels under ?format=api and answers the JSON client with HTML.
// No client of the trading API sends a query to place, cancel or read an
// order by id, so those routes refuse any; a bare "?" is dropped. Every
// other route forwards its query: a list filter such as
// GET /api/v1/odr/orders/?state=active is unaffected.

var (
	errOrderQuery = apierror.Static(http.StatusBadRequest, "invalid_query",
		"An order route takes no query string: the order's fields go in the JSON body.")
	errIDsQuery = apierror.Static(http.StatusBadRequest, "invalid_query",
		"An order id route takes no query string: the order ids go in the path.")
)

// checkQuery refuses a query string on a route that checks what it
// forwards (validate: order, order_bulk or order_ids), before any limit
// is charged, and drops an empty one ("?") so that the backend receives
// the bare path.
func (g *Gateway) checkQuery(st *requestState, r *http.Request) *apierror.Error {
	e := errOrderQuery
	switch st.route.Config.Validate {
	case config.ValidateOrd, config.ValidateBulk:
	case config.ValidateIDs:
		e = errIDsQuery
	default:
		return nil
	}
	r.URL.ForceQuery = false
	if r.URL.RawQuery == "" {
		return nil
	}
	g.metrics.ValidationRejected(e.Code)
	return e
}
