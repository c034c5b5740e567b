package config

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDefaultValidation(t *testing.T) {
	v := DefaultValidation()
	if v.MaxBodyBytes != 8<<10 || v.UnknownFields != UnknownReject || v.BeforeCatalogue != BeforeCatalogueReject {
		t.Errorf("DefaultValidation() = %+v, want 8KiB, reject, reject", v)
	}
	if v.Identifier != (Identifier{MaxLength: 64, Punctuation: "-_.:"}) {
		t.Errorf("identifier = %+v", v.Identifier)
	}
	if v.Catalogue != (Catalogue{Path: "/api/v1/mkt/markets/", Refresh: 30 * time.Second, Timeout: 5 * time.Second, MaxBytes: 4 << 20}) {
		t.Errorf("catalogue = %+v", v.Catalogue)
	}
	if v.Markets != nil || v.Quotes != nil {
		t.Errorf("default markets/quotes = %v/%v, want none", v.Markets, v.Quotes)
	}
}

func TestValidationFixture(t *testing.T) {
	c, err := Load("testdata/validation/markets.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Validation{
		MaxBodyBytes:    4 << 10,
		UnknownFields:   UnknownAllow,
		BeforeCatalogue: BeforeCataloguePass,
		Identifier:      Identifier{Required: true, MaxLength: 36, Punctuation: "-"},
		Bulk:            BulkLimits{MaxOrders: 10, MaxBodyBytes: 64 << 10},
		Catalogue: Catalogue{Path: "/api/v1/mkt/markets/", Refresh: time.Minute, Timeout: 2 * time.Second,
			MaxBytes: 1 << 20, TokenEnv: "EXGATE_CATALOGUE_TOKEN"},
		Markets: map[string]MarketRules{
			"BTC_USDT": {PriceIncrement: "0.5", MinPrice: "1000", MaxPrice: "1000000", MinValue: "10"},
			"ETH_BTC":  {PriceIncrement: "0.000010"},
			"USDT_IRT": {MinValue: "100000"},
		},
		Quotes: map[string]QuoteRules{"USDT": {MinValue: "5"}, "IRT": {MinValue: "50000"}},
	}
	if !reflect.DeepEqual(c.Validation, want) {
		t.Errorf("validation =\n%+v\nwant\n%+v", c.Validation, want)
	}
	wantIdem := Idempotency{
		Enabled: true, Store: StoreRedis, Retention: 48 * time.Hour, InFlightTimeout: 15 * time.Second,
		MaxResponseBytes: 16 << 10, Timeout: 250 * time.Millisecond, KeyPrefix: "prod:idem:", MaxPerAccount: 500,
		ReplicaAcks: 2, Memory: IdempotencyMemory{MaxEntries: 5000, MaxBytes: 8 << 20},
	}
	if c.Idempotency != wantIdem {
		t.Errorf("idempotency = %+v, want %+v", c.Idempotency, wantIdem)
	}

	b, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	c2, err := Parse("marshalled", b, nil)
	if err != nil {
		t.Fatalf("Parse(Marshal()) = %v\n%s", err, b)
	}
	if !reflect.DeepEqual(c, c2) {
		t.Errorf("round trip differs:\n%s", b)
	}
	if !strings.Contains(string(b), "price_increment: \"0.000010\"") {
		t.Errorf("decimals must be written as strings, as given:\n%s", b)
	}
}

// validationFixtures lists, for every testdata/validation/bad-*.yaml,
// exactly the problems it must produce, in order.
var validationFixtures = map[string][]string{
	"bad-validation.yaml": {
		`validation.max_body_bytes: must be from 64 to 1MiB, got 2MiB (line 2)`,
		`validation.unknown_fields: want "reject" or "allow", got "ignore" (line 3)`,
		`validation.before_catalogue: want "reject" or "pass", got "wait" (line 4)`,
		`validation.identifier.max_length: must be from 1 to 256, got 0 (line 6)`,
		`validation.identifier.punctuation: character ' ' is not printable ASCII punctuation other than '"' and '\' (line 7)`,
		`validation.catalogue.path: want an absolute path such as "/api/v1/mkt/markets/", got "api/markets" (line 9)`,
		`validation.catalogue.refresh: must be at least 1s, got 500ms (line 10)`,
		`validation.catalogue.timeout: must be greater than 0, got 0s (line 11)`,
		`validation.catalogue.max_bytes: must be from 1KiB to 64MiB, got 100MiB (line 12)`,
		`validation.catalogue.token_env: want an environment variable name ([A-Z_][A-Z0-9_]*), got "lower-case" (line 13)`,
		`validation.markets.ETH_USDT.price_increment: must be greater than 0, got 0 (line 16)`,
		`validation.markets.ETH_USDT.max_price: 5 must not be less than min_price (10) (line 16)`,
		`validation.markets.btc_usdt: symbol "btc_usdt" must be <BASE>_<QUOTE> of upper-case letters and digits (line 15)`,
		`validation.markets.btc_usdt.min_value: must be greater than 0, got 0 (line 15)`,
		`validation.quotes.USD-T: currency "USD-T" must be 1 to 16 upper-case letters and digits (line 18)`,
		`validation.quotes.USD-T.min_value: must be greater than 0, got 0.000 (line 18)`,
	},
	"bad-decimals.yaml": {
		`validation.markets.BTC_USDT.price_increment: decimal "1e-2": want plain decimal notation such as "0.01" or "10" (line 4)`,
		`validation.markets.BTC_USDT.min_price: decimal "-1": want plain decimal notation such as "0.01" or "10" (line 5)`,
		`validation.markets.BTC_USDT.max_price: decimal "1,000": want plain decimal notation such as "0.01" or "10" (line 6)`,
		`validation.markets.BTC_USDT.min_value: decimal "1.000000000000000000000000000000001": more than 30 decimal places (line 7)`,
	},
}

func TestValidationInvalidFixtures(t *testing.T) {
	testInvalidFixtures(t, "testdata/validation", validationFixtures)
}

func TestValidationRules(t *testing.T) {
	tests := []struct {
		name string
		yml  string
		env  map[string]string
		want []string // problems; nil means valid
	}{
		{"body limit above the server's", "server: {max_body_bytes: 4KiB}\nvalidation: {max_body_bytes: 8KiB}\n", nil,
			[]string{`validation.max_body_bytes: 8KiB must not exceed server.max_body_bytes (4KiB) (line 2)`}},
		{"body limit equal to the server's", "server: {max_body_bytes: 8KiB}\n", nil, nil},
		{"catalogue timeout not below refresh", "validation: {catalogue: {refresh: 5s, timeout: 5s}}\n", nil,
			[]string{`validation.catalogue.timeout: 5s must be less than validation.catalogue.refresh (5s) (line 1)`}},
		{"catalogue path with a parameter", "validation: {catalogue: {path: '/api/{x}/'}}\n", nil,
			[]string{`validation.catalogue.path: want an absolute path such as "/api/v1/mkt/markets/", got "/api/{x}/" (line 1)`}},
		{"catalogue path with a dot segment", "validation: {catalogue: {path: /api/../x/}}\n", nil,
			[]string{`validation.catalogue.path: path "/api/../x/": dot segment (line 1)`}},
		{"punctuation with a quote", "validation: {identifier: {punctuation: '\"'}}\n", nil,
			[]string{`validation.identifier.punctuation: character '"' is not printable ASCII punctuation other than '"' and '\' (line 1)`}},
		{"punctuation with a letter", "validation: {identifier: {punctuation: 'a'}}\n", nil,
			[]string{`validation.identifier.punctuation: character 'a' is not printable ASCII punctuation other than '"' and '\' (line 1)`}},
		{"empty punctuation: letters and digits only", "validation: {identifier: {punctuation: ''}}\n", nil, nil},
		{"symbol too long", "validation: {markets: {ABCDEFGHIJKLMNOP_ABCDEFGHIJKLMNOP: {min_value: '1'}}}\n", nil,
			[]string{`validation.markets.ABCDEFGHIJKLMNOP_ABCDEFGHIJKLMNOP: symbol "ABCDEFGHIJKLMNOP_ABCDEFGHIJKLMNOP" must be <BASE>_<QUOTE> of upper-case letters and digits (line 1)`}},
		{"symbol with two underscores", "validation: {markets: {A_B_C: {}}}\n", nil,
			[]string{`validation.markets.A_B_C: symbol "A_B_C" must be <BASE>_<QUOTE> of upper-case letters and digits (line 1)`}},
		{"min price equal to max price", "validation: {markets: {BTC_USDT: {min_price: '10', max_price: '10.0'}}}\n", nil, nil},
		{"market decimals compared exactly", "validation: {markets: {BTC_USDT: {min_price: '0.30000000000000000001', max_price: '0.3'}}}\n", nil,
			[]string{`validation.markets.BTC_USDT.max_price: 0.3 must not be less than min_price (0.30000000000000000001) (line 1)`}},
		{"decimal with too many integer digits", "validation: {quotes: {USDT: {min_value: '123456789012345678901'}}}\n", nil,
			[]string{`validation.quotes.USDT.min_value: decimal "123456789012345678901": more than 20 integer digits (line 1)`}},
		{"decimal with trailing zeros past 30 places", "validation: {quotes: {USDT: {min_value: '1.0000000000000000000000000000000000'}}}\n", nil, nil},
		{"env override of a market rule", "validation: {markets: {BTC_USDT: {min_value: '10'}}}\n",
			map[string]string{"EXGATE_VALIDATION_MARKETS_BTC_USDT_MIN_VALUE": "0"},
			[]string{`EXGATE_VALIDATION_MARKETS_BTC_USDT_MIN_VALUE (validation.markets.BTC_USDT.min_value): must be greater than 0, got 0`}},
		{"env override of a decimal, bad text", "validation: {quotes: {USDT: {min_value: '10'}}}\n",
			map[string]string{"EXGATE_VALIDATION_QUOTES_USDT_MIN_VALUE": "1e3"},
			[]string{`EXGATE_VALIDATION_QUOTES_USDT_MIN_VALUE (validation.quotes.USDT.min_value): decimal "1e3": want plain decimal notation such as "0.01" or "10"`}},
		{"env overrides", "", map[string]string{"EXGATE_VALIDATION_UNKNOWN_FIELDS": "allow", "EXGATE_IDEMPOTENCY_RETENTION": "1h", "EXGATE_VALIDATION_IDENTIFIER_MAX_LENGTH": "300"},
			[]string{`EXGATE_VALIDATION_IDENTIFIER_MAX_LENGTH (validation.identifier.max_length): must be from 1 to 256, got 300`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("test.yaml", []byte(tt.yml), env(tt.env))
			if got := errorStrings(t, err); !slices.Equal(got, tt.want) {
				t.Errorf("problems:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
			}
		})
	}
}

func TestValidationEnvOverridesApply(t *testing.T) {
	c := mustParse(t, "validation: {markets: {BTC_USDT: {min_value: '10'}}}\n", env(map[string]string{
		"EXGATE_VALIDATION_MARKETS_BTC_USDT_PRICE_INCREMENT": "0.05",
		"EXGATE_VALIDATION_BEFORE_CATALOGUE":                 "pass",
		"EXGATE_IDEMPOTENCY_IN_FLIGHT_TIMEOUT":               "45s",
		"EXGATE_IDEMPOTENCY_MEMORY_MAX_ENTRIES":              "7",
	}))
	if got := c.Validation.Markets["BTC_USDT"]; got != (MarketRules{PriceIncrement: "0.05", MinValue: "10"}) {
		t.Errorf("markets.BTC_USDT = %+v", got)
	}
	if c.Validation.BeforeCatalogue != BeforeCataloguePass || c.Idempotency.InFlightTimeout != 45*time.Second || c.Idempotency.Memory.MaxEntries != 7 {
		t.Errorf("overrides not applied: %+v %+v", c.Validation, c.Idempotency)
	}
}

func TestIsSymbol(t *testing.T) {
	for s, want := range map[string]bool{
		"BTC_USDT": true, "1INCH_USDT": true, "A_B": true,
		"btc_usdt": false, "BTCUSDT": false, "_USDT": false, "BTC_": false, "BTC_USDT_X": false,
		"BTC-USDT": false, "": false, "ABCDEFGHIJKLMNOPQ_USDT": false,
	} {
		if IsSymbol(s) != want {
			t.Errorf("IsSymbol(%q) = %v, want %v", s, !want, want)
		}
	}
}
