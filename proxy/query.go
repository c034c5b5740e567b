package proxy

import (
	"net/http"
	"strings"

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
// other route forwards its query as it came (a list filter such as
// GET /api/v1/odr/orders/?state=active is unaffected), unless
// httputil.ReverseProxy would not: it re-encodes a query with a ";", a
// malformed percent-escape or more than 10,000 parameters through
// url.ParseQuery, dropping every parameter that refuses, so that
// ?state=active;symbol=BTC_USDT reached the backend as no query at all
// (the whole order list, where Django reads state "active;symbol=BTC_USDT"
// and lists nothing), ?symbol=BTC_USDT&x=%zz as ?symbol=BTC_USDT, and
// 10,000 "&" after ?state=active as no filter. Parsers read those queries
// differently (";" split by some, kept by Django and Python's parse_qsl;
// "%zz" dropped by Go, kept literally by Django), so exgate refuses them
// (queryAsSent) rather than forward what the client did not send. With
// GODEBUG naming urlmaxqueryparams, ReverseProxy re-encodes every query;
// rewrite puts the client's back, so that the backend reads the query
// exgate checked under any setting.

var (
	errOrderQuery = apierror.Static(http.StatusBadRequest, "invalid_query",
		"An order route takes no query string: the order's fields go in the JSON body.")
	errIDsQuery = apierror.Static(http.StatusBadRequest, "invalid_query",
		"An order id route takes no query string: the order ids go in the path.")
	errQueryUnclear = apierror.Static(http.StatusBadRequest, "invalid_query",
		`The query string has a ";", a malformed percent-escape or more than 10000 parameters, which parsers read differently: write ";" as %3B and "%" as %25.`)
)

// maxQueryParams is the most parameters net/url parses in a query (its
// defaultMaxParams); httputil.ReverseProxy re-encodes one with more.
const maxQueryParams = 10000

// queryAsSent reports whether httputil.ReverseProxy forwards the raw
// query q as it is (its cleanQueryParams): no ";", every "%" followed by
// two hex digits, at most maxQueryParams parameters.
func queryAsSent(q string) bool {
	if strings.Count(q, "&") >= maxQueryParams {
		return false
	}
	for i := 0; i < len(q); i++ {
		switch q[i] {
		case ';':
			return false
		case '%':
			if i+2 >= len(q) {
				return false
			}
			if _, ok := unhex(q[i+1]); !ok {
				return false
			}
			if _, ok := unhex(q[i+2]); !ok {
				return false
			}
			i += 2
		}
	}
	return true
}

// checkQuery refuses a query string on a route that checks what it
// forwards (validate: order, order_bulk or order_ids), and on any other
// route one that would not be forwarded as it came (queryAsSent), before
// any limit is charged; it drops an empty one ("?") on the former so that
// the backend receives the bare path.
func (g *Gateway) checkQuery(st *requestState, r *http.Request) *apierror.Error {
	e := errOrderQuery
	switch st.route.Config.Validate {
	case config.ValidateOrd, config.ValidateBulk:
	case config.ValidateIDs:
		e = errIDsQuery
	default:
		if q := r.URL.RawQuery; q != "" && !queryAsSent(q) {
			return errQueryUnclear
		}
		return nil
	}
	r.URL.ForceQuery = false
	if r.URL.RawQuery == "" {
		return nil
	}
	g.metrics.ValidationRejected(e.Code)
	return e
}
