package config

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// schemaPath reports whether p, a path a problem names, leads through the
// schema rooted at t: keys of structs by their YAML names, any key of a
// map, indexes of slices, ending anywhere.
func schemaPath(t reflect.Type, p string) bool {
	for p != "" {
		switch {
		case strings.HasPrefix(p, `["`):
			end := strings.Index(p, `"]`)
			if end < 0 || t.Kind() != reflect.Map {
				return false
			}
			t, p = t.Elem(), p[end+2:]
		case p[0] == '[':
			end := strings.IndexByte(p, ']')
			if _, err := strconv.Atoi(p[1:max(end, 1)]); err != nil || t.Kind() != reflect.Slice {
				return false
			}
			t, p = t.Elem(), p[end+1:]
		default:
			p = strings.TrimPrefix(p, ".")
			end := strings.IndexAny(p, ".[")
			if end < 0 {
				end = len(p)
			}
			key := p[:end]
			p = p[end:]
			switch {
			case t.Kind() == reflect.Map:
				t = t.Elem()
			case t.Kind() == reflect.Struct && !isText(t):
				f, ok := fieldByKey(reflect.New(t).Elem(), key)
				if !ok {
					return false
				}
				t = f.Type()
			default:
				return false
			}
		}
	}
	return true
}

// fullyPopulated returns a valid configuration in which every list and
// map of the schema has an element, so that every key has a value a
// check can look at.
func fullyPopulated() *Config {
	c := Default()
	c.TokensFile = "tokens.yaml"
	c.Tiers = map[string]map[string]TierLimit{"vip": {"place_order": {Rate: Rate{N: 1, Period: time.Second}, Burst: 1}}}
	c.Server.TLS.Certificates = []Certificate{{CertFile: "c.pem", KeyFile: "k.pem"}}
	c.Server.ProxyProtocol.TrustedPeers = []Prefix{mustPrefix("10.0.0.0/8")}
	c.ClientIP.TrustedProxies = []Prefix{mustPrefix("10.0.0.0/8")}
	c.Limiter.Redis.Addrs = []string{"127.0.0.1:6379"}
	c.Identity.JWT.JWKSFile = "jwks.json"
	c.Identity.JWT.JWKSAlgorithms = []string{"RS256"}
	c.CORS.AllowedOrigins = []string{"https://app.example.com"}
	c.Validation.Markets = map[string]MarketRules{"BTC_USDT": {PriceIncrement: "0.01", MinPrice: "1", MaxPrice: "2", MinValue: "5"}}
	c.Validation.Quotes = map[string]QuoteRules{"USDT": {MinValue: "5"}}
	return c
}

func mustPrefix(s string) Prefix {
	var p Prefix
	if err := p.UnmarshalText([]byte(s)); err != nil {
		panic(err)
	}
	return p
}

// badValues are values of each kind that some check refuses somewhere.
func badValues(t reflect.Type) []reflect.Value {
	var vs []any
	switch {
	case t == reflect.TypeFor[Rate]():
		vs = []any{Rate{}, Rate{N: -1, Period: time.Second}, Rate{N: 1, Period: time.Millisecond}}
	case t == reflect.TypeFor[Match]():
		vs = []any{Match{}, Match{Method: "GET", Path: "*"}, Match{Method: "FETCH", Path: "/x/"}, Match{Path: "x"}}
	case t == reflect.TypeFor[URL](), t == reflect.TypeFor[Prefix]():
		return []reflect.Value{reflect.Zero(t)}
	case t.Kind() == reflect.String:
		vs = []any{"", "?", "a.b"}
	case t.Kind() == reflect.Bool:
		vs = []any{true, false}
	case t.Kind() == reflect.Int || t.Kind() == reflect.Int64:
		vs = []any{int64(-1), int64(0), int64(1), int64(1) << 50}
	default:
		return nil
	}
	out := make([]reflect.Value, len(vs))
	for i, v := range vs {
		out[i] = reflect.ValueOf(v).Convert(t)
	}
	return out
}

// leaves calls visit, in a fixed order, with every value below v that
// badValues knows and with every list.
func leaves(v reflect.Value, visit func(v reflect.Value)) {
	t := v.Type()
	switch {
	case badValues(t) != nil:
		visit(v)
	case t.Kind() == reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			if yamlName(t.Field(i)) != "" {
				leaves(v.Field(i), visit)
			}
		}
	case t.Kind() == reflect.Slice:
		visit(v)
		for i := 0; i < v.Len(); i++ {
			leaves(v.Index(i), visit)
		}
	case t.Kind() == reflect.Map:
		for _, k := range v.MapKeys() {
			// Map values are not addressable: take a copy, walk it, and
			// store it back after each change.
			e := reflect.New(t.Elem()).Elem()
			e.Set(v.MapIndex(k))
			leaves(e, func(x reflect.Value) {
				visit(x)
				v.SetMapIndex(k, e)
			})
		}
	}
}

// TestProblemsNameSchemaPaths sets every value of a configuration, one at
// a time, to values checks refuse, and requires every problem reported to
// name a path of the schema: the checks build their paths from their
// section's, and a misspelt key would point an operator nowhere.
func TestProblemsNameSchemaPaths(t *testing.T) {
	if err := fullyPopulated().Validate(); err != nil {
		t.Fatalf("fullyPopulated() is not valid: %v", err)
	}
	schema := reflect.TypeFor[Config]()
	count := 0
	leaves(reflect.ValueOf(fullyPopulated()).Elem(), func(reflect.Value) { count++ })
	named := map[string]bool{}
	for n := 0; n < count; n++ {
		for b := 0; ; b++ {
			c, i, done := fullyPopulated(), 0, false
			leaves(reflect.ValueOf(c).Elem(), func(v reflect.Value) {
				if i++; i-1 != n {
					return
				}
				bad := badValues(v.Type())
				if v.Kind() == reflect.Slice {
					bad = []reflect.Value{reflect.Zero(v.Type())}
				}
				if b >= len(bad) {
					done = true
					return
				}
				v.Set(bad[b])
			})
			if done {
				break
			}
			err := c.Validate()
			if err == nil {
				continue
			}
			for _, fe := range err.(Errors) {
				if fe.Path == "" {
					continue
				}
				named[fe.Path] = true
				if !schemaPath(schema, fe.Path) {
					t.Errorf("%q: not a path of the schema: %v", fe.Path, fe)
				}
			}
		}
	}
	if len(named) < 300 {
		t.Errorf("only %d distinct paths named by %d values; the walk is broken", len(named), count)
	}
	for _, p := range []string{"server.read_header_timeout", `tiers.vip.place_order.rate`, "routes[0].limits[0].key", "validation.markets.BTC_USDT.min_price"} {
		if !named[p] {
			t.Errorf("no problem named %s", p)
		}
	}
	for _, p := range []string{"server.nope", "routes[x]", "routes.name", "upstream.url.host", `tiers["a"].x.y.z`} {
		if schemaPath(schema, p) {
			t.Errorf("schemaPath(%q) = true, want false", p)
		}
	}
}
