package config

import (
	"maps"
	"slices"
	"strings"
	"time"
)

// Validation configures order-body validation (routes with
// validate: order) and the market catalogue it checks against.
// docs/validation.md lists the rules.
type Validation struct {
	// MaxBodyBytes is the largest order body accepted; larger bodies get
	// 413. It must not exceed server.max_body_bytes. Default 8KiB.
	MaxBodyBytes ByteSize `yaml:"max_body_bytes"`
	// UnknownFields is what happens to body fields the spec does not
	// define: "reject" (400 naming each one) or "allow" (accepted, though
	// still refused when duplicated, and left out of the canonical order
	// the backend receives). Default "reject".
	UnknownFields string `yaml:"unknown_fields"`
	// BeforeCatalogue is what happens to orders that arrive before the
	// market catalogue first loaded: "reject" (503 catalogue_unavailable)
	// or "pass" (checked without the market rules and forwarded).
	// Default "reject".
	BeforeCatalogue string `yaml:"before_catalogue"`
	// Identifier bounds the client's order identifier.
	Identifier Identifier `yaml:"identifier"`
	// Bulk bounds bulk requests (routes with validate: order_bulk).
	Bulk BulkLimits `yaml:"bulk"`
	// Catalogue configures how the market catalogue is fetched from the
	// backend.
	Catalogue Catalogue `yaml:"catalogue" reload:"restart"`
	// Markets holds per-market rules keyed by symbol ("BTC_USDT"); they
	// override Quotes. Markets not in the backend's catalogue are ignored.
	// Default: none.
	Markets map[string]MarketRules `yaml:"markets"`
	// Quotes holds per-quote-currency rules keyed by currency code
	// ("USDT"), for every market quoted in that currency. Default: none.
	Quotes map[string]QuoteRules `yaml:"quotes"`
}

// BulkLimits bounds bulk placements and bulk cancels.
type BulkLimits struct {
	// MaxOrders is the most orders (or order ids) one bulk request may
	// carry; more is refused whole with 400. From 1 to 1000. Default 10.
	MaxOrders int `yaml:"max_orders"`
	// MaxBodyBytes is the largest bulk body accepted; larger bodies get
	// 413. server.max_body_bytes caps it when smaller. Default 64KiB.
	MaxBodyBytes ByteSize `yaml:"max_body_bytes"`
}

// Identifier bounds the client's order identifier. Letters and digits
// are always allowed.
type Identifier struct {
	// Required refuses orders without an identifier. Default false.
	Required bool `yaml:"required"`
	// MaxLength is the longest identifier accepted, in bytes, from 1 to
	// 256. Default 64.
	MaxLength int `yaml:"max_length"`
	// Punctuation lists the characters allowed in an identifier besides
	// ASCII letters and digits: printable ASCII punctuation other than
	// '"' and '\'. Default "-_.:".
	Punctuation string `yaml:"punctuation"`
}

// Catalogue configures how the market catalogue is fetched from the
// backend: at start, then every Refresh.
type Catalogue struct {
	// Path is the markets endpoint, below upstream.url's path.
	// Default "/api/v1/mkt/markets/".
	Path string `yaml:"path"`
	// Refresh is how often the catalogue is fetched again; at least 1s.
	// Default 30s.
	Refresh time.Duration `yaml:"refresh"`
	// Timeout bounds one fetch; it must be less than Refresh.
	// Default 5s.
	Timeout time.Duration `yaml:"timeout"`
	// MaxBytes is the largest catalogue response accepted; a larger one
	// is a failed refresh. Default 4MiB.
	MaxBytes ByteSize `yaml:"max_bytes"`
	// TokenEnv names an environment variable holding a Bearer token sent
	// with each fetch (the markets endpoint allows more requests with a
	// token); "" sends none. Default "".
	TokenEnv string `yaml:"token_env"`
}

// MarketRules are per-market order rules. Unset values ("") leave the
// rule off or at its default.
type MarketRules struct {
	// PriceIncrement is the step every price must be a multiple of.
	// Default "" (10^-price_precision from the catalogue).
	PriceIncrement Decimal `yaml:"price_increment"`
	// MinPrice is the lowest price, stop price or OCO target price
	// accepted. Default "" (none).
	MinPrice Decimal `yaml:"min_price"`
	// MaxPrice is the highest price, stop price or OCO target price
	// accepted. Default "" (none).
	MaxPrice Decimal `yaml:"max_price"`
	// MinValue is the smallest order value (price × base_amount, or the
	// quote_amount of a market order) accepted, in the quote currency; it
	// overrides the quote currency's. Default "" (none).
	MinValue Decimal `yaml:"min_value"`
}

// QuoteRules are order rules for every market quoted in one currency.
type QuoteRules struct {
	// MinValue is the smallest order value accepted, in this currency.
	// Default "" (none).
	MinValue Decimal `yaml:"min_value"`
}

// Validation modes.
const (
	UnknownReject         = "reject"
	UnknownAllow          = "allow"
	BeforeCatalogueReject = "reject"
	BeforeCataloguePass   = "pass"
)

// DefaultValidation returns the built-in validation settings.
func DefaultValidation() Validation {
	return Validation{
		MaxBodyBytes:    8 << 10,
		UnknownFields:   UnknownReject,
		BeforeCatalogue: BeforeCatalogueReject,
		Identifier:      Identifier{MaxLength: 64, Punctuation: "-_.:"},
		Bulk:            BulkLimits{MaxOrders: 10, MaxBodyBytes: 64 << 10},
		Catalogue: Catalogue{
			Path:     "/api/v1/mkt/markets/",
			Refresh:  30 * time.Second,
			Timeout:  5 * time.Second,
			MaxBytes: 4 << 20,
		},
	}
}

// IsSymbol reports whether s is a market symbol: <BASE>_<QUOTE> of
// upper-case letters and digits, at most 32 bytes.
func IsSymbol(s string) bool {
	base, quote, ok := strings.Cut(s, "_")
	return ok && len(s) <= 32 && isCurrency(base) && isCurrency(quote)
}

// isCurrency reports whether s is a currency code: upper-case letters
// and digits, 1 to 16 bytes.
func isCurrency(s string) bool {
	if s == "" || len(s) > 16 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// check reports problems in the validation section at p; its body size
// against server.max_body_bytes is checked across sections.
func (val *Validation) check(col *collector, p path) {
	if val.MaxBodyBytes < 64 || val.MaxBodyBytes > 1<<20 {
		col.addf(p.key("max_body_bytes"), "must be from 64 to 1MiB, got %s", val.MaxBodyBytes)
	}
	bp := p.key("bulk")
	if val.Bulk.MaxOrders < 1 || val.Bulk.MaxOrders > 1000 {
		col.addf(bp.key("max_orders"), "must be from 1 to 1000, got %d", val.Bulk.MaxOrders)
	}
	if val.Bulk.MaxBodyBytes < 64 || val.Bulk.MaxBodyBytes > 16<<20 {
		col.addf(bp.key("max_body_bytes"), "must be from 64 to 16MiB, got %s", val.Bulk.MaxBodyBytes)
	}
	col.oneOf(p.key("unknown_fields"), val.UnknownFields, UnknownReject, UnknownAllow)
	col.oneOf(p.key("before_catalogue"), val.BeforeCatalogue, BeforeCatalogueReject, BeforeCataloguePass)
	val.Identifier.check(col, p.key("identifier"))
	val.Catalogue.check(col, p.key("catalogue"))
	for _, sym := range slices.Sorted(maps.Keys(val.Markets)) {
		mp := p.key("markets").key(sym)
		if !IsSymbol(sym) {
			col.addf(mp, "symbol %q must be <BASE>_<QUOTE> of upper-case letters and digits", sym)
		}
		m := val.Markets[sym]
		m.check(col, mp)
	}
	for _, q := range slices.Sorted(maps.Keys(val.Quotes)) {
		qp := p.key("quotes").key(q)
		if !isCurrency(q) {
			col.addf(qp, "currency %q must be 1 to 16 upper-case letters and digits", q)
		}
		checkPositiveDecimal(col, qp.key("min_value"), val.Quotes[q].MinValue)
	}
}

// check reports problems in the identifier bounds at p.
func (id *Identifier) check(col *collector, p path) {
	if id.MaxLength < 1 || id.MaxLength > 256 {
		col.addf(p.key("max_length"), "must be from 1 to 256, got %d", id.MaxLength)
	}
	for i := 0; i < len(id.Punctuation); i++ {
		ch := id.Punctuation[i]
		if ch <= ' ' || ch >= 0x7f || ch == '"' || ch == '\\' ||
			ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' {
			col.addf(p.key("punctuation"), "character %q is not printable ASCII punctuation other than '\"' and '\\'", ch)
			break
		}
	}
}

// check reports problems in the catalogue settings at p.
func (cat *Catalogue) check(col *collector, p path) {
	if !strings.HasPrefix(cat.Path, "/") || strings.ContainsAny(cat.Path, "{}") {
		col.addf(p.key("path"), "want an absolute path such as \"/api/v1/mkt/markets/\", got %q", cat.Path)
	} else if err := CheckPattern(cat.Path); err != nil {
		col.addf(p.key("path"), "%v", err)
	}
	if cat.Refresh < time.Second {
		col.addf(p.key("refresh"), "must be at least 1s, got %s", cat.Refresh)
	}
	switch {
	case cat.Timeout <= 0:
		col.positive(p.key("timeout"), cat.Timeout)
	case cat.Refresh >= time.Second && cat.Timeout >= cat.Refresh:
		col.addf(p.key("timeout"), "%s must be less than %s (%s)", cat.Timeout, p.key("refresh"), cat.Refresh)
	}
	if cat.MaxBytes < 1<<10 || cat.MaxBytes > 64<<20 {
		col.addf(p.key("max_bytes"), "must be from 1KiB to 64MiB, got %s", cat.MaxBytes)
	}
	if cat.TokenEnv != "" {
		col.envName(p.key("token_env"), cat.TokenEnv)
	}
}

// check reports problems in one market's rules at p.
func (m *MarketRules) check(col *collector, p path) {
	checkPositiveDecimal(col, p.key("price_increment"), m.PriceIncrement)
	checkPositiveDecimal(col, p.key("min_price"), m.MinPrice)
	checkPositiveDecimal(col, p.key("max_price"), m.MaxPrice)
	checkPositiveDecimal(col, p.key("min_value"), m.MinValue)
	if m.MinPrice.IsSet() && m.MaxPrice.IsSet() && m.MinPrice.Value().GreaterThan(m.MaxPrice.Value()) {
		col.addf(p.key("max_price"), "%s must not be less than min_price (%s)", m.MaxPrice, m.MinPrice)
	}
}
