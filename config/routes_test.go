package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

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
