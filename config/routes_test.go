package config

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBulkRouteRules: the settings of bulk routes (POST: placements and
// cancels; DELETE: cancels only) and of order id lists in paths.
func TestBulkRouteRules(t *testing.T) {
	tests := []struct {
		name string
		mut  func(c *Config)
		want []string
	}{
		{"defaults", func(c *Config) {}, nil},
		{"bulk settings elsewhere", func(c *Config) { c.Route("place_order").Bulk.Orders = "x" }, []string{`routes[0].bulk: only for a route with validate: order_bulk`}},
		{"unknown and missing routes", func(c *Config) { c.Route("bulk_orders").Bulk = BulkRoute{Orders: "nope"} }, []string{
			`routes[1].bulk.orders: no route named "nope"`,
			`routes[1].bulk.cancels: required: the route whose limits a bulk is charged against`}},
		{"itself, no token limit", func(c *Config) {
			c.Route("bulk_orders").Bulk = BulkRoute{Orders: "bulk_orders", Cancels: "list_matches"}
		}, []string{
			`routes[1].bulk.orders: route "bulk_orders" is a bulk route; name the route of single requests`,
			`routes[1].bulk.cancels: route "list_matches" has no token limit to charge`}},
		{"own limits, no token", func(c *Config) {
			b := c.Route("bulk_orders")
			b.Auth = AuthOptional
			b.Limits = []Limit{{Key: KeyAddress, Rate: Rate{N: 1, Period: time.Second}}}
		}, []string{
			`routes[1].auth: a order_bulk route must require a token, so that the token limits it is charged against apply`,
			`routes[1].limits: a order_bulk route has no limits of its own: it is charged against bulk.orders and bulk.cancels`}},
		{"max orders", func(c *Config) { c.Validation.Bulk.MaxOrders = 0 }, []string{`validation.bulk.max_orders: must be from 1 to 1000, got 0`}},
		{"a DELETE bulk route that places", func(c *Config) { c.Route("bulk_cancel").Bulk.Orders = "place_order" }, []string{
			`routes[2].bulk.orders: a DELETE route places no orders: omit bulk.orders (an array of orders sent to it is refused)`}},
		{"a DELETE bulk route without cancels", func(c *Config) { c.Route("bulk_cancel").Bulk.Cancels = "" }, []string{
			`routes[2].bulk.cancels: required: the route whose limits a bulk is charged against`}},
		{"a bulk route neither POST nor DELETE", func(c *Config) { c.Route("bulk_cancel").Match = Match{Method: "PUT", Path: "/api/v1/odr/orders/bulk/"} }, []string{
			`routes[2].validate: "order_bulk" needs a POST route (or a DELETE route, which only cancels), but the route matches "PUT /api/v1/odr/orders/bulk/"`,
			`routes[2].bulk.orders: required: the route whose limits a bulk is charged against`}},
		{"order ids without a last parameter", func(c *Config) {
			c.Route("list_orders").Validate = ValidateIDs
			c.Route("orders_other").Validate = ValidateIDs
		}, []string{
			`routes[4].validate: "order_ids" checks the path's last parameter, but "/api/v1/odr/orders/" does not end in one such as {ids}`,
			`routes[7].validate: "order_ids" checks the path's last parameter, but "/api/v1/odr/{rest...}" does not end in one such as {ids}`}},
		{"order ids on any method", func(c *Config) { c.Route("order_book").Validate = ValidateIDs }, nil},
		{"a refusing route that would forward", func(c *Config) {
			r := c.Route("orders_refused")
			r.Auth, r.Validate, r.Timeout, r.Service, r.MaxInFlight = AuthRequired, ValidateIDs, time.Second, "x", 2
			r.Limits = []Limit{{Key: KeyToken, Rate: Rate{N: 1, Period: time.Second}}}
		}, []string{
			`routes[8].validate: "order_ids" checks the path's last parameter, but "/api/v1/odr/{rest...}" does not end in one such as {ids}`,
			`routes[8].auth: a route with refuse: true forwards nothing: omit auth`,
			`routes[8].validate: a route with refuse: true forwards nothing: omit validate`,
			`routes[8].limits: a route with refuse: true forwards nothing: omit limits`,
			`routes[8].timeout: a route with refuse: true forwards nothing: omit timeout`,
			`routes[8].service: a route with refuse: true forwards nothing: omit service`,
			`routes[8].max_in_flight: a route with refuse: true forwards nothing: omit max_in_flight`,
			`routes[8].service: no service "x" in upstream.services`}},
		{"the default route refusing", func(c *Config) { c.Route("default").Refuse, c.Route("default").Limits = true, nil }, []string{
			`routes[19].refuse: the default route "*" cannot refuse: without it, a request no route matches is answered 404 (or 405)`}},
		{"a refusing route of one method", func(c *Config) {
			c.Routes[8].Match = Match{Method: "DELETE", Path: "/api/v1/odr/{rest...}"}
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.mut(c)
			var got []string
			if err := c.Validate(); err != nil {
				for _, e := range err.(Errors) {
					got = append(got, e.Error())
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestDefaultLimitNames(t *testing.T) {
	tests := []struct {
		limits string
		want   []string
	}{
		{"[{key: address, rate: 1/1s}]", []string{"address"}},
		{"[{key: address, when: anonymous, rate: 1/1s}, {key: token, when: token, rate: 1/1s}]", []string{"address", "token"}},
		{"[{key: address, when: anonymous, rate: 1/1s}, {key: address, rate: 1/1m}]", []string{"address_anonymous", "address_always"}},
		{"[{key: address, rate: 1/1s}, {key: address, rate: 1/1m}, {key: address, when: token, rate: 1/1h}]", []string{"address_always_0", "address_always_1", "address_token"}},
	}
	for _, tt := range tests {
		t.Run(tt.limits, func(t *testing.T) {
			c, err := Parse("t.yaml", []byte("routes:\n  - {name: a, match: /a/, auth: optional, limits: "+tt.limits+"}\n"), env(nil))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, l := range c.Routes[0].Limits {
				got = append(got, l.Name)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("names %q, want %q", got, tt.want)
			}
		})
	}
}

// TestRouteLimitsCap: a route has at most MaxRouteLimits limits, the
// allowance of duplicate answers exgate adds to an order route included;
// more are refused at load, at the route's limits, rather than enforced
// without being reported, counted or refunded.
func TestRouteLimitsCap(t *testing.T) {
	limits := func(n int) []Limit {
		var out []Limit
		for i := range n {
			out = append(out, Limit{Name: "l" + strconv.Itoa(i), Key: KeyToken, When: WhenAlways, Rate: Rate{N: int64(100 + i), Period: time.Minute}})
		}
		return out
	}
	routeIndex := func(c *Config, name string) int {
		return slices.IndexFunc(c.Routes, func(r Route) bool { return r.Name == name })
	}
	tests := []struct {
		name  string
		route string
		n     int
		mut   func(c *Config)
		want  string // the problem at routes[i].limits, "" for none
	}{
		{"at the cap", "list_orders", MaxRouteLimits, nil, ""},
		{"over the cap", "list_orders", MaxRouteLimits + 1, nil,
			"9 limits: a route has at most 8 (its RateLimit headers, metrics and refunds carry each one); merge limits or move some to another route"},
		{"an order route with no room for its allowance of duplicate answers", "place_order", MaxRouteLimits, nil,
			"8 limits and the allowance of duplicate answers exgate adds to a route orders are placed on (idempotency.duplicate_answers) make 9: a route has at most 8 (its RateLimit headers, metrics and refunds carry each one); merge limits"},
		{"an order route one below the cap", "place_order", MaxRouteLimits - 1, nil, ""},
		{"an order route without duplicate protection", "place_order", MaxRouteLimits, func(c *Config) { c.Idempotency.Enabled = false }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			c.Route(tt.route).Limits = limits(tt.n)
			if tt.mut != nil {
				tt.mut(c)
			}
			at := "routes[" + strconv.Itoa(routeIndex(c, tt.route)) + "].limits: "
			var got []string
			if err := c.Validate(); err != nil {
				for _, e := range err.(Errors) {
					if strings.HasPrefix(e.Error(), at) {
						got = append(got, strings.TrimPrefix(e.Error(), at))
					} else {
						t.Errorf("unexpected problem: %v", e)
					}
				}
			}
			var want []string
			if tt.want != "" {
				want = []string{tt.want}
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("problems at %s\n%q\nwant\n%q", at, got, want)
			}
		})
	}
}

// TestRefuseFromYAML: an operator's table keeps the deny-by-default and
// serves a write of its own above it, with its own limits; a refusing
// route that would also forward is refused at load, by key, from YAML
// and from the environment.
func TestRefuseFromYAML(t *testing.T) {
	runParseCases(t, []parseCase{
		{name: "a write route above the refusal",
			yaml: "upstream: {url: 'http://127.0.0.1:9000'}\nroutes:\n" +
				"  - {name: amend, match: 'PATCH /api/v1/odr/orders/{id}/', auth: required, limits: [{key: token, rate: 60/1m}]}\n" +
				"  - {name: reads, match: 'GET /api/v1/odr/{rest...}', auth: required, limits: [{key: token, rate: 600/1m}]}\n" +
				"  - {name: writes, match: '/api/v1/odr/{rest...}', refuse: true}\n  - {name: default, match: '*'}\n",
			check: func(t *testing.T, c *Config) {
				if c.Routes[0].Refuse || !c.Routes[2].Refuse || c.Routes[2].Auth != AuthNone {
					t.Errorf("routes = %+v", c.Routes)
				}
			}},
		{name: "refuse from the environment",
			yaml:   "upstream: {url: 'http://127.0.0.1:9000'}\nroutes:\n  - {name: writes, match: '/x/{rest...}'}\n",
			getenv: func(k string) (string, bool) { return "true", k == "EXGATE_ROUTES_0_REFUSE" },
			check: func(t *testing.T, c *Config) {
				if !c.Routes[0].Refuse {
					t.Error("EXGATE_ROUTES_0_REFUSE not read")
				}
			}},
		{name: "a refusing route that forwards",
			yaml: "upstream: {url: 'http://127.0.0.1:9000'}\nroutes:\n" +
				"  - {name: writes, match: '/x/{rest...}', refuse: true, auth: required, limits: [{key: token, rate: 1/1s}], split: [{service: default, weight: 1}, {service: default, weight: 1}]}\n" +
				"  - {name: all, match: '*', refuse: true}\n",
			paths: []string{"routes[0].auth", "routes[0].limits", "routes[0].split", "routes[0].split[1].service", "routes[1].refuse"}},
	})
}
