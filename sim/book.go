package sim

import (
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/shopspring/decimal"
)

// Order sides, types and states as the API writes them.
const (
	buy  = "buy"
	sell = "sell"

	typeLimit     = "limit"
	typeMarket    = "market"
	typeStopLimit = "stop_limit"
	typeOCO       = "oco"

	// stateActive is an open order: resting in the book, or an untriggered
	// stop_limit or oco order.
	stateActive = "active"
	// stateClosed is a fully filled order.
	stateClosed = "closed"
	// stateCanceled is a market order whose unfilled remainder was
	// cancelled because the book ran out; it may have partly filled.
	stateCanceled = "canceled"
)

// order is one order. Once placed it is owned by its book and read or
// written only under the book's mutex.
type order struct {
	id     int64 // 0 for seeded liquidity
	userID int64 // 0 for seeded liquidity
	market Market
	typ    string
	side   string

	price       decimal.NullDecimal // limit price; unset for market orders
	stopPrice   decimal.NullDecimal // stop_limit and oco only
	ocoTarget   decimal.NullDecimal // oco only
	baseAmount  decimal.Decimal
	quoteAmount decimal.NullDecimal // as sent by the client
	identifier  *string

	state       string
	createdAt   time.Time
	closedAt    time.Time // zero while open
	dealedBase  decimal.Decimal
	dealedQuote decimal.Decimal
}

func (o *order) remaining() decimal.Decimal { return o.baseAmount.Sub(o.dealedBase) }

// level is the FIFO queue of resting orders at one price.
type level struct {
	price  decimal.Decimal
	orders []*order
}

// match is one trade as the matches endpoint lists it.
type match struct {
	ID          string `json:"id"`
	Price       string `json:"price"`
	BaseAmount  string `json:"base_amount"`
	QuoteAmount string `json:"quote_amount"`
	Side        string `json:"side"` // the taker's side
}

// book is the price-time priority order book of one market.
type book struct {
	market Market

	mu          sync.Mutex
	bids        []*level // highest price first
	asks        []*level // lowest price first
	untriggered []*order // stop_limit and oco orders; they never trigger
	tradeSeq    int64
	matches     []match // ring buffer of at most maxMatches entries
	fills       []fill  // trades of users' orders, oldest first
	next        int     // index in matches of the next write
	maxMatches  int
}

func newBook(m Market, maxMatches int) *book {
	return &book{market: m, maxMatches: maxMatches}
}

// place runs o against the book and returns a snapshot of it, taken under
// the book's lock. A limit order fills against the opposite side at the
// makers' prices while it crosses and rests its remainder; a market order
// fills up to its base amount and cancels the remainder; stop_limit and
// oco orders rest untriggered. o.id, o.createdAt and the request fields
// must be set.
func (b *book) place(o *order, now time.Time) order {
	b.mu.Lock()
	defer b.mu.Unlock()
	o.state = stateActive
	if o.typ == typeStopLimit || o.typ == typeOCO {
		b.untriggered = append(b.untriggered, o)
		return *o
	}
	b.fill(o, now)
	switch {
	case o.remaining().IsZero():
		o.state, o.closedAt = stateClosed, now
	case o.typ == typeMarket:
		o.state, o.closedAt = stateCanceled, now
	default:
		b.rest(o)
	}
	return *o
}

// fill matches taker t against the opposite side of the book.
func (b *book) fill(t *order, now time.Time) {
	opp := &b.asks
	if t.side == sell {
		opp = &b.bids
	}
	for t.remaining().IsPositive() && len(*opp) > 0 {
		lvl := (*opp)[0]
		if t.typ == typeLimit && !crosses(t, lvl.price) {
			return
		}
		m := lvl.orders[0]
		qty := decimal.Min(t.remaining(), m.remaining())
		quote := qty.Mul(lvl.price).Round(int32(b.market.QuoteAmountPrecision))
		for _, o := range []*order{t, m} {
			o.dealedBase = o.dealedBase.Add(qty)
			o.dealedQuote = o.dealedQuote.Add(quote)
		}
		b.tradeSeq++
		tradeID := strconv.FormatInt(b.tradeSeq, 10) + "_" + strconv.FormatInt(t.id, 10)
		b.recordFill(t, false, tradeID, lvl.price, qty, quote, now)
		b.recordFill(m, true, tradeID, lvl.price, qty, quote, now)
		b.addMatch(match{
			ID:          tradeID,
			Price:       lvl.price.StringFixed(int32(b.market.PricePrecision)),
			BaseAmount:  formatAmount(qty, b.market.BaseAmountPrecision),
			QuoteAmount: formatAmount(quote, b.market.QuoteAmountPrecision),
			Side:        t.side,
		})
		if m.remaining().IsZero() {
			m.state, m.closedAt = stateClosed, now
			lvl.orders[0] = nil
			lvl.orders = lvl.orders[1:]
			if len(lvl.orders) == 0 {
				(*opp)[0] = nil
				*opp = (*opp)[1:]
			}
		}
	}
}

// crosses reports whether limit order t can trade with a resting order at
// price p on the opposite side.
func crosses(t *order, p decimal.Decimal) bool {
	if t.side == buy {
		return t.price.Decimal.GreaterThanOrEqual(p)
	}
	return t.price.Decimal.LessThanOrEqual(p)
}

// rest appends o to the end of the queue at its price, creating the level
// if needed.
func (b *book) rest(o *order) {
	levels := &b.asks
	worse := func(l *level) bool { return l.price.GreaterThanOrEqual(o.price.Decimal) }
	if o.side == buy {
		levels = &b.bids
		worse = func(l *level) bool { return l.price.LessThanOrEqual(o.price.Decimal) }
	}
	i := sort.Search(len(*levels), func(i int) bool { return worse((*levels)[i]) })
	if i < len(*levels) && (*levels)[i].price.Equal(o.price.Decimal) {
		(*levels)[i].orders = append((*levels)[i].orders, o)
		return
	}
	*levels = slices.Insert(*levels, i, &level{price: o.price.Decimal, orders: []*order{o}})
}

func (b *book) addMatch(m match) {
	if len(b.matches) < b.maxMatches {
		b.matches = append(b.matches, m)
	} else {
		b.matches[b.next] = m
	}
	b.next = (b.next + 1) % b.maxMatches
}

// recentMatches returns the market's recent matches, newest first.
func (b *book) recentMatches() []match {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(b.matches)
	out := make([]match, 0, n)
	for i := 1; i <= n; i++ {
		out = append(out, b.matches[(b.next-i+n)%n])
	}
	return out
}

// formatAmount writes d with exactly prec decimal places, except that zero
// is written "0".
func formatAmount(d decimal.Decimal, prec int) string {
	if d.IsZero() {
		return "0"
	}
	return d.StringFixed(int32(prec))
}
