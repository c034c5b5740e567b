package validate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/exgate/exgate/config"
	"go.uber.org/zap"
)

// Market is one market of the catalogue, as the backend's markets
// endpoint lists it (trading-api.md, "Market").
type Market struct {
	// Symbol is "<BASE>_<QUOTE>", such as "BTC_USDT".
	Symbol string
	// Base and Quote are the currency codes.
	Base, Quote string
	// Tradable is false for a market that accepts no orders.
	Tradable bool
	// PricePrecision is the decimal places of a price.
	PricePrecision int
	// BaseAmountPrecision is the decimal places of base_amount.
	BaseAmountPrecision int
	// QuoteAmountPrecision is the decimal places of quote_amount.
	QuoteAmountPrecision int
}

// CatalogueOptions are a Catalogue's dependencies and settings.
type CatalogueOptions struct {
	// BaseURL is the backend's base URL (upstream.url); Path is appended
	// to its path. Required.
	BaseURL *url.URL
	// Path is the markets endpoint. Default "/api/v1/mkt/markets/".
	Path string
	// Transport carries the requests (normally the proxy's transport to
	// the backend). Required. Redirects are not followed.
	Transport http.RoundTripper
	// Token, when not empty, is sent as "Authorization: Bearer <Token>".
	// Default "" (none).
	Token string
	// Refresh is the period between fetches once loaded. Default 30s.
	// Until the first load, Run retries sooner (1s, doubling up to
	// Refresh).
	Refresh time.Duration
	// Timeout bounds one fetch. Default 5s.
	Timeout time.Duration
	// MaxBytes is the largest response accepted. Default 4MiB.
	MaxBytes int64
	// Now is the clock that stamps loads and measures age. Nil means
	// time.Now.
	Now func() time.Time
	// Logger receives failed and changed refreshes. Nil means no logging.
	Logger *zap.Logger
	// OnLoad, when not nil, is called after every fetch with its error
	// (nil on success), for metrics.
	OnLoad func(error)
}

// Catalogue is the market catalogue, fetched from the backend and
// refreshed periodically. A failed fetch keeps the last good copy. It is
// safe for concurrent use; lookups never block on a fetch.
type Catalogue struct {
	url      string
	client   *http.Client
	token    string
	refresh  time.Duration
	timeout  time.Duration
	maxBytes int64
	now      func() time.Time
	log      *zap.Logger
	onLoad   func(error)

	snap     atomic.Pointer[snapshot]
	loadedAt atomic.Int64 // unix nanoseconds of the last good load; 0 before
}

// snapshot is one immutable version of the catalogue. A refresh that
// finds the same markets keeps the snapshot, so rules compiled from it
// stay valid.
type snapshot struct {
	list    []Market // sorted by symbol
	markets map[string]*Market
}

// NewCatalogue returns a catalogue that has not loaded yet; call Run (or
// Load, or Set) to fill it.
func NewCatalogue(o CatalogueOptions) (*Catalogue, error) {
	if o.BaseURL == nil || (o.BaseURL.Scheme != "http" && o.BaseURL.Scheme != "https") || o.BaseURL.Host == "" {
		return nil, errors.New("validate: catalogue needs an absolute http(s) BaseURL")
	}
	if o.Transport == nil {
		return nil, errors.New("validate: catalogue needs a Transport")
	}
	if o.Path == "" {
		o.Path = "/api/v1/mkt/markets/"
	}
	if !strings.HasPrefix(o.Path, "/") {
		return nil, fmt.Errorf("validate: catalogue path %q must start with /", o.Path)
	}
	if o.Refresh <= 0 {
		o.Refresh = 30 * time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = 4 << 20
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	u := *o.BaseURL
	u.Path = strings.TrimSuffix(u.Path, "/") + o.Path
	u.RawPath = ""
	return &Catalogue{
		url: u.String(),
		client: &http.Client{
			Transport:     o.Transport,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		token:    o.Token,
		refresh:  o.Refresh,
		timeout:  o.Timeout,
		maxBytes: o.MaxBytes,
		now:      o.Now,
		log:      o.Logger.Named("catalogue"),
		onLoad:   o.OnLoad,
	}, nil
}

// Run loads the catalogue now and then every Refresh until ctx is done.
// Until the first successful load it retries after 1s, doubling up to
// Refresh. Failures are logged and the last good copy is kept; Run never
// gives up.
func (c *Catalogue) Run(ctx context.Context) {
	retry := min(time.Second, c.refresh)
	for {
		err := c.Load(ctx)
		wait := c.refresh
		if err != nil && !c.Ready() {
			wait = retry
			retry = min(2*retry, c.refresh)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// Load fetches the catalogue once. On success it replaces the markets;
// on failure (transport error, status other than 200, a body that is not
// a JSON array of well-formed markets) it keeps the last good copy, logs
// the problem and returns it. A fetch cut short by ctx is returned
// without logging or OnLoad.
func (c *Catalogue) Load(ctx context.Context) error {
	markets, err := c.fetch(ctx)
	if err == nil {
		err = c.Set(markets)
	}
	if err != nil && ctx.Err() != nil {
		return err // shutting down: not a failed refresh
	}
	if c.onLoad != nil {
		c.onLoad(err)
	}
	if err != nil {
		if age, ok := c.Age(); ok {
			c.log.Warn("market catalogue refresh failed; keeping the last good copy",
				zap.String("url", c.url), zap.Error(err), zap.Duration("age", age))
		} else {
			c.log.Error("market catalogue not loaded; orders cannot be checked",
				zap.String("url", c.url), zap.Error(err))
		}
	}
	return err
}

// fetch requests and decodes the markets.
func (c *Catalogue) fetch(ctx context.Context) ([]Market, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "exgate")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, c.maxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading the response: %w", err)
	}
	if int64(len(body)) > c.maxBytes {
		return nil, fmt.Errorf("response larger than %d bytes", c.maxBytes)
	}
	return ParseMarkets(body)
}

// rawMarket is a market as the backend writes it. Precisions are
// integers written as strings; plain JSON integers are accepted too.
type rawMarket struct {
	Symbol               string          `json:"symbol"`
	Base                 string          `json:"base"`
	Quote                string          `json:"quote"`
	Tradable             *bool           `json:"tradable"`
	PricePrecision       json.RawMessage `json:"price_precision"`
	BaseAmountPrecision  json.RawMessage `json:"base_amount_precision"`
	QuoteAmountPrecision json.RawMessage `json:"quote_amount_precision"`
}

// ParseMarkets decodes and checks a markets response: a non-empty JSON
// array of markets, each with a well-formed symbol (matching base and
// quote when they are given), a tradable flag, and precisions from 0 to
// MaxDecimalPlaces; symbols are unique. Other fields are ignored.
func ParseMarkets(body []byte) ([]Market, error) {
	var raw []rawMarket
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("not a JSON array of markets: %w", err)
	}
	if len(bytes.TrimSpace(body[dec.InputOffset():])) > 0 {
		return nil, errors.New("data after the JSON array")
	}
	if len(raw) == 0 {
		return nil, errors.New("no markets")
	}
	out := make([]Market, 0, len(raw))
	for i, r := range raw {
		m := Market{Symbol: r.Symbol, Base: r.Base, Quote: r.Quote}
		if !config.IsSymbol(r.Symbol) {
			return nil, fmt.Errorf("markets[%d]: symbol %.40q is not <BASE>_<QUOTE>", i, r.Symbol)
		}
		base, quote, _ := strings.Cut(r.Symbol, "_")
		if m.Base == "" && m.Quote == "" {
			m.Base, m.Quote = base, quote
		} else if m.Base != base || m.Quote != quote {
			return nil, fmt.Errorf("markets[%d] (%s): base %.20q and quote %.20q do not match the symbol", i, r.Symbol, r.Base, r.Quote)
		}
		if r.Tradable == nil {
			return nil, fmt.Errorf("markets[%d] (%s): tradable missing or null", i, r.Symbol)
		}
		m.Tradable = *r.Tradable
		for _, p := range []struct {
			name string
			raw  json.RawMessage
			dst  *int
		}{
			{"price_precision", r.PricePrecision, &m.PricePrecision},
			{"base_amount_precision", r.BaseAmountPrecision, &m.BaseAmountPrecision},
			{"quote_amount_precision", r.QuoteAmountPrecision, &m.QuoteAmountPrecision},
		} {
			n, err := parsePrecision(p.raw)
			if err != nil {
				return nil, fmt.Errorf("markets[%d] (%s): %s %v", i, r.Symbol, p.name, err)
			}
			*p.dst = n
		}
		out = append(out, m)
	}
	return out, nil
}

// parsePrecision reads a precision: "2" or 2, from 0 to MaxDecimalPlaces.
func parsePrecision(raw json.RawMessage) (int, error) {
	s := string(raw)
	if strings.HasPrefix(s, `"`) {
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, err
		}
	}
	if s == "" || s == "null" || len(s) > 3 || strings.Trim(s, "0123456789") != "" {
		return 0, fmt.Errorf("is %.20s, want an integer from 0 to %d", raw, MaxDecimalPlaces)
	}
	n, _ := strconv.Atoi(s)
	if n > MaxDecimalPlaces {
		return 0, fmt.Errorf("is %d, want an integer from 0 to %d", n, MaxDecimalPlaces)
	}
	return n, nil
}

// Set replaces the markets, as a successful Load does; it is also how a
// deployment without a markets endpoint, or a test, installs a fixed
// catalogue. It refuses an empty list, malformed symbols, precisions out
// of range and repeated symbols, and then changes nothing.
func (c *Catalogue) Set(markets []Market) error {
	if len(markets) == 0 {
		return errors.New("no markets")
	}
	list := slices.Clone(markets)
	slices.SortFunc(list, func(a, b Market) int { return strings.Compare(a.Symbol, b.Symbol) })
	for i, m := range list {
		if !config.IsSymbol(m.Symbol) || m.Base+"_"+m.Quote != m.Symbol {
			return fmt.Errorf("market %.40q: symbol must be <BASE>_<QUOTE> and match base and quote", m.Symbol)
		}
		for _, p := range []int{m.PricePrecision, m.BaseAmountPrecision, m.QuoteAmountPrecision} {
			if p < 0 || p > MaxDecimalPlaces {
				return fmt.Errorf("market %s: precision %d out of range 0 to %d", m.Symbol, p, MaxDecimalPlaces)
			}
		}
		if i > 0 && list[i-1].Symbol == m.Symbol {
			return fmt.Errorf("market %s listed twice", m.Symbol)
		}
	}
	now := c.now()
	old := c.snap.Load()
	if old == nil || !slices.Equal(old.list, list) {
		s := &snapshot{list: list, markets: make(map[string]*Market, len(list))}
		for i := range s.list {
			s.markets[s.list[i].Symbol] = &s.list[i]
		}
		c.snap.Store(s)
		if old == nil {
			c.log.Info("market catalogue loaded", zap.Int("markets", len(list)))
		} else {
			c.log.Info("market catalogue changed", zap.Int("markets", len(list)))
		}
	}
	c.loadedAt.Store(now.UnixNano())
	return nil
}

// Ready reports whether the catalogue has loaded at least once.
func (c *Catalogue) Ready() bool { return c.snap.Load() != nil }

// LoadedAt returns the time of the last successful load, or the zero
// time before the first.
func (c *Catalogue) LoadedAt() time.Time {
	ns := c.loadedAt.Load()
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// Age returns how long ago the last successful load was, and false
// before the first load. It backs exgate_market_catalogue_age_seconds
// and readiness.
func (c *Catalogue) Age() (time.Duration, bool) {
	ns := c.loadedAt.Load()
	if ns == 0 {
		return 0, false
	}
	return c.now().Sub(time.Unix(0, ns)), true
}

// Market returns the market with the given symbol.
func (c *Catalogue) Market(symbol string) (Market, bool) {
	s := c.snap.Load()
	if s == nil {
		return Market{}, false
	}
	m, ok := s.markets[symbol]
	if !ok {
		return Market{}, false
	}
	return *m, true
}

// Markets returns a copy of the markets, sorted by symbol; nil before the
// first load.
func (c *Catalogue) Markets() []Market {
	s := c.snap.Load()
	if s == nil {
		return nil
	}
	return slices.Clone(s.list)
}
