// Package sim is exgate's reference exchange backend: an in-memory
// implementation of the trading API specification (trading-api.md) with a
// seeded market catalogue, JWT authentication and a small price-time
// priority matching engine. It exists so that the gateway can be run,
// tested and benchmarked without an external exchange; it is not the
// product.
//
// A Server is an http.Handler serving
//
//	GET  /api/v1/mkt/markets/
//	GET  /api/v1/mkt/currencies/
//	GET  /api/v1/mth/matches/{symbol}/
//	POST /api/v1/odr/orders/          (Authorization: Bearer <access JWT>)
//	POST /api/v1/usr/authenticate/    ({"api_key", "secret_key"} -> {"access", "refresh"})
//	POST /api/v1/usr/refresh_token/   ({"refresh"} -> {"access"})
//	GET  /.well-known/jwks.json       (the RS256 verifying key, with Options.SigningKey)
//
// and the rest of the family the API's clients use (family.go), each for
// the token's own user:
//
//	GET    /api/v1/odr/orders/?state=active&symbol=   the user's orders
//	GET    /api/v1/odr/orders/{id}/, /{id},{id}/       status by id, by ids joined by commas
//	DELETE /api/v1/odr/orders/{id}/                    cancel (404 for another user's order)
//	POST   /api/v1/odr/orders/bulk/                    an array of orders: bulk placement ({"orders": [...]});
//	                                                   an array of ids or {"ids": [...]}: bulk cancel
//	DELETE /api/v1/odr/orders/bulk/                    ids, as an array or {"ids": [...]}: bulk cancel
//	GET    /api/v1/odr/fills/                          the user's trades
//	GET    /api/v1/wlt/wallets/                        balances after the user's trades
//	GET    /api/v1/mkt/tickers/                        last price, best bid and ask per market
//	GET    /api/v1/mth/orderbook/{symbol}/             the book's price levels
//
// Errors use the shapes of Django REST framework: {"detail": ...,
// "code": ...} for authentication and routing errors, and a map from field
// name to a list of messages for invalid request bodies.
package sim

import (
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// Defaults applied by New to zero Options fields.
const (
	// DevSecret is the JWT key used when Options.Secret is nil. It is
	// public, so tokens signed with it prove nothing outside development.
	DevSecret = "exgate-sim-insecure-dev-secret"
	// MaxBodyBytes is the largest request body accepted; larger bodies
	// get 413.
	MaxBodyBytes = 64 << 10

	defaultAccessTTL  = time.Hour
	defaultRefreshTTL = 24 * time.Hour
	defaultMaxMatches = 100
)

// Options configures a Server. The zero value is a usable development
// configuration.
type Options struct {
	// Secret is the HS256 key for JWTs; nil means DevSecret. Unused with
	// SigningKey.
	Secret []byte
	// SigningKey, when set, signs the tokens with RS256 (as SimpleJWT's
	// ALGORITHM: RS256 with this SIGNING_KEY), their kid the RFC 7638
	// thumbprint of its public key, which the server publishes as a JWKS
	// at /.well-known/jwks.json (Server.JWKS); only RS256 tokens of this
	// key are then accepted. Nil means HS256 with Secret. At least 2048
	// bits.
	SigningKey *rsa.PrivateKey
	// Credentials maps api_key to secret_key; nil means two dev accounts,
	// {"dev": "dev", "dev2": "dev2"} (user ids 1 and 2).
	Credentials map[string]string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// AccessTTL and RefreshTTL are token lifetimes; 0 means 1h and 24h.
	AccessTTL, RefreshTTL time.Duration
	// NoSeedBook leaves every order book empty. By default each tradable
	// market starts with a few resting bids and asks around a reference
	// price, so that a demo market order fills.
	NoSeedBook bool
	// MaxMatches bounds the recent-matches list of each market; 0 means
	// 100.
	MaxMatches int
	// ClosedOrdersKept bounds how many closed (filled or canceled) orders
	// each user's history keeps, newest first, as an exchange archives
	// older ones: an order past it is no longer listed and its status is
	// not found. Open orders are always kept. 0 means 10,000. Without a
	// bound, a benchmark's millions of orders filled the heap, and the
	// garbage collector's pauses became the backend's latency.
	ClosedOrdersKept int
}

// Server is the simulated exchange. It is safe for concurrent use; build
// it with New.
type Server struct {
	secret     []byte
	rsa        *rsaSigner      // nil: HS256 with secret
	users      map[string]user // by api_key
	now        func() time.Time
	accessTTL  time.Duration
	refreshTTL time.Duration

	markets    []Market
	currencies []currency
	books      map[string]*book // by symbol; the map is read-only after New

	lastOrderID atomic.Int64
	accounts    accounts // users' orders, fills and wallets
}

// New returns a Server configured by opts, with the seeded catalogue and,
// unless opts.NoSeedBook is set, seeded order books. It panics on a
// SigningKey shorter than 2048 bits (NewChecked returns the error).
func New(opts Options) *Server {
	s, err := NewChecked(opts)
	if err != nil {
		panic(err)
	}
	return s
}

// NewChecked is New, returning a bad SigningKey as an error.
func NewChecked(opts Options) (*Server, error) {
	s := &Server{
		secret:     opts.Secret,
		now:        opts.Now,
		accessTTL:  opts.AccessTTL,
		refreshTTL: opts.RefreshTTL,
		markets:    seedMarkets(),
		currencies: seedCurrencies(),
		books:      make(map[string]*book),
	}
	s.accounts.closedKept = opts.ClosedOrdersKept
	if s.accounts.closedKept <= 0 {
		s.accounts.closedKept = defaultClosedOrdersKept
	}
	if s.secret == nil {
		s.secret = []byte(DevSecret)
	}
	if k := opts.SigningKey; k != nil {
		if k.N.BitLen() < 2048 {
			return nil, fmt.Errorf("sim: signing key of %d bits; RS256 wants at least 2048", k.N.BitLen())
		}
		var err error
		if s.rsa, err = newRSASigner(k); err != nil {
			return nil, err
		}
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.accessTTL <= 0 {
		s.accessTTL = defaultAccessTTL
	}
	if s.refreshTTL <= 0 {
		s.refreshTTL = defaultRefreshTTL
	}
	creds := opts.Credentials
	if creds == nil {
		creds = map[string]string{"dev": "dev", "dev2": "dev2"}
	}
	s.users = newUsers(creds)
	maxMatches := opts.MaxMatches
	if maxMatches <= 0 {
		maxMatches = defaultMaxMatches
	}
	for _, m := range s.markets {
		s.books[m.Symbol] = newBook(m, maxMatches)
	}
	if !opts.NoSeedBook {
		s.seedBooks()
	}
	return s, nil
}

// Markets returns a copy of the seeded market catalogue, in the order the
// markets endpoint lists it.
func (s *Server) Markets() []Market {
	return append([]Market(nil), s.markets...)
}

// route is one endpoint: its allowed method and its handler.
type route struct {
	method  string
	handler func(w http.ResponseWriter, r *http.Request, param string)
}

const matchesPrefix = "/api/v1/mth/matches/"

// ServeHTTP routes a request to its endpoint. Paths are matched exactly,
// trailing slash included.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The request id comes back on the answer, as from a backend behind a
	// request-id middleware: a gateway that checks it (exgate does) can
	// tell a response meant for another request.
	if id := r.Header.Get("X-Request-Id"); id != "" {
		w.Header().Set("X-Request-Id", id)
	}
	var rt route
	var param string
	switch p := r.URL.Path; p {
	case "/api/v1/mkt/markets/":
		rt = route{http.MethodGet, s.handleMarkets}
	case "/api/v1/mkt/currencies/":
		rt = route{http.MethodGet, s.handleCurrencies}
	case "/api/v1/odr/orders/":
		s.methods(map[string]handler{http.MethodGet: s.handleListOrders, http.MethodPost: s.handlePlaceOrder})(w, r, "")
		return
	case "/api/v1/usr/authenticate/":
		rt = route{http.MethodPost, s.handleAuthenticate}
	case "/api/v1/usr/refresh_token/":
		rt = route{http.MethodPost, s.handleRefresh}
	case jwksPath:
		rt = route{http.MethodGet, s.handleJWKS}
	default:
		if h, param, ok := s.familyRoute(p); ok {
			h(w, r, param)
			return
		}
		sym, ok := strings.CutPrefix(p, matchesPrefix)
		if sym, ok = strings.CutSuffix(sym, "/"); !ok || sym == "" || strings.Contains(sym, "/") {
			writeNotFound(w)
			return
		}
		rt, param = route{http.MethodGet, s.handleMatches}, sym
	}
	allowed := rt.method == r.Method || rt.method == http.MethodGet && r.Method == http.MethodHead
	if !allowed {
		allow := rt.method
		if allow == http.MethodGet {
			allow = "GET, HEAD"
		}
		w.Header().Set("Allow", allow)
		writeJSON(w, http.StatusMethodNotAllowed, detail{Detail: fmt.Sprintf("Method %q not allowed.", r.Method)})
		return
	}
	rt.handler(w, r, param)
}

func (s *Server) handleMarkets(w http.ResponseWriter, _ *http.Request, _ string) {
	writeJSON(w, http.StatusOK, s.markets)
}

func (s *Server) handleCurrencies(w http.ResponseWriter, _ *http.Request, _ string) {
	writeJSON(w, http.StatusOK, s.currencies)
}

func (s *Server) handleMatches(w http.ResponseWriter, _ *http.Request, symbol string) {
	b, ok := s.books[symbol]
	if !ok {
		writeNotFound(w)
		return
	}
	writeJSON(w, http.StatusOK, b.recentMatches())
}

// detail is the body of every non-field error.
type detail struct {
	Detail string `json:"detail"`
	Code   string `json:"code,omitempty"`
}

// fieldErrors maps a request field name (or "non_field_errors") to its
// messages; it is the body of a 400 answer to an invalid request.
type fieldErrors map[string][]string

func (e fieldErrors) add(field, msg string) { e[field] = append(e[field], msg) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil { // Only our own types are written; this cannot happen.
		http.Error(w, `{"detail":"Internal server error."}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func writeNotFound(w http.ResponseWriter) {
	writeJSON(w, http.StatusNotFound, detail{Detail: "Not found."})
}

// readObject decodes the request body, which must be at most MaxBodyBytes
// of JSON holding one object, with numbers kept as json.Number. An empty
// body is an empty object. On failure it writes the error response and
// returns ok false.
func readObject(w http.ResponseWriter, r *http.Request) (obj map[string]any, ok bool) {
	v, ok := readValue(w, r)
	if !ok {
		return nil, false
	}
	obj, ok = v.(map[string]any)
	if !ok {
		writeJSON(w, http.StatusBadRequest, fieldErrors{"non_field_errors": {
			fmt.Sprintf("Invalid data. Expected a dictionary, but got %s.", jsonKind(v))}})
		return nil, false
	}
	return obj, true
}

// readValue decodes the request body as readObject does, whatever the
// JSON value; an empty body is an empty object.
func readValue(w http.ResponseWriter, r *http.Request) (any, bool) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			writeJSON(w, http.StatusUnsupportedMediaType,
				detail{Detail: fmt.Sprintf("Unsupported media type %q in request.", ct), Code: "unsupported_media_type"})
			return nil, false
		}
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	if err == nil {
		if _, err = dec.Token(); err == io.EOF {
			err = nil
		} else if err == nil {
			err = errors.New("unexpected data after the JSON value")
		}
	} else if err == io.EOF {
		v, err = map[string]any{}, nil
	}
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		writeJSON(w, http.StatusRequestEntityTooLarge, detail{Detail: "Request body too large.", Code: "request_too_large"})
		return nil, false
	case err != nil:
		writeJSON(w, http.StatusBadRequest, detail{Detail: "JSON parse error - " + err.Error(), Code: "parse_error"})
		return nil, false
	}
	return v, true
}

// jsonKind names the JSON type of a decoded value the way DRF names
// Python types in its messages.
func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "bool"
	case json.Number:
		return "number"
	case string:
		return "str"
	case []any:
		return "list"
	default:
		return "dict"
	}
}

// stringField reads an optional string field. It returns ok false, having
// recorded an error, when the field is present but not a string; present
// is false when the field is absent or null.
func stringField(obj map[string]any, name string, errs fieldErrors) (v string, present, ok bool) {
	raw, found := obj[name]
	if !found || raw == nil {
		return "", false, true
	}
	sv, isStr := raw.(string)
	if !isStr {
		errs.add(name, "Not a valid string.")
		return "", false, false
	}
	return sv, true, true
}

// requiredString reads a required string field, recording an error and
// returning ok false when it is absent, null, blank or not a string.
func requiredString(obj map[string]any, name string, errs fieldErrors) (string, bool) {
	raw, found := obj[name]
	switch {
	case !found:
		errs.add(name, "This field is required.")
		return "", false
	case raw == nil:
		errs.add(name, "This field may not be null.")
		return "", false
	}
	v, ok := raw.(string)
	switch {
	case !ok:
		errs.add(name, "Not a valid string.")
		return "", false
	case v == "":
		errs.add(name, "This field may not be blank.")
		return "", false
	}
	return v, true
}
