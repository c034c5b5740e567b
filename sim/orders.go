package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/shopspring/decimal"
)

// timeLayout is ISO 8601 with microseconds and a numeric UTC offset.
const timeLayout = "2006-01-02T15:04:05.000000-07:00"

// maxIntegerDigits bounds the integer part of every decimal parameter.
const maxIntegerDigits = 20

// orderJSON is the Order resource. ID is omitted from the response to a
// limit order, as the spec shows.
type orderJSON struct {
	ID                *int64  `json:"id,omitempty"`
	Symbol            string  `json:"symbol"`
	Type              string  `json:"type"`
	Side              string  `json:"side"`
	Price             *string `json:"price"`
	StopPrice         *string `json:"stop_price"`
	OCOTargetPrice    *string `json:"oco_target_price"`
	BaseAmount        string  `json:"base_amount"`
	QuoteAmount       string  `json:"quote_amount"`
	Identifier        *string `json:"identifier"`
	State             string  `json:"state"`
	CreatedAt         string  `json:"created_at"`
	ClosedAt          *string `json:"closed_at"`
	DealedBaseAmount  string  `json:"dealed_base_amount"`
	DealedQuoteAmount string  `json:"dealed_quote_amount"`
	ReqToCancel       bool    `json:"req_to_cancel"`
	Commission        string  `json:"commission"`
}

// handlePlaceOrder serves POST /api/v1/odr/orders/: authenticate, validate
// the body against the market catalogue, match, answer 201 with the order.
func (s *Server) handlePlaceOrder(w http.ResponseWriter, r *http.Request, _ string) {
	userID, ok := s.authorize(w, r)
	if !ok {
		return
	}
	obj, ok := readObject(w, r)
	if !ok {
		return
	}
	o, errs := s.parseOrder(obj)
	if len(errs) > 0 {
		writeJSON(w, http.StatusBadRequest, errs)
		return
	}
	placed := s.placeFor(userID, o)
	writeJSON(w, http.StatusCreated, orderResponse(&placed))
}

// parseOrder validates an order request body. It returns the order, or the
// field errors when the body is invalid.
func (s *Server) parseOrder(obj map[string]any) (*order, fieldErrors) {
	errs := fieldErrors{}
	o := &order{}
	var haveMarket bool
	if sym, ok := requiredString(obj, "symbol", errs); ok {
		b, found := s.books[sym]
		switch {
		case !found:
			errs.add("symbol", fmt.Sprintf("Market %q does not exist.", sym))
		case !b.market.Tradable:
			errs.add("symbol", fmt.Sprintf("Market %q is not tradable.", sym))
		default:
			o.market, haveMarket = b.market, true
		}
	}
	o.typ, _ = choiceField(obj, "type", errs, typeLimit, typeMarket, typeStopLimit, typeOCO)
	o.side, _ = choiceField(obj, "side", errs, buy, sell)
	if id, present, _ := stringField(obj, "identifier", errs); present {
		o.identifier = &id
	}

	// Each decimal parameter, the order types that use it, whether those
	// types require it, and the precision it is checked against once the
	// market is known. A parameter sent with a type that does not use it
	// is validated and then ignored.
	m := o.market
	var base decimal.NullDecimal
	priced := []string{typeLimit, typeStopLimit, typeOCO}
	params := []struct {
		name     string
		dst      *decimal.NullDecimal
		types    []string // order types that use it; nil means all
		required bool
		places   int
		price    bool // must be a multiple of the price increment
	}{
		{"base_amount", &base, nil, true, m.BaseAmountPrecision, false},
		{"quote_amount", &o.quoteAmount, nil, false, m.QuoteAmountPrecision, false},
		{"price", &o.price, priced, true, m.PricePrecision, true},
		{"stop_price", &o.stopPrice, []string{typeStopLimit, typeOCO}, true, m.PricePrecision, true},
		{"oco_target_price", &o.ocoTarget, []string{typeOCO}, true, m.PricePrecision, true},
	}
	for _, p := range params {
		used := p.types == nil || slices.Contains(p.types, o.typ)
		raw, found := obj[p.name]
		if !found || raw == nil {
			if p.required && used {
				if found {
					errs.add(p.name, "This field may not be null.")
				} else {
					errs.add(p.name, "This field is required.")
				}
			}
			continue
		}
		d, msg := parseDecimal(raw)
		if msg == "" && haveMarket && !d.Truncate(int32(p.places)).Equal(d) {
			msg = fmt.Sprintf("Ensure that there are no more than %d decimal places.", p.places)
			if p.price {
				msg = fmt.Sprintf("Ensure this value is a multiple of %s.", decimal.New(1, -int32(p.places)))
			}
		}
		if msg != "" {
			errs.add(p.name, msg)
			continue
		}
		if used {
			*p.dst = decimal.NewNullDecimal(d)
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	o.baseAmount = base.Decimal
	return o, nil
}

// parseDecimal reads a positive decimal sent as a JSON string or number.
// It returns the value, or a DRF-style message when it is invalid.
func parseDecimal(raw any) (decimal.Decimal, string) {
	var s string
	switch v := raw.(type) {
	case string:
		s = v
	case json.Number:
		s = v.String()
	default:
		return decimal.Decimal{}, "A valid number is required."
	}
	d, err := decimal.NewFromString(s)
	switch {
	case err != nil:
		return d, "A valid number is required."
	case d.Abs().GreaterThanOrEqual(decimal.New(1, maxIntegerDigits)):
		return d, fmt.Sprintf("Ensure that there are no more than %d digits before the decimal point.", maxIntegerDigits)
	case !d.IsPositive():
		return d, "Ensure this value is greater than 0."
	}
	return d, ""
}

// choiceField reads a required string field that must be one of choices.
func choiceField(obj map[string]any, name string, errs fieldErrors, choices ...string) (string, bool) {
	v, ok := requiredString(obj, name, errs)
	if ok && !slices.Contains(choices, v) {
		errs.add(name, fmt.Sprintf("%q is not a valid choice.", v))
		return "", false
	}
	return v, ok
}

// orderResponse renders o as the Order resource. Prices are written at the
// market's price precision, amounts at the base or quote precision, and a
// zero amount as "0". The quote amount of a priced order is exactly price ×
// base_amount, as the spec says: written at the quote precision, or with
// more places when the product needs them. That of a market order is the
// quote amount sent, or else the quote amount dealed.
func orderResponse(o *order) orderJSON {
	m := o.market
	price := func(d decimal.NullDecimal) *string {
		if !d.Valid {
			return nil
		}
		s := d.Decimal.StringFixed(int32(m.PricePrecision))
		return &s
	}
	var quote string
	switch {
	case o.price.Valid:
		quote = formatExact(o.price.Decimal.Mul(o.baseAmount), m.QuoteAmountPrecision)
	case o.quoteAmount.Valid:
		quote = formatAmount(o.quoteAmount.Decimal, m.QuoteAmountPrecision)
	default:
		quote = formatAmount(o.dealedQuote, m.QuoteAmountPrecision)
	}
	commission := o.dealedQuote.Mul(decimal.New(1, -3)).Round(int32(m.QuoteAmountPrecision))
	j := orderJSON{
		Symbol:            m.Symbol,
		Type:              o.typ,
		Side:              o.side,
		Price:             price(o.price),
		StopPrice:         price(o.stopPrice),
		OCOTargetPrice:    price(o.ocoTarget),
		BaseAmount:        formatAmount(o.baseAmount, m.BaseAmountPrecision),
		QuoteAmount:       quote,
		Identifier:        o.identifier,
		State:             o.state,
		CreatedAt:         formatTime(o.createdAt),
		DealedBaseAmount:  formatAmount(o.dealedBase, m.BaseAmountPrecision),
		DealedQuoteAmount: formatAmount(o.dealedQuote, m.QuoteAmountPrecision),
		Commission:        formatAmount(commission, m.QuoteAmountPrecision),
	}
	if o.typ != typeLimit {
		id := o.id
		j.ID = &id
	}
	if !o.closedAt.IsZero() {
		s := formatTime(o.closedAt)
		j.ClosedAt = &s
	}
	return j
}

// formatExact writes d with at least minPlaces decimal places and as many
// more as it needs to be exact.
func formatExact(d decimal.Decimal, minPlaces int) string {
	places := int32(minPlaces)
	for !d.Truncate(places).Equal(d) {
		places++
	}
	return d.StringFixed(places)
}

func formatTime(t time.Time) string { return t.UTC().Format(timeLayout) }
