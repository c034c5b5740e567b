package config

import (
	"slices"
	"testing"
	"time"
)

func TestOverloadConfig(t *testing.T) {
	tests := []parseCase{
		{name: "defaults", yaml: "{}\n",
			check: func(t *testing.T, c *Config) {
				if !c.Overload.Enabled || c.Overload.MaxWait.Cancel != time.Second || c.Route("cancel_order").Priority != PriorityCancel ||
					c.Route("list_orders").Priority != PriorityStatus || c.Route("list_tickers").Priority != PriorityMarketData {
					t.Errorf("overload defaults: %+v", c.Overload)
				}
			}},
		{name: "keys merge into the defaults",
			yaml: "overload: {fixed_limit: 50, max_wait: {market_data: 0s}}\n",
			check: func(t *testing.T, c *Config) {
				if c.Overload.FixedLimit != 50 || c.Overload.MaxWait.MarketData != 0 || c.Overload.MaxWait.Place != 20*time.Millisecond {
					t.Errorf("overload = %+v", c.Overload)
				}
			}},
		{name: "priority follows the route when not given",
			yaml: "routes:\n  - {name: del, match: 'DELETE /x/{id}/', auth: required}\n  - {name: rd, match: 'GET /x/', auth: required}\n" +
				"  - {name: pub, match: 'GET /y/'}\n  - {name: mine, match: 'GET /z/', priority: status, max_in_flight: 3}\n",
			check: func(t *testing.T, c *Config) {
				got := []string{c.Routes[0].Priority, c.Routes[1].Priority, c.Routes[2].Priority, c.Routes[3].Priority}
				if want := []string{PriorityCancel, PriorityPrivateRead, PriorityMarketData, PriorityStatus}; !slices.Equal(got, want) {
					t.Errorf("priorities = %q, want %q", got, want)
				}
				if c.Routes[3].MaxInFlight != 3 {
					t.Errorf("max_in_flight = %d", c.Routes[3].MaxInFlight)
				}
			}},
		{name: "every problem by its path",
			yaml: "overload: {min_limit: 0, max_limit: -1, initial_limit: 5000, fixed_limit: -2, tolerance_percent: 0, tolerance_min: -1s," +
				" window: 0s, probe_interval: 10ms, retry_after: 10ms, shed_delay: -1ms, max_wait: {cancel: 2m, market_data: -1ms}}\n" +
				"routes:\n  - {name: r, match: '*', priority: urgent, max_in_flight: -1}\n",
			paths: []string{"overload.min_limit", "overload.max_limit", "overload.initial_limit", "overload.fixed_limit",
				"overload.tolerance_percent", "overload.tolerance_min", "overload.window", "overload.probe_interval", "overload.retry_after",
				"overload.shed_delay", "overload.max_wait.cancel", "overload.max_wait.market_data", "routes[0].priority", "routes[0].max_in_flight"}},
		{name: "unknown key", yaml: "overload: {limit: 5}\n", paths: []string{"overload.limit"}},
	}
	runParseCases(t, tests)
}
