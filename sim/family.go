package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shopspring/decimal"
)

// accounts holds, per user, the orders the user placed (in placement
// order): every open one and, once placement has pruned the history, the
// newest closedKept closed ones. The orders themselves are owned by their
// books and read or written under the book's mutex.
type accounts struct {
	mu         sync.Mutex
	byID       map[int64]*order
	byUser     map[int64][]*order
	closedKept int
}

// defaultClosedOrdersKept is Options.ClosedOrdersKept's zero value.
const defaultClosedOrdersKept = 10000

// add records a placed order of a user. Each time the user's history
// grows past twice closedKept orders (and every closedKept orders after
// that), it returns a copy of the history for the caller to prune; else
// nil. Pruning then costs a constant amount per order placed.
func (a *accounts) add(o *order) []*order {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.byID == nil {
		a.byID, a.byUser = map[int64]*order{}, map[int64][]*order{}
	}
	a.byID[o.id] = o
	history := append(a.byUser[o.userID], o)
	a.byUser[o.userID] = history
	if len(history) > 2*a.closedKept && len(history)%a.closedKept == 1 {
		return slices.Clone(history)
	}
	return nil
}

// drop forgets the given orders of a user.
func (a *accounts) drop(userID int64, gone []*order) {
	if len(gone) == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	set := make(map[*order]bool, len(gone))
	for _, o := range gone {
		set[o] = true
		delete(a.byID, o.id)
	}
	a.byUser[userID] = slices.DeleteFunc(a.byUser[userID], func(o *order) bool { return set[o] })
}

// closedBeyond returns the closed orders of history (oldest first) older
// than its newest keep closed ones, each order's state read under its
// book's lock. An order never reopens, so what it returns stays closed.
func (s *Server) closedBeyond(history []*order, keep int) []*order {
	var closed []*order
	for i := len(history) - 1; i >= 0; i-- {
		o := history[i]
		b := s.books[o.market.Symbol]
		b.mu.Lock()
		open := o.state == stateActive
		b.mu.Unlock()
		if !open {
			closed = append(closed, o)
		}
	}
	if len(closed) <= keep {
		return nil
	}
	return closed[keep:]
}

// get returns the user's order with the given id, or nil: another user's
// order does not exist for this one.
func (a *accounts) get(userID, id int64) *order {
	a.mu.Lock()
	defer a.mu.Unlock()
	if o := a.byID[id]; o != nil && o.userID == userID {
		return o
	}
	return nil
}

// of returns the user's orders, oldest first.
func (a *accounts) of(userID int64) []*order {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.byUser[userID])
}

// fill is one trade of a user's order, as the fills endpoint lists it.
type fill struct {
	ID          string `json:"id"`
	OrderID     int64  `json:"order_id"`
	Symbol      string `json:"symbol"`
	Side        string `json:"side"`
	Price       string `json:"price"`
	BaseAmount  string `json:"base_amount"`
	QuoteAmount string `json:"quote_amount"`
	Maker       bool   `json:"is_maker"`
	CreatedAt   string `json:"created_at"`

	userID      int64
	base, quote decimal.Decimal
	market      Market
}

// familyRoute returns the handler of a family endpoint other than the
// spec's four, and its path parameter.
func (s *Server) familyRoute(p string) (func(http.ResponseWriter, *http.Request, string), string, bool) {
	switch p {
	case "/api/v1/odr/orders/bulk/":
		return s.methods(map[string]handler{http.MethodPost: s.handleBulk, http.MethodDelete: s.handleBulk}), "", true
	case "/api/v1/odr/fills/":
		return s.methods(map[string]handler{http.MethodGet: s.handleFills}), "", true
	case "/api/v1/wlt/wallets/":
		return s.methods(map[string]handler{http.MethodGet: s.handleWallets}), "", true
	case "/api/v1/mkt/tickers/":
		return s.methods(map[string]handler{http.MethodGet: s.handleTickers}), "", true
	}
	if id, ok := lastParam(p, "/api/v1/odr/orders/"); ok {
		return s.methods(map[string]handler{http.MethodGet: s.handleOrderStatus, http.MethodDelete: s.handleCancel}), id, true
	}
	if sym, ok := lastParam(p, "/api/v1/mth/orderbook/"); ok {
		return s.methods(map[string]handler{http.MethodGet: s.handleOrderBook}), sym, true
	}
	return nil, "", false
}

type handler = func(http.ResponseWriter, *http.Request, string)

// methods dispatches on the method, answering 405 with Allow for others
// (GET also serves HEAD).
func (s *Server) methods(hs map[string]handler) handler {
	return func(w http.ResponseWriter, r *http.Request, param string) {
		m := r.Method
		if m == http.MethodHead {
			m = http.MethodGet
		}
		if h := hs[m]; h != nil {
			h(w, r, param)
			return
		}
		var allow []string
		for k := range hs {
			allow = append(allow, k)
			if k == http.MethodGet {
				allow = append(allow, http.MethodHead)
			}
		}
		slices.Sort(allow)
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeJSON(w, http.StatusMethodNotAllowed, detail{Detail: "Method " + strconv.Quote(r.Method) + " not allowed."})
	}
}

// lastParam returns the one segment after prefix in p, which must end in
// a slash: "/api/v1/odr/orders/17/" → "17".
func lastParam(p, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(p, prefix)
	if !ok {
		return "", false
	}
	rest, ok = strings.CutSuffix(rest, "/")
	if !ok || rest == "" || strings.Contains(rest, "/") {
		return "", false
	}
	return rest, true
}

// view renders the user's order o under its book's lock, with its id
// (unlike the placement answer of a limit order, the spec's quirk).
func (s *Server) view(o *order) orderJSON {
	b := s.books[o.market.Symbol]
	b.mu.Lock()
	j := orderResponse(o)
	b.mu.Unlock()
	id := o.id
	j.ID = &id
	return j
}

// handleListOrders serves GET /api/v1/odr/orders/: the user's orders,
// newest first, filtered by ?state= (active, closed, canceled) and
// ?symbol=.
func (s *Server) handleListOrders(w http.ResponseWriter, r *http.Request, _ string) {
	userID, ok := s.authorize(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	state, symbol := q.Get("state"), q.Get("symbol")
	if state != "" && state != stateActive && state != stateClosed && state != stateCanceled {
		writeJSON(w, http.StatusBadRequest, fieldErrors{"state": {"Select a valid choice. " + strconv.Quote(state) + " is not one of the available choices."}})
		return
	}
	os := s.accounts.of(userID)
	out := make([]orderJSON, 0, len(os))
	for i := len(os) - 1; i >= 0; i-- {
		j := s.view(os[i])
		if (state == "" || j.State == state) && (symbol == "" || j.Symbol == symbol) {
			out = append(out, j)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// handleOrderStatus serves GET /api/v1/odr/orders/{id}/ (one order) and
// /{id1},{id2}/, ids joined by commas (a list of the user's orders among
// those ids, in the list's order). A list with an element that is not an
// id is not found, as an id that is not a number is.
func (s *Server) handleOrderStatus(w http.ResponseWriter, r *http.Request, param string) {
	userID, ok := s.authorize(w, r)
	if !ok {
		return
	}
	if !strings.Contains(param, ",") {
		if o := s.ownOrder(w, userID, param); o != nil {
			writeJSON(w, http.StatusOK, s.view(o))
		}
		return
	}
	out := []orderJSON{}
	for _, f := range strings.Split(param, ",") {
		id, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			writeNotFound(w)
			return
		}
		if o := s.accounts.get(userID, id); o != nil {
			out = append(out, s.view(o))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// ownOrder returns the user's order whose id is param, or answers 404 and
// returns nil: an id that is not a number, another user's order and no
// order at all are alike not found.
func (s *Server) ownOrder(w http.ResponseWriter, userID int64, param string) *order {
	id, err := strconv.ParseInt(param, 10, 64)
	o := s.accounts.get(userID, id)
	if err != nil || o == nil {
		writeNotFound(w)
		return nil
	}
	return o
}

// handleCancel serves DELETE /api/v1/odr/orders/{id}/: the user's open
// order leaves its book and is canceled (200 with the order); another
// user's order, or none, is 404; an order no longer open is 400.
func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request, param string) {
	userID, ok := s.authorize(w, r)
	if !ok {
		return
	}
	o := s.ownOrder(w, userID, param)
	if o == nil {
		return
	}
	if !s.cancel(o) {
		writeJSON(w, http.StatusBadRequest, detail{Detail: "Order is not active.", Code: "order_not_active"})
		return
	}
	writeJSON(w, http.StatusOK, s.view(o))
}

// cancel takes o off its book, if it is still open.
func (s *Server) cancel(o *order) bool {
	b := s.books[o.market.Symbol]
	b.mu.Lock()
	defer b.mu.Unlock()
	if o.state != stateActive {
		return false
	}
	b.remove(o)
	o.state, o.closedAt = stateCanceled, s.now()
	return true
}

// remove takes o out of the book's levels or untriggered orders.
func (b *book) remove(o *order) {
	b.untriggered = slices.DeleteFunc(b.untriggered, func(x *order) bool { return x == o })
	for _, side := range []*[]*level{&b.bids, &b.asks} {
		for i, l := range *side {
			if j := slices.Index(l.orders, o); j >= 0 {
				l.orders = slices.Delete(l.orders, j, j+1)
				if len(l.orders) == 0 {
					*side = slices.Delete(*side, i, i+1)
				}
				return
			}
		}
	}
}

// handleBulk serves POST and DELETE /api/v1/odr/orders/bulk/, in the
// exchange's documented shapes. POSTed, an array of orders is placed all
// or nothing: any invalid order answers 400 with a list of per-order
// errors ({} for the valid ones), as Django REST framework's list
// serializers do; else 201 with {"orders": [the placed orders]}. Order
// ids, as an array or as {"ids": [...]} (numbers or strings), cancel the
// user's open orders among them, POSTed or DELETEd: 200 with
// {"canceled_orders": [ids], "not_canceled_orders": [ids]}, each id as a
// string. A DELETE takes only ids.
func (s *Server) handleBulk(w http.ResponseWriter, r *http.Request, _ string) {
	userID, ok := s.authorize(w, r)
	if !ok {
		return
	}
	v, ok := readValue(w, r)
	if !ok {
		return
	}
	if obj, isObj := v.(map[string]any); isObj {
		list, isList := obj["ids"].([]any)
		if !isList || len(list) == 0 {
			writeJSON(w, http.StatusBadRequest, fieldErrors{"ids": {"Expected a non-empty list of order ids."}})
			return
		}
		s.bulkCancel(w, userID, list)
		return
	}
	arr, isArr := v.([]any)
	if !isArr || len(arr) == 0 {
		writeJSON(w, http.StatusBadRequest, fieldErrors{"non_field_errors": {"Expected a non-empty list of orders or of order ids."}})
		return
	}
	if _, isObj := arr[0].(map[string]any); !isObj {
		s.bulkCancel(w, userID, arr)
		return
	}
	if r.Method == http.MethodDelete {
		writeJSON(w, http.StatusBadRequest, fieldErrors{"non_field_errors": {"Expected a list of order ids to cancel."}})
		return
	}
	s.bulkPlace(w, userID, arr)
}

// bulkCancel cancels the user's open orders among ids and answers which
// were canceled and which not (not found, another user's, no longer
// open), each id as the string of its number.
func (s *Server) bulkCancel(w http.ResponseWriter, userID int64, ids []any) {
	canceled, notCanceled := []string{}, []string{}
	for _, e := range ids {
		var text string
		switch x := e.(type) {
		case json.Number:
			text = x.String()
		case string:
			text = x
		default:
			text = fmt.Sprint(x)
		}
		id, err := strconv.ParseInt(text, 10, 64)
		if o := s.accounts.get(userID, id); err == nil && o != nil && s.cancel(o) {
			canceled = append(canceled, strconv.FormatInt(id, 10))
			continue
		}
		notCanceled = append(notCanceled, text)
	}
	writeJSON(w, http.StatusOK, map[string][]string{"canceled_orders": canceled, "not_canceled_orders": notCanceled})
}

func (s *Server) bulkPlace(w http.ResponseWriter, userID int64, arr []any) {
	orders := make([]*order, len(arr))
	errs := make([]fieldErrors, len(arr))
	bad := false
	for i, e := range arr {
		obj, isObj := e.(map[string]any)
		if !isObj {
			errs[i], bad = fieldErrors{"non_field_errors": {"Invalid data. Expected a dictionary, but got " + jsonKind(e) + "."}}, true
			continue
		}
		o, fe := s.parseOrder(obj)
		if len(fe) > 0 {
			errs[i], bad = fe, true
			continue
		}
		errs[i], orders[i] = fieldErrors{}, o
	}
	if bad {
		writeJSON(w, http.StatusBadRequest, errs)
		return
	}
	out := make([]orderJSON, 0, len(orders))
	for _, o := range orders {
		placed := s.placeFor(userID, o)
		j := orderResponse(&placed)
		id := placed.id
		j.ID = &id
		out = append(out, j)
	}
	writeJSON(w, http.StatusCreated, map[string][]orderJSON{"orders": out})
}

// placeFor places o for the user and records it, returning a snapshot.
func (s *Server) placeFor(userID int64, o *order) order {
	now := s.now()
	o.id, o.userID, o.createdAt = s.lastOrderID.Add(1), userID, now
	history := s.accounts.add(o)
	placed := s.books[o.market.Symbol].place(o, now)
	if history != nil {
		s.accounts.drop(userID, s.closedBeyond(history, s.accounts.closedKept))
	}
	return placed
}

// handleFills serves GET /api/v1/odr/fills/: the user's trades, newest
// first, optionally ?symbol=.
func (s *Server) handleFills(w http.ResponseWriter, r *http.Request, _ string) {
	userID, ok := s.authorize(w, r)
	if !ok {
		return
	}
	symbol := r.URL.Query().Get("symbol")
	out := []fill{}
	for _, f := range s.fillsOf(userID) {
		if symbol == "" || f.Symbol == symbol {
			out = append(out, f)
		}
	}
	slices.Reverse(out)
	writeJSON(w, http.StatusOK, out)
}

// fillsOf returns the user's fills in the order they happened, market by
// market.
func (s *Server) fillsOf(userID int64) []fill {
	var out []fill
	for _, m := range s.markets {
		b := s.books[m.Symbol]
		b.mu.Lock()
		for _, f := range b.fills {
			if f.userID == userID {
				out = append(out, f)
			}
		}
		b.mu.Unlock()
	}
	return out
}

// startingBalance is what every user holds of every currency before
// trading.
var startingBalance = decimal.NewFromInt(1000000)

// wallet is one currency balance of a user.
type wallet struct {
	Currency string `json:"currency"`
	Balance  string `json:"balance"`
}

// handleWallets serves GET /api/v1/wlt/wallets/: every currency's balance,
// the starting balance moved by the user's fills.
func (s *Server) handleWallets(w http.ResponseWriter, r *http.Request, _ string) {
	userID, ok := s.authorize(w, r)
	if !ok {
		return
	}
	bal := map[string]decimal.Decimal{}
	for _, c := range s.currencies {
		bal[c.Code] = startingBalance
	}
	for _, f := range s.fillsOf(userID) {
		sign := decimal.NewFromInt(1)
		if f.Side == sell {
			sign = sign.Neg()
		}
		bal[f.market.Base] = bal[f.market.Base].Add(f.base.Mul(sign))
		bal[f.market.Quote] = bal[f.market.Quote].Sub(f.quote.Mul(sign))
	}
	out := make([]wallet, 0, len(s.currencies))
	for _, c := range s.currencies {
		out = append(out, wallet{Currency: c.Code, Balance: bal[c.Code].String()})
	}
	writeJSON(w, http.StatusOK, out)
}

// ticker is one market's summary.
type ticker struct {
	Symbol  string  `json:"symbol"`
	Price   *string `json:"price"` // the last trade's, or null
	BestBid *string `json:"best_bid"`
	BestAsk *string `json:"best_ask"`
}

// handleTickers serves GET /api/v1/mkt/tickers/.
func (s *Server) handleTickers(w http.ResponseWriter, _ *http.Request, _ string) {
	out := make([]ticker, 0, len(s.markets))
	for _, m := range s.markets {
		b := s.books[m.Symbol]
		t := ticker{Symbol: m.Symbol}
		b.mu.Lock()
		if len(b.matches) > 0 {
			p := b.matches[(b.next-1+len(b.matches))%len(b.matches)].Price
			t.Price = &p
		}
		if len(b.bids) > 0 {
			p := b.bids[0].price.StringFixed(int32(m.PricePrecision))
			t.BestBid = &p
		}
		if len(b.asks) > 0 {
			p := b.asks[0].price.StringFixed(int32(m.PricePrecision))
			t.BestAsk = &p
		}
		b.mu.Unlock()
		out = append(out, t)
	}
	writeJSON(w, http.StatusOK, out)
}

// handleOrderBook serves GET /api/v1/mth/orderbook/{symbol}/: the price
// levels of both sides, best first, as [price, amount] string pairs.
func (s *Server) handleOrderBook(w http.ResponseWriter, _ *http.Request, symbol string) {
	b, ok := s.books[symbol]
	if !ok {
		writeNotFound(w)
		return
	}
	side := func(levels []*level) [][2]string {
		out := make([][2]string, 0, len(levels))
		for _, l := range levels {
			amount := decimal.Zero
			for _, o := range l.orders {
				amount = amount.Add(o.remaining())
			}
			out = append(out, [2]string{l.price.StringFixed(int32(b.market.PricePrecision)), formatAmount(amount, b.market.BaseAmountPrecision)})
		}
		return out
	}
	b.mu.Lock()
	body := map[string]any{"symbol": symbol, "bids": side(b.bids), "asks": side(b.asks)}
	b.mu.Unlock()
	writeJSON(w, http.StatusOK, body)
}

// recordFill notes a trade of a user's order (not of seeded liquidity),
// under the book's lock.
func (b *book) recordFill(o *order, maker bool, tradeID string, price, qty, quote decimal.Decimal, now time.Time) {
	if o.userID == 0 {
		return
	}
	b.fills = append(b.fills, fill{
		ID: tradeID, OrderID: o.id, Symbol: b.market.Symbol, Side: o.side,
		Price:       price.StringFixed(int32(b.market.PricePrecision)),
		BaseAmount:  formatAmount(qty, b.market.BaseAmountPrecision),
		QuoteAmount: formatAmount(quote, b.market.QuoteAmountPrecision),
		Maker:       maker, CreatedAt: formatTime(now),
		userID: o.userID, base: qty, quote: quote, market: b.market,
	})
}
