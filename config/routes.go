package config

import "time"

// DefaultRoutes returns the built-in route table: the trading API's family
// of endpoints (docs/configuration.md, "The default route table"), each
// named for what it does. Routes are tried in this order and the first
// whose path and method match serves the request, so a method no route
// names on a path falls through to a later route, and finally to
// "default".
//
//   - Orders, fills and wallets (everything under /api/v1/odr/ and
//     /api/v1/wlt/) require a token at the edge and are counted per
//     token: placement against the spec's 5400/h order allowance (single
//     and bulk alike: a bulk of k orders costs k), cancels (single and
//     bulk) against their own limit so that a spent order allowance never
//     blocks one, reads against a read limit.
//   - Public reads (markets, currencies, tickers, order book) are counted
//     like the spec's market list: per address without a token, per token
//     with one. Recent matches keep the spec's 60/min.
//   - authenticate and refresh_token are counted per address, strictly:
//     20 a minute and 100 an hour of login attempts per address is ample
//     for people and bots that keep their tokens, and slows credential
//     stuffing to a crawl.
func DefaultRoutes() []Route {
	anonDay := Rate{N: 10000, Period: 24 * time.Hour}
	tokenMin := Rate{N: 200, Period: time.Minute}
	orders := Rate{N: 5400, Period: time.Hour}
	cancels := Rate{N: 16200, Period: time.Hour}
	reads := Rate{N: 600, Period: time.Minute}
	token := func(r Rate) []Limit {
		return []Limit{{Name: KeyToken, Key: KeyToken, When: WhenAlways, Rate: r, Burst: int(r.N)}}
	}
	publicRead := func(name, match string) Route {
		return Route{
			Name: name, Match: mustMatch(match), Auth: AuthOptional, Priority: PriorityMarketData,
			Limits: []Limit{
				{Name: KeyAddress, Key: KeyAddress, When: WhenAnon, Rate: anonDay, Burst: int(anonDay.N)},
				{Name: KeyToken, Key: KeyToken, When: WhenToken, Rate: tokenMin, Burst: int(tokenMin.N)},
			},
		}
	}
	private := func(name, match, priority string, r Rate) Route {
		return Route{Name: name, Match: mustMatch(match), Auth: AuthRequired, Priority: priority, Limits: token(r)}
	}
	place := private("place_order", "POST /api/v1/odr/orders/", PriorityPlace, orders)
	place.Validate = ValidateOrd
	bulk := Route{
		Name: "bulk_orders", Match: mustMatch("POST /api/v1/odr/orders/bulk/"), Auth: AuthRequired,
		Validate: ValidateBulk, Bulk: BulkRoute{Orders: "place_order", Cancels: "cancel_order"},
		Priority: PriorityPlace, // a bulk cancel is a cancel
	}
	return []Route{
		place,
		bulk,
		private("cancel_order", "DELETE /api/v1/odr/orders/{id}/", PriorityCancel, cancels),
		private("list_orders", "GET /api/v1/odr/orders/", PriorityStatus, reads),
		private("get_orders", "GET /api/v1/odr/orders/{ids}/", PriorityStatus, reads),
		private("list_fills", "GET /api/v1/odr/fills/", PriorityPrivateRead, reads),
		private("orders_other", "/api/v1/odr/{rest...}", PriorityPrivateRead, reads),
		private("list_wallets", "GET /api/v1/wlt/wallets/", PriorityPrivateRead, reads),
		private("wallets_other", "/api/v1/wlt/{rest...}", PriorityPrivateRead, reads),
		publicRead("list_markets", "GET /api/v1/mkt/markets/"),
		publicRead("list_currencies", "GET /api/v1/mkt/currencies/"),
		publicRead("list_tickers", "GET /api/v1/mkt/tickers/"),
		publicRead("order_book", "GET /api/v1/mth/orderbook/{symbol}/"),
		{
			Name: "list_matches", Match: mustMatch("GET /api/v1/mth/matches/{symbol}/"), Auth: AuthOptional, Priority: PriorityMarketData,
			Limits: []Limit{{Name: KeyAddress, Key: KeyAddress, When: WhenAlways, Rate: Rate{N: 60, Period: time.Minute}, Burst: 60}},
		},
		{
			Name: "authenticate", Match: mustMatch("POST /api/v1/usr/authenticate/"), Auth: AuthNone, Priority: PriorityPrivateRead,
			Limits: []Limit{
				{Name: "address_minute", Key: KeyAddress, When: WhenAlways, Rate: Rate{N: 20, Period: time.Minute}, Burst: 20},
				{Name: "address_hour", Key: KeyAddress, When: WhenAlways, Rate: Rate{N: 100, Period: time.Hour}, Burst: 100},
			},
		},
		{
			Name: "refresh_token", Match: mustMatch("POST /api/v1/usr/refresh_token/"), Auth: AuthNone, Priority: PriorityPrivateRead,
			Limits: []Limit{{Name: KeyAddress, Key: KeyAddress, When: WhenAlways, Rate: Rate{N: 60, Period: time.Minute}, Burst: 60}},
		},
		{
			Name: "default", Match: Match{Path: "*"}, Auth: AuthNone, Priority: PriorityMarketData,
			Limits: []Limit{{Name: KeyAddress, Key: KeyAddress, When: WhenAlways, Rate: Rate{N: 600, Period: time.Minute}, Burst: 600}},
		},
	}
}

// mustMatch parses a matcher of the built-in table.
func mustMatch(s string) Match {
	var m Match
	if err := m.UnmarshalText([]byte(s)); err != nil {
		panic(err)
	}
	return m
}

// Route returns the route named name, or nil.
func (c *Config) Route(name string) *Route {
	for i := range c.Routes {
		if c.Routes[i].Name == name {
			return &c.Routes[i]
		}
	}
	return nil
}
