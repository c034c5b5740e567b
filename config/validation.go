package config

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/shopspring/decimal"
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

// Decimal is an exact non-negative decimal number written in plain
// notation ("0.01", "10", "65000.5"), or "" for unset. It is kept as
// written; it never passes through a float. At most 20 integer digits
// and 30 decimal places.
type Decimal string

// UnmarshalText checks and sets the decimal.
func (d *Decimal) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	if err := checkDecimalText(s); err != nil {
		return err
	}
	*d = Decimal(s)
	return nil
}

// MarshalText writes the decimal as it was given.
func (d Decimal) MarshalText() ([]byte, error) { return []byte(d), nil }

// IsSet reports whether the decimal has a value.
func (d Decimal) IsSet() bool { return d != "" }

// String returns the decimal as written, or "" when unset.
func (d Decimal) String() string { return string(d) }

// Value returns the decimal's value; an unset or invalid decimal is 0.
func (d Decimal) Value() decimal.Decimal {
	v, err := decimal.NewFromString(string(d))
	if err != nil {
		return decimal.Decimal{}
	}
	return v
}

// checkDecimalText checks plain decimal notation: [0-9]+(.[0-9]+)?,
// bounded, or "".
func checkDecimalText(s string) error {
	if s == "" {
		return nil
	}
	whole, frac, dot := strings.Cut(s, ".")
	digits := func(p string) bool {
		if p == "" {
			return false
		}
		for i := 0; i < len(p); i++ {
			if p[i] < '0' || p[i] > '9' {
				return false
			}
		}
		return true
	}
	if !digits(whole) || dot && !digits(frac) {
		return fmt.Errorf("decimal %q: want plain decimal notation such as \"0.01\" or \"10\"", s)
	}
	if len(strings.TrimLeft(whole, "0")) > 20 {
		return fmt.Errorf("decimal %q: more than 20 integer digits", s)
	}
	if len(strings.TrimRight(frac, "0")) > 30 {
		return fmt.Errorf("decimal %q: more than 30 decimal places", s)
	}
	return nil
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

// Idempotency configures duplicate protection on order identifiers: per
// token, an identifier reaches the backend at most once within
// Retention, and repeats are answered from the first response.
type Idempotency struct {
	// Enabled turns duplicate protection on for orders that carry an
	// identifier. Default true.
	Enabled bool `yaml:"enabled"`
	// Backend is "redis" or "memory". Empty means the limiter's store
	// (Config.IdempotencyBackend). Redis uses the limiter.redis
	// connection settings, through a client of its own when the limits
	// are kept in memory. Default "".
	Backend string `yaml:"backend"`
	// Retention is how long an identifier stays taken, and its response
	// replayable, after its last change. Default 24h.
	Retention time.Duration `yaml:"retention"`
	// InFlightTimeout is how long a claimed identifier may wait for the
	// backend's answer before retries are told the outcome is unknown (a
	// replica that crashed mid-request cannot wedge it). It must exceed
	// the timeout of every route with validate: order. Default 30s.
	InFlightTimeout time.Duration `yaml:"in_flight_timeout"`
	// MaxResponseBytes is the largest backend response stored for
	// replay; a larger one makes repeats answer 409 outcome_unknown.
	// Default 64KiB.
	MaxResponseBytes ByteSize `yaml:"max_response_bytes"`
	// Timeout is the deadline of every store call. Default 100ms.
	Timeout time.Duration `yaml:"timeout"`
	// KeyPrefix starts every Redis key. Default "exgate:idem:".
	KeyPrefix string `yaml:"key_prefix"`
	// MaxPerAccount is the most identifiers one account (the verified
	// account, else the token) holds in the store at once: orders the
	// backend accepted, orders in flight and orders whose outcome is
	// unknown, until their retention ends. Past it, that account's new
	// identifiers get 503 identifier_quota_exceeded and nobody else's do.
	// Default 20000.
	MaxPerAccount int `yaml:"max_per_account"`
	// ReplicaAcks is how many Redis replicas must hold a claim (Redis
	// WAIT) before the order is forwarded, so that a failover cannot lose
	// it and let a retry place the order again; when fewer acknowledge it
	// in time the order is refused with 503. -1 means 1 with Sentinel
	// (limiter.redis.master_name) or a Cluster (several addresses), 0 for
	// one standalone server. Default -1.
	ReplicaAcks int `yaml:"replica_acks"`
	// Memory bounds the in-process store (the memory backend).
	Memory IdempotencyMemory `yaml:"memory"`
}

// IdempotencyMemory bounds the in-process duplicate-protection store.
// When full of unexpired entries, new identifiers are refused with a
// store error rather than forgetting old ones.
type IdempotencyMemory struct {
	// MaxEntries is the most identifiers kept. Default 100000.
	MaxEntries int `yaml:"max_entries"`
	// MaxBytes bounds the stored responses and keys together.
	// Default 64MiB.
	MaxBytes ByteSize `yaml:"max_bytes"`
}

// DefaultIdempotency returns the built-in duplicate-protection settings.
func DefaultIdempotency() Idempotency {
	return Idempotency{
		Enabled:          true,
		Retention:        24 * time.Hour,
		InFlightTimeout:  30 * time.Second,
		MaxResponseBytes: 64 << 10,
		Timeout:          100 * time.Millisecond,
		KeyPrefix:        "exgate:idem:",
		MaxPerAccount:    20000,
		ReplicaAcks:      -1,
		Memory:           IdempotencyMemory{MaxEntries: 100000, MaxBytes: 64 << 20},
	}
}

// IdempotencyReplicaAcks returns how many replicas must acknowledge a
// claim: idempotency.replica_acks, or for -1 one with Sentinel or a
// Cluster (which fail over to replicas) and none for a standalone server.
func (c *Config) IdempotencyReplicaAcks() int {
	r := c.Limiter.Redis
	switch {
	case c.Idempotency.ReplicaAcks >= 0:
		return c.Idempotency.ReplicaAcks
	case r.MasterName != "" || len(r.Addrs) > 1:
		return 1
	}
	return 0
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

// checkValidation reports problems in the validation and idempotency
// sections.
func (c *Config) checkValidation(v *checker) {
	val := c.Validation
	switch {
	case val.MaxBodyBytes < 64 || val.MaxBodyBytes > 1<<20:
		v.addf("validation.max_body_bytes", "must be from 64 to 1MiB, got %s", val.MaxBodyBytes)
	case c.Server.MaxBodyBytes > 0 && val.MaxBodyBytes > c.Server.MaxBodyBytes:
		v.addf("validation.max_body_bytes", "%s must not exceed server.max_body_bytes (%s)", val.MaxBodyBytes, c.Server.MaxBodyBytes)
	}
	if val.Bulk.MaxOrders < 1 || val.Bulk.MaxOrders > 1000 {
		v.addf("validation.bulk.max_orders", "must be from 1 to 1000, got %d", val.Bulk.MaxOrders)
	}
	if val.Bulk.MaxBodyBytes < 64 || val.Bulk.MaxBodyBytes > 16<<20 {
		v.addf("validation.bulk.max_body_bytes", "must be from 64 to 16MiB, got %s", val.Bulk.MaxBodyBytes)
	}
	v.oneOf("validation.unknown_fields", val.UnknownFields, UnknownReject, UnknownAllow)
	v.oneOf("validation.before_catalogue", val.BeforeCatalogue, BeforeCatalogueReject, BeforeCataloguePass)

	id := val.Identifier
	if id.MaxLength < 1 || id.MaxLength > 256 {
		v.addf("validation.identifier.max_length", "must be from 1 to 256, got %d", id.MaxLength)
	}
	for i := 0; i < len(id.Punctuation); i++ {
		ch := id.Punctuation[i]
		if ch <= ' ' || ch >= 0x7f || ch == '"' || ch == '\\' ||
			ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' {
			v.addf("validation.identifier.punctuation", "character %q is not printable ASCII punctuation other than '\"' and '\\'", ch)
			break
		}
	}

	cat := val.Catalogue
	if !strings.HasPrefix(cat.Path, "/") || strings.ContainsAny(cat.Path, "{}") {
		v.addf("validation.catalogue.path", "want an absolute path such as \"/api/v1/mkt/markets/\", got %q", cat.Path)
	} else if err := CheckPattern(cat.Path); err != nil {
		v.addf("validation.catalogue.path", "%v", err)
	}
	if cat.Refresh < time.Second {
		v.addf("validation.catalogue.refresh", "must be at least 1s, got %s", cat.Refresh)
	}
	switch {
	case cat.Timeout <= 0:
		v.positive("validation.catalogue.timeout", cat.Timeout)
	case cat.Refresh >= time.Second && cat.Timeout >= cat.Refresh:
		v.addf("validation.catalogue.timeout", "%s must be less than validation.catalogue.refresh (%s)", cat.Timeout, cat.Refresh)
	}
	if cat.MaxBytes < 1<<10 || cat.MaxBytes > 64<<20 {
		v.addf("validation.catalogue.max_bytes", "must be from 1KiB to 64MiB, got %s", cat.MaxBytes)
	}
	if cat.TokenEnv != "" {
		v.envName("validation.catalogue.token_env", cat.TokenEnv)
	}

	for _, sym := range sortedKeys(val.Markets) {
		p := joinKey("validation.markets", sym)
		if !IsSymbol(sym) {
			v.addf(p, "symbol %q must be <BASE>_<QUOTE> of upper-case letters and digits", sym)
		}
		m := val.Markets[sym]
		v.decimalPositive(p+".price_increment", m.PriceIncrement)
		v.decimalPositive(p+".min_price", m.MinPrice)
		v.decimalPositive(p+".max_price", m.MaxPrice)
		v.decimalPositive(p+".min_value", m.MinValue)
		if m.MinPrice.IsSet() && m.MaxPrice.IsSet() && m.MinPrice.Value().GreaterThan(m.MaxPrice.Value()) {
			v.addf(p+".max_price", "%s must not be less than min_price (%s)", m.MaxPrice, m.MinPrice)
		}
	}
	for _, q := range sortedKeys(val.Quotes) {
		p := joinKey("validation.quotes", q)
		if !isCurrency(q) {
			v.addf(p, "currency %q must be 1 to 16 upper-case letters and digits", q)
		}
		v.decimalPositive(p+".min_value", val.Quotes[q].MinValue)
	}

	idem := c.Idempotency
	v.oneOf("idempotency.backend", idem.Backend, "", BackendRedis, BackendMemory)
	if idem.Enabled && idem.Backend == BackendRedis && len(c.Limiter.Redis.Addrs) == 0 {
		v.addf("idempotency.backend", "\"redis\" needs limiter.redis.addrs")
	}
	if idem.Retention < time.Minute || idem.Retention > 366*24*time.Hour {
		v.addf("idempotency.retention", "must be from 1m to 366d, got %s", idem.Retention)
	}
	switch {
	case idem.InFlightTimeout <= 0:
		v.positive("idempotency.in_flight_timeout", idem.InFlightTimeout)
	case idem.InFlightTimeout >= idem.Retention && idem.Retention >= time.Minute:
		v.addf("idempotency.in_flight_timeout", "%s must be less than idempotency.retention (%s)", idem.InFlightTimeout, idem.Retention)
	default:
		for i := range c.Routes {
			r := &c.Routes[i]
			if r.Validate != ValidateOrd {
				continue
			}
			if t := c.RouteTimeout(r); idem.InFlightTimeout <= t {
				v.addf("idempotency.in_flight_timeout", "%s must exceed the timeout of %s (%q, %s)", idem.InFlightTimeout, joinIndex("routes", i), r.Name, t)
			}
		}
	}
	if idem.MaxResponseBytes < 1<<10 || idem.MaxResponseBytes > 1<<20 {
		v.addf("idempotency.max_response_bytes", "must be from 1KiB to 1MiB, got %s", idem.MaxResponseBytes)
	}
	if idem.Timeout <= 0 || idem.Timeout > 5*time.Second {
		v.addf("idempotency.timeout", "must be greater than 0 and at most 5s, got %s", idem.Timeout)
	}
	if idem.KeyPrefix == "" || len(idem.KeyPrefix) > 64 || strings.ContainsFunc(idem.KeyPrefix, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
		v.addf("idempotency.key_prefix", "want 1 to 64 printable ASCII characters without spaces, got %q", idem.KeyPrefix)
	}
	if idem.MaxPerAccount < 1 {
		v.addf("idempotency.max_per_account", "must be at least 1, got %d", idem.MaxPerAccount)
	}
	if idem.ReplicaAcks < -1 || idem.ReplicaAcks > 5 {
		v.addf("idempotency.replica_acks", "must be from -1 (by topology) to 5, got %d", idem.ReplicaAcks)
	}
	if idem.Memory.MaxEntries < 1 {
		v.addf("idempotency.memory.max_entries", "must be at least 1, got %d", idem.Memory.MaxEntries)
	}
	if idem.Memory.MaxBytes < idem.MaxResponseBytes || idem.Memory.MaxBytes > 1<<40 {
		v.addf("idempotency.memory.max_bytes", "must be at least idempotency.max_response_bytes (%s), got %s", idem.MaxResponseBytes, idem.Memory.MaxBytes)
	}
}

// decimalPositive reports a set decimal that is not greater than zero.
func (v *checker) decimalPositive(path string, d Decimal) {
	if d.IsSet() && !d.Value().IsPositive() {
		v.addf(path, "must be greater than 0, got %s", d)
	}
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
