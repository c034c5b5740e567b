package sim

import (
	"github.com/shopspring/decimal"
)

// Market is one trading market as the markets endpoint lists it. The
// precisions are numbers of decimal places; JSON writes them as integer
// strings, as the spec shows.
type Market struct {
	// Symbol is "<BASE>_<QUOTE>", such as "BTC_USDT".
	Symbol string `json:"symbol"`
	// Name is "<BaseName>/<QuoteName>", such as "Bitcoin/Tether".
	Name string `json:"name"`
	// Base and Quote are the currency codes.
	Base  string `json:"base"`
	Quote string `json:"quote"`
	// Tradable is false for a market that accepts no orders.
	Tradable bool `json:"tradable"`
	// PricePrecision is the decimal places of a price; a price must be a
	// positive multiple of 10^-PricePrecision.
	PricePrecision int `json:"price_precision,string"`
	// BaseAmountPrecision is the decimal places of a base amount.
	BaseAmountPrecision int `json:"base_amount_precision,string"`
	// QuoteAmountPrecision is the decimal places of a quote amount.
	QuoteAmountPrecision int `json:"quote_amount_precision,string"`
}

// currency is one currency as the currencies endpoint lists it.
type currency struct {
	Code      string `json:"currency"`
	Name      string `json:"name"`
	Tradable  bool   `json:"tradable"`
	Precision int    `json:"precision,string"`
}

// seedCurrencies returns the currencies of the seeded markets.
func seedCurrencies() []currency {
	return []currency{
		{"BTC", "Bitcoin", true, 8},
		{"ETH", "Ethereum", true, 8},
		{"USDT", "Tether", true, 6},
		{"IRT", "Toman", true, 0},
		{"LUNC", "Terra Classic", false, 2},
	}
}

// seedMarkets returns the market catalogue. LUNC_USDT is delisted (not
// tradable); BTC_IRT has 8 base decimals.
func seedMarkets() []Market {
	cur := make(map[string]string)
	for _, c := range seedCurrencies() {
		cur[c.Code] = c.Name
	}
	mk := func(base, quote string, tradable bool, price, baseAmt, quoteAmt int) Market {
		return Market{
			Symbol: base + "_" + quote, Name: cur[base] + "/" + cur[quote],
			Base: base, Quote: quote, Tradable: tradable,
			PricePrecision: price, BaseAmountPrecision: baseAmt, QuoteAmountPrecision: quoteAmt,
		}
	}
	return []Market{
		mk("BTC", "USDT", true, 2, 6, 2),
		mk("ETH", "USDT", true, 2, 4, 2),
		mk("BTC", "IRT", true, 0, 8, 0),
		mk("USDT", "IRT", true, 0, 2, 0),
		mk("ETH", "BTC", true, 6, 4, 8),
		mk("LUNC", "USDT", false, 8, 2, 4),
	}
}

// seedBooks rests a few orders of a market maker (user 0, order id 0) on
// both sides of every tradable market: asks from a reference ask price
// upwards, bids from a reference bid price downwards, five levels each.
func (s *Server) seedBooks() {
	type ladder struct{ ask, bid, step, amount string }
	ladders := map[string]ladder{
		"BTC_USDT": {"65000.00", "64000.00", "10.00", "0.5"},
		"ETH_USDT": {"3200.00", "3150.00", "1.00", "5"},
		"BTC_IRT":  {"6000000000", "5950000000", "1000000", "0.05"},
		"USDT_IRT": {"92000", "91500", "10", "1000"},
		"ETH_BTC":  {"0.049500", "0.049000", "0.000010", "10"},
	}
	now := s.now()
	for sym, l := range ladders {
		b := s.books[sym]
		ask, bid := decimal.RequireFromString(l.ask), decimal.RequireFromString(l.bid)
		step, amount := decimal.RequireFromString(l.step), decimal.RequireFromString(l.amount)
		for i := range 5 {
			off := step.Mul(decimal.NewFromInt(int64(i)))
			for _, o := range []*order{
				{side: sell, price: decimal.NewNullDecimal(ask.Add(off))},
				{side: buy, price: decimal.NewNullDecimal(bid.Sub(off))},
			} {
				o.market, o.typ, o.baseAmount, o.createdAt = b.market, typeLimit, amount, now
				b.place(o, now)
			}
		}
	}
}
