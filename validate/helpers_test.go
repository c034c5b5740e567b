package validate

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
)

// seedMarkets mirrors the reference backend's catalogue (sim/catalogue.go).
func seedMarkets() []Market {
	mk := func(base, quote string, tradable bool, price, baseAmt, quoteAmt int) Market {
		return Market{Symbol: base + "_" + quote, Base: base, Quote: quote, Tradable: tradable,
			PricePrecision: price, BaseAmountPrecision: baseAmt, QuoteAmountPrecision: quoteAmt}
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

// fixedClock is a settable clock for tests.
type fixedClock struct{ t time.Time }

func (c *fixedClock) now() time.Time          { return c.t }
func (c *fixedClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// unloadedCatalogue returns a catalogue whose requests go nowhere; tests
// fill it with Set.
func unloadedCatalogue(t testing.TB) *Catalogue {
	t.Helper()
	u, _ := url.Parse("http://127.0.0.1:1")
	c, err := NewCatalogue(CatalogueOptions{BaseURL: u, Transport: http.DefaultTransport})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// newValidator returns a validator for cfg over the seed markets; edit
// configures cfg first when not nil.
func newValidator(t testing.TB, edit func(*config.Validation)) *Validator {
	t.Helper()
	cfg := config.DefaultValidation()
	if edit != nil {
		edit(&cfg)
	}
	cat := unloadedCatalogue(t)
	if err := cat.Set(seedMarkets()); err != nil {
		t.Fatal(err)
	}
	v, err := New(cfg, cat, nil)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// jsonCT is the usual Content-Type header value.
var jsonCT = []string{"application/json"}
