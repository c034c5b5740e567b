package config

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// envCase is a configuration file and environment, and the problems Parse
// reports or a check of the configuration it returns.
type envCase struct {
	name  string
	yaml  string
	env   map[string]string
	errs  []string
	check func(t *testing.T, c *Config)
}

// envCases is TestEnvOverrides's table.
var envCases = []envCase{
	{name: "strings", env: map[string]string{"EXGATE_LISTEN": ":9000", "EXGATE_ADMIN_LISTEN": "127.0.0.1:9001", "EXGATE_TOKENS_FILE": "/etc/exgate/tokens.yaml", "EXGATE_LOG_LEVEL": "debug"},
		check: func(t *testing.T, c *Config) {
			if c.Listen != ":9000" || c.AdminListen != "127.0.0.1:9001" || c.TokensFile != "/etc/exgate/tokens.yaml" || c.Log.Level != "debug" {
				t.Errorf("got %q %q %q %q", c.Listen, c.AdminListen, c.TokensFile, c.Log.Level)
			}
		}},
	{name: "url", env: map[string]string{"EXGATE_UPSTREAM_URL": "https://backend.internal:8443/base"},
		check: func(t *testing.T, c *Config) {
			if c.Upstream.URL.String() != "https://backend.internal:8443/base" {
				t.Errorf("url = %s", c.Upstream.URL)
			}
		}},
	{name: "durations", env: map[string]string{"EXGATE_UPSTREAM_TIMEOUT": "3s", "EXGATE_SERVER_WRITE_TIMEOUT": "1m", "EXGATE_LIMITER_REDIS_TIMEOUT": "50ms"},
		check: func(t *testing.T, c *Config) {
			if c.Upstream.Timeout != 3*time.Second || c.Server.WriteTimeout != time.Minute || c.Limiter.Redis.Timeout != 50*time.Millisecond {
				t.Errorf("got %v %v %v", c.Upstream.Timeout, c.Server.WriteTimeout, c.Limiter.Redis.Timeout)
			}
		}},
	{name: "ints bools sizes", env: map[string]string{"EXGATE_LIMITER_REPLICAS": "4", "EXGATE_IDEMPOTENCY_ENABLED": "false", "EXGATE_LOG_ACCESS": "false", "EXGATE_LIMITER_REDIS_TLS": "1", "EXGATE_SERVER_MAX_BODY_BYTES": "64KiB", "EXGATE_CLIENT_IP_IPV6_PREFIX": " 48 "},
		check: func(t *testing.T, c *Config) {
			if c.Limiter.Replicas != 4 || c.Log.Access || !c.Limiter.Redis.TLS || c.Server.MaxBodyBytes != 64<<10 || c.ClientIP.IPv6Prefix != 48 {
				t.Errorf("got %d %v %v %v %d", c.Limiter.Replicas, c.Log.Access, c.Limiter.Redis.TLS, c.Server.MaxBodyBytes, c.ClientIP.IPv6Prefix)
			}
		}},
	{name: "comma lists", env: map[string]string{"EXGATE_LIMITER_STORE": "redis", "EXGATE_LIMITER_REDIS_ADDRS": "a:6379, b:6379,", "EXGATE_CLIENT_IP_TRUSTED_PROXIES": "10.0.0.0/8,127.0.0.1"},
		check: func(t *testing.T, c *Config) {
			if !slices.Equal(c.Limiter.Redis.Addrs, []string{"a:6379", "b:6379"}) || c.Limiter.Store != StoreRedis {
				t.Errorf("addrs = %q", c.Limiter.Redis.Addrs)
			}
			if len(c.ClientIP.TrustedProxies) != 2 || c.ClientIP.TrustedProxies[1].String() != "127.0.0.1/32" {
				t.Errorf("trusted proxies = %v", c.ClientIP.TrustedProxies)
			}
		}},
	{name: "empty string is the empty list", yaml: "limiter: {redis: {addrs: [a:1]}}\n", env: map[string]string{"EXGATE_LIMITER_REDIS_ADDRS": ""},
		check: func(t *testing.T, c *Config) {
			if c.Limiter.Redis.Addrs != nil {
				t.Errorf("addrs = %#v, want nil", c.Limiter.Redis.Addrs)
			}
		}},
	{name: "routes by index", env: map[string]string{"EXGATE_ROUTES_0_TIMEOUT": "5s", "EXGATE_ROUTES_3_LIMITS_0_RATE": "120/1m", "EXGATE_ROUTES_3_LIMITS_0_BURST": "0", "EXGATE_ROUTES_3_AUTH": "required", "EXGATE_ROUTES_4_MATCH": "/api/"},
		check: func(t *testing.T, c *Config) {
			if c.Routes[0].Timeout != 5*time.Second || c.Routes[3].Auth != AuthRequired || c.Routes[4].Match.Path != "/api/" {
				t.Errorf("routes = %+v", c.Routes)
			}
			if l := c.Routes[3].Limits[0]; l.Rate.String() != "120/1m" || l.Burst != 120 {
				t.Errorf("list_matches limit = %+v", l)
			}
		}},
	{name: "tiers by key", yaml: "tiers: {vip: {place_order: {rate: 20000/1h}}}\ntokens_file: t.yaml\n",
		env: map[string]string{"EXGATE_TIERS_VIP_PLACE_ORDER_RATE": "1/1s", "EXGATE_TIERS_VIP_PLACE_ORDER_BURST": "7"},
		check: func(t *testing.T, c *Config) {
			if got := c.Tiers["vip"]["place_order"]; got != (TierLimit{Rate: Rate{N: 1, Period: time.Second}, Burst: 7}) {
				t.Errorf("tier = %+v", got)
			}
		}},
	{name: "environment beats the file", yaml: "listen: ':7000'\n", env: map[string]string{"EXGATE_LISTEN": ":7001"},
		check: func(t *testing.T, c *Config) {
			if c.Listen != ":7001" {
				t.Errorf("listen = %q", c.Listen)
			}
		}},
	{name: "unknown and unreachable variables are ignored",
		env: map[string]string{"EXGATE_NOPE": "1", "EXGATE_ROUTES_99_NAME": "x", "EXGATE_TIERS_GOLD_PLACE_ORDER_RATE": "bad", "EXGATE_KEY_SECRET": "s3cret", "EXGATE_SERVER": "x", "EXGATE_ROUTES": "x"},
		check: func(t *testing.T, c *Config) {
			if !reflect.DeepEqual(c, Default()) {
				t.Errorf("config changed")
			}
		}},
	{name: "bad values name the variable",
		env: map[string]string{
			"EXGATE_LIMITER_REPLICAS":          "three",
			"EXGATE_UPSTREAM_URL":              "ftp://backend",
			"EXGATE_LOG_ACCESS":                "maybe",
			"EXGATE_SERVER_READ_TIMEOUT":       "-1s",
			"EXGATE_CLIENT_IP_TRUSTED_PROXIES": "10.0.0.0/8, nope",
			"EXGATE_UPSTREAM_MAX_IDLE_CONNS":   "99999999999999999999",
			"EXGATE_ROUTES_0_LIMITS_0_RATE":    "fast",
			"EXGATE_LOG_LEVEL":                 "verbose",
			"EXGATE_ADMIN_LISTEN":              ":8080",
		},
		// In walk order: schema order, decoding before validation.
		errs: []string{
			`EXGATE_SERVER_READ_TIMEOUT (server.read_timeout): duration -1s must not be negative`,
			`EXGATE_UPSTREAM_URL (upstream.url): url "ftp://backend": scheme must be http or https`,
			`EXGATE_UPSTREAM_MAX_IDLE_CONNS (upstream.max_idle_conns): integer 99999999999999999999 is out of range`,
			`EXGATE_CLIENT_IP_TRUSTED_PROXIES (client_ip.trusted_proxies[1]): prefix "nope": not an IP address or CIDR prefix`,
			`EXGATE_LIMITER_REPLICAS (limiter.replicas): want an integer, got "three"`,
			`EXGATE_LOG_ACCESS (log.access): want a boolean (true or false), got "maybe"`,
			`EXGATE_ROUTES_0_LIMITS_0_RATE (routes[0].limits[0].rate): rate "fast": want N/period, such as 60/1m`,
			`EXGATE_ADMIN_LISTEN (admin_listen): must differ from listen (":8080")`,
			`EXGATE_LOG_LEVEL (log.level): want "debug", "info", "warn" or "error", got "verbose"`,
		}},
	{name: "a file value overridden by a bad variable is reported once, by the variable",
		yaml: "upstream:\n  url: http://ok:1\n", env: map[string]string{"EXGATE_UPSTREAM_URL": ""},
		errs: []string{`EXGATE_UPSTREAM_URL (upstream.url): required, such as "http://127.0.0.1:9000"`}},
}

func TestEnvOverrides(t *testing.T) {
	for _, tt := range envCases {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("test.yaml", []byte(tt.yaml), env(tt.env))
			got := errorStrings(t, err)
			if !slices.Equal(got, tt.errs) {
				t.Fatalf("problems:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tt.errs, "\n  "))
			}
			if err == nil && tt.check != nil {
				tt.check(t, c)
			}
		})
	}
}

func TestEnvErrorFields(t *testing.T) {
	_, err := Parse("", nil, env(map[string]string{"EXGATE_UPSTREAM_URL": "nope"}))
	var fe *FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("err = %v", err)
	}
	if fe.Env != "EXGATE_UPSTREAM_URL" || fe.Path != "upstream.url" || fe.Line != 0 {
		t.Errorf("FieldError = %+v", fe)
	}
}
