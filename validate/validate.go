// Package validate checks order bodies before they reach the backend:
// the transport (Content-Type, size), the JSON itself (one object, valid
// UTF-8, no repeated keys, bounded nesting) and the order's fields against
// the trading API and the live market catalogue, which it fetches from
// the backend and refreshes (Catalogue).
//
// A Validator only reads the body; the proxy forwards the order's
// canonical encoding (Order.AppendCanonical), never the client's bytes.
// Check scans the body once, by hand, without encoding/json and without
// building values, and reads decimals exactly from their text, never
// through a float. docs/validation.md lists every rule.
package validate

import (
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/shopspring/decimal"
	"go.uber.org/zap"

	"github.com/exgate/exgate/apierror"
	"github.com/exgate/exgate/config"
)

// Order types and sides, as Order reports them.
const (
	TypeLimit     = "limit"
	TypeMarket    = "market"
	TypeStopLimit = "stop_limit"
	TypeOCO       = "oco"
	SideBuy       = "buy"
	SideSell      = "sell"
)

// Order is what the proxy needs to know about an accepted order.
type Order struct {
	// Market is the order's market, or nil when the catalogue had not
	// loaded and before_catalogue is "pass".
	Market *Market
	// Type is one of the Type constants; Side is SideBuy or SideSell.
	Type, Side string
	// Identifier is the client's identifier, decoded, or "" when the
	// order has none (absent or null); an empty identifier is refused.
	Identifier string
	// Partial reports that the market rules (existence, tradability,
	// precisions, increments, bounds) were skipped because the catalogue
	// had not loaded and before_catalogue is "pass".
	Partial bool
	// Symbol is the order's market symbol as validated.
	Symbol string

	// amounts are the decimal fields (base_amount … oco_target_price,
	// indexed from fBaseAmount) that the order carries; has says which.
	amounts [numAmounts]dec
	has     [numAmounts]bool
}

// Validator checks order requests. It is safe for concurrent use.
type Validator struct {
	cat          *Catalogue
	log          *zap.Logger
	maxBody      int64
	maxBulk      int   // orders per bulk request
	maxBulkBody  int64 // bytes of a bulk body
	allowUnknown bool
	pass         bool
	idRequired   bool
	idMax        int
	idChars      [256]bool
	idCharsMsg   string
	markets      map[string]overrides
	quotes       map[string]dec

	errTooLarge     *apierror.Error
	errBulkTooLarge *apierror.Error

	compiled atomic.Pointer[compiled]
}

// overrides are the configured rules of one market.
type overrides struct {
	increment, minPrice, maxPrice, minValue *dec
}

// compiled holds the effective rules of every market of one catalogue
// snapshot.
type compiled struct {
	snap  *snapshot
	rules map[string]*rules
}

// rules are the effective rules of one market.
type rules struct {
	m            *Market
	increment    dec
	incMsg       string // "must be a multiple of 0.01"
	customInc    bool   // increment differs from 10^-price_precision
	minPrice     *dec
	maxPrice     *dec
	minValue     *dec
	minPriceMsg  string
	maxPriceMsg  string
	minValueMsg  string
	basePlaces   string // "must have at most 6 decimal places"
	quotePlaces  string
	pricePlaces  string
	minValueNote string // currency for the minimum value message
}

// New returns a Validator for the configuration, checking orders against
// cat. It fails on decimals in cfg that it cannot read; config.Validate
// has already refused those.
func New(cfg config.Validation, cat *Catalogue, log *zap.Logger) (*Validator, error) {
	if cat == nil {
		return nil, errors.New("validate: New needs a Catalogue")
	}
	if log == nil {
		log = zap.NewNop()
	}
	v := &Validator{
		cat:          cat,
		log:          log.Named("validate"),
		maxBody:      int64(cfg.MaxBodyBytes),
		allowUnknown: cfg.UnknownFields == config.UnknownAllow,
		pass:         cfg.BeforeCatalogue == config.BeforeCataloguePass,
		idRequired:   cfg.Identifier.Required,
		idMax:        cfg.Identifier.MaxLength,
		markets:      make(map[string]overrides, len(cfg.Markets)),
		quotes:       make(map[string]dec, len(cfg.Quotes)),
	}
	if v.maxBody <= 0 {
		v.maxBody = 8 << 10
	}
	if v.idMax <= 0 {
		v.idMax = 64
	}
	v.errTooLarge = apierror.TooLarge(v.maxBody)
	v.maxBulk, v.maxBulkBody = cfg.Bulk.MaxOrders, int64(cfg.Bulk.MaxBodyBytes)
	if v.maxBulk <= 0 {
		v.maxBulk = 10
	}
	if v.maxBulkBody <= 0 {
		v.maxBulkBody = 64 << 10
	}
	v.errBulkTooLarge = apierror.TooLarge(v.maxBulkBody)
	for c := '0'; c <= '9'; c++ {
		v.idChars[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		v.idChars[c], v.idChars[c-'a'+'A'] = true, true
	}
	for i := 0; i < len(cfg.Identifier.Punctuation); i++ {
		v.idChars[cfg.Identifier.Punctuation[i]] = true
	}
	v.idCharsMsg = "may contain only letters and digits"
	if p := cfg.Identifier.Punctuation; p != "" {
		v.idCharsMsg = "may contain only letters, digits and " + strconv.Quote(p)
	}
	for sym, m := range cfg.Markets {
		var o overrides
		for _, f := range []struct {
			name string
			d    config.Decimal
			dst  **dec
		}{
			{"price_increment", m.PriceIncrement, &o.increment},
			{"min_price", m.MinPrice, &o.minPrice},
			{"max_price", m.MaxPrice, &o.maxPrice},
			{"min_value", m.MinValue, &o.minValue},
		} {
			d, err := configDec(f.d)
			if err != nil {
				return nil, fmt.Errorf("validate: validation.markets.%s.%s: %v", sym, f.name, err)
			}
			*f.dst = d
		}
		v.markets[sym] = o
	}
	for q, r := range cfg.Quotes {
		d, err := configDec(r.MinValue)
		if err != nil {
			return nil, fmt.Errorf("validate: validation.quotes.%s.min_value: %v", q, err)
		}
		if d != nil {
			v.quotes[q] = *d
		}
	}
	return v, nil
}

// configDec reads a configured decimal; nil when unset.
func configDec(s config.Decimal) (*dec, error) {
	if !s.IsSet() {
		return nil, nil
	}
	d, msg := parseDec([]byte(s))
	if msg != "" {
		return nil, fmt.Errorf("%q %s", s, msg)
	}
	return &d, nil
}

// MaxBodyBytes returns the body limit: the proxy reads at most one byte
// more than this before calling Check.
func (v *Validator) MaxBodyBytes() int64 { return v.maxBody }

// TooLarge returns the 413 answer to an order body over MaxBodyBytes.
func (v *Validator) TooLarge() *apierror.Error { return v.errTooLarge }

// PreCheck refuses, before the body is read, a request whose
// Content-Type (the request's header values) is not JSON (415) or whose
// declared Content-Length is over the limit (413); contentLength -1 means
// unknown. Check repeats both checks.
func (v *Validator) PreCheck(contentType []string, contentLength int64) *apierror.Error {
	if !jsonContentType(contentType) {
		return errMediaType
	}
	if contentLength > v.maxBody {
		return v.errTooLarge
	}
	return nil
}

// Check validates an order request from its Content-Type header values
// (r.Header["Content-Type"]) and its whole body. It returns the order, or
// the problem to answer with: 415, 413, 503 (catalogue not loaded, unless
// before_catalogue is "pass"), 400 parse_error, or 400 invalid_order with
// every field problem at once. It never modifies or retains body.
func (v *Validator) Check(contentType []string, body []byte) (Order, *apierror.Error) {
	var o Order
	if p := v.CheckInto(&o, contentType, body); p != nil {
		return Order{}, p
	}
	return o, nil
}

// CheckInto is Check writing the order into o, which must be zero, where
// Check returns a copy of it: the proxy's order path keeps it where it
// encodes it. o is the order only when CheckInto returns nil.
func (v *Validator) CheckInto(o *Order, contentType []string, body []byte) *apierror.Error {
	if p := v.PreCheck(contentType, int64(len(body))); p != nil {
		return p
	}
	rs := v.current()
	if rs == nil && !v.pass {
		return errUnavailable
	}
	var st state
	st.p.b = body
	if !v.scan(&st) {
		return parseError(st.p.err, st.p.i)
	}
	if st.notObject != kAbsent {
		r := report{}
		r.add(NonFieldErrors, "expected a JSON object, got "+st.notObject.jsonName())
		return r.done()
	}
	v.fields(&st, rs, o)
	if st.rep.p != nil {
		return st.rep.done()
	}
	return nil
}

// current returns the rules compiled from the catalogue's snapshot, or
// nil before the first load.
func (v *Validator) current() *compiled {
	s := v.cat.snap.Load()
	if s == nil {
		return nil
	}
	if c := v.compiled.Load(); c != nil && c.snap == s {
		return c
	}
	c := v.compile(s)
	v.compiled.Store(c)
	return c
}

// compile resolves each market's effective rules.
func (v *Validator) compile(s *snapshot) *compiled {
	c := &compiled{snap: s, rules: make(map[string]*rules, len(s.list))}
	for sym := range v.markets {
		if _, ok := s.markets[sym]; !ok {
			v.log.Warn("validation.markets names a market the catalogue does not list; its rules are unused", zap.String("symbol", sym))
		}
	}
	for i := range s.list {
		m := &s.list[i]
		o := v.markets[m.Symbol]
		r := &rules{m: m}
		r.increment = dec{coef: 1, scale: m.PricePrecision}
		if m.PricePrecision > 19 {
			inc := decimal.New(1, -int32(m.PricePrecision))
			r.increment = dec{big: true, slow: &inc}
		}
		if o.increment != nil {
			r.increment, r.customInc = *o.increment, true
		}
		r.incMsg = "must be a multiple of " + r.increment.String()
		r.basePlaces = places(m.BaseAmountPrecision)
		r.quotePlaces = places(m.QuoteAmountPrecision)
		r.pricePlaces = places(m.PricePrecision)
		r.minPrice, r.maxPrice = o.minPrice, o.maxPrice
		if r.minPrice != nil {
			r.minPriceMsg = "must be at least " + r.minPrice.String()
		}
		if r.maxPrice != nil {
			r.maxPriceMsg = "must be at most " + r.maxPrice.String()
		}
		r.minValue = o.minValue
		if r.minValue == nil {
			if q, ok := v.quotes[m.Quote]; ok {
				r.minValue = &q
			}
		}
		if r.minValue != nil {
			r.minValueMsg = "order value must be at least " + r.minValue.String() + " " + m.Quote
		}
		c.rules[m.Symbol] = r
	}
	return c
}

func places(n int) string {
	if n == 0 {
		return "must be a whole number (no decimal places)"
	}
	if n == 1 {
		return "must have at most 1 decimal place"
	}
	return "must have at most " + strconv.Itoa(n) + " decimal places"
}

// Field indexes of the order body.
const (
	fSymbol = iota
	fType
	fSide
	fBaseAmount
	fQuoteAmount
	fPrice
	fStopPrice
	fOCOTarget
	fIdentifier
	numFields
)

// numAmounts is the number of decimal fields, fBaseAmount to fOCOTarget.
const numAmounts = fOCOTarget - fBaseAmount + 1

// fieldID returns the index of a known field, or -1.
func fieldID(key []byte) int {
	switch string(key) {
	case "symbol":
		return fSymbol
	case "type":
		return fType
	case "side":
		return fSide
	case "base_amount":
		return fBaseAmount
	case "quote_amount":
		return fQuoteAmount
	case "price":
		return fPrice
	case "stop_price":
		return fStopPrice
	case "oco_target_price":
		return fOCOTarget
	case "identifier":
		return fIdentifier
	}
	return -1
}

// fieldName returns the name of a known field.
func fieldName(id int) string {
	switch id {
	case fSymbol:
		return "symbol"
	case fType:
		return "type"
	case fSide:
		return "side"
	case fBaseAmount:
		return "base_amount"
	case fQuoteAmount:
		return "quote_amount"
	case fPrice:
		return "price"
	case fStopPrice:
		return "stop_price"
	case fOCOTarget:
		return "oco_target_price"
	}
	return "identifier"
}

// state is one Check's scratch space; it lives on the stack.
type state struct {
	p         parser
	vals      [numFields]val
	repeated  bool // a known field's key appears more than once (its val's dup)
	unknown   keySet
	notObject kind // the top-level value's kind when it is not an object
	rep       report
}

// scan parses the body, recording the known fields' values and
// reporting unknown and repeated fields. It returns false on a syntax
// problem (st.p.err).
func (v *Validator) scan(st *state) bool {
	p := &st.p
	p.skipWS()
	if p.i >= len(p.b) {
		return p.fail("empty body")
	}
	if !p.at('{') {
		top, ok := p.value(0)
		if !ok {
			return false
		}
		p.skipWS()
		if p.i != len(p.b) {
			return p.fail("data after the JSON value")
		}
		st.notObject = top.kind
		return true
	}
	p.i++
	p.skipWS()
	if p.at('}') {
		p.i++
		return v.end(p)
	}
	for {
		p.skipWS()
		if !p.at('"') {
			return p.fail("expected a string key")
		}
		lo, hi, esc, ok := p.str()
		if !ok {
			return false
		}
		var kbuf [32]byte
		key := decoded(kbuf[:0], p.b[lo:hi], esc)
		p.skipWS()
		if !p.at(':') {
			return p.fail("expected ':' after a key")
		}
		p.i++
		p.skipWS()
		fv, ok := p.value(1)
		if !ok {
			return false
		}
		if id := fieldID(key); id >= 0 {
			if st.vals[id].kind != kAbsent {
				st.vals[id].dup = true // the key itself repeats
				st.repeated = true
			} else {
				fv.dup = false // a known field holding an object is refused anyway
				st.vals[id] = fv
			}
		} else {
			v.unknownField(st, key, lo, hi, esc, fv)
		}
		p.skipWS()
		switch {
		case p.at(','):
			p.i++
		case p.at('}'):
			p.i++
			return v.end(p)
		case p.i >= len(p.b):
			return p.fail("unexpected end of input")
		default:
			return p.fail("expected ',' or '}' after a value")
		}
	}
}

// end checks that nothing but white space follows the object.
func (v *Validator) end(p *parser) bool {
	p.skipWS()
	if p.i != len(p.b) {
		return p.fail("data after the JSON object")
	}
	return true
}

// unknownField handles a field the spec does not define.
func (v *Validator) unknownField(st *state, key []byte, lo, hi int, esc bool, fv val) {
	dup := st.unknown.add(st.p.b, lo, hi, esc)
	name, shown := safeName(key)
	switch {
	case !v.allowUnknown && !dup:
		if shown {
			st.rep.add(name, "unknown field")
		} else {
			st.rep.add(NonFieldErrors, "unknown field (its name is not shown: longer than 32 bytes or unusual characters)")
		}
	case !v.allowUnknown:
		// already reported
	case dup && shown:
		if !st.rep.has(name) {
			st.rep.add(name, "must appear only once")
		}
	case dup:
		st.rep.add(NonFieldErrors, "a field appears more than once (its name is not shown)")
	case fv.dup && shown:
		st.rep.add(name, "contains an object with a repeated key")
	case fv.dup:
		st.rep.add(NonFieldErrors, "a field contains an object with a repeated key (its name is not shown)")
	}
}

// safeName returns a field name for a report when it is short and made of
// plain characters.
func safeName(key []byte) (string, bool) {
	if len(key) == 0 || len(key) > 32 {
		return "", false
	}
	for _, c := range key {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return "", false
		}
	}
	return string(key), true
}

// Usage of the price fields by order type: required, or refused when not
// null.
const (
	unused = iota
	required
	optional
)

func usage(typ string, id int) int {
	switch {
	case id == fBaseAmount:
		return required
	case typ == "":
		return optional // the type is unknown: presence is not judged
	}
	switch id {
	case fQuoteAmount:
		return optional
	case fPrice:
		if typ == TypeMarket {
			return unused
		}
		return required
	case fStopPrice:
		if typ == TypeStopLimit || typ == TypeOCO {
			return required
		}
		return unused
	case fOCOTarget:
		if typ == TypeOCO {
			return required
		}
		return unused
	}
	return optional
}

// fields applies the field rules to the scanned values, in steps: fields
// given twice, the symbol and its market, type and side, the identifier,
// then the amounts under the market's rules. It writes the order into o,
// which must be zero.
func (v *Validator) fields(st *state, cs *compiled, o *Order) {
	for id := range numFields {
		if st.repeated && st.vals[id].dup {
			st.rep.add(fieldName(id), "must appear only once")
		}
	}
	rs := v.symbol(st, cs, o)
	v.typeAndSide(st, o)
	v.identifier(st, o)
	v.amounts(st, rs, o)
}

// symbol reads the symbol into o and returns its market's rules, or nil
// when it names no tradable market, or before the catalogue is loaded (cs
// nil: o is then Partial).
func (v *Validator) symbol(st *state, cs *compiled, o *Order) *rules {
	sym, ok := v.stringField(st, fSymbol, true)
	if !ok {
		o.Partial = o.Partial || cs == nil
		return nil
	}
	var buf [48]byte
	s := decoded(buf[:0], st.p.b[sym.lo:sym.hi], sym.esc)
	if cs != nil {
		// A market's symbol is well formed (Catalogue.Set refuses any
		// other): only a symbol the catalogue lacks is checked for form.
		if rs := cs.rules[string(s)]; rs != nil { // no heap copy for a map key
			if !rs.m.Tradable {
				st.rep.add("symbol", "market "+rs.m.Symbol+" is not tradable")
				return nil
			}
			o.Market, o.Symbol = rs.m, rs.m.Symbol
			return rs
		}
	}
	switch {
	case !config.IsSymbol(string(s)): // no heap copy up to 32 bytes, the longest symbol
		st.rep.add("symbol", "must be <BASE>_<QUOTE> of upper-case letters and digits, such as \"BTC_USDT\"")
	case cs == nil:
		o.Partial = true
		o.Symbol = string(s)
	default:
		st.rep.add("symbol", "no market "+strconv.Quote(string(s)))
	}
	return nil
}

// typeAndSide reads the order's type and side into o.
func (v *Validator) typeAndSide(st *state, o *Order) {
	b := st.p.b
	if t, ok := v.stringField(st, fType, true); ok {
		var buf [16]byte
		switch string(decoded(buf[:0], b[t.lo:t.hi], t.esc)) {
		case TypeLimit:
			o.Type = TypeLimit
		case TypeMarket:
			o.Type = TypeMarket
		case TypeStopLimit:
			o.Type = TypeStopLimit
		case TypeOCO:
			o.Type = TypeOCO
		default:
			st.rep.add("type", "must be one of limit, market, stop_limit, oco")
		}
	}
	if s, ok := v.stringField(st, fSide, true); ok {
		var buf [16]byte
		switch string(decoded(buf[:0], b[s.lo:s.hi], s.esc)) {
		case SideBuy:
			o.Side = SideBuy
		case SideSell:
			o.Side = SideSell
		default:
			st.rep.add("side", "must be buy or sell")
		}
	}
}

// identifier reads the order's identifier into o: not empty, at most
// idMax characters, of the allowed characters.
func (v *Validator) identifier(st *state, o *Order) {
	id, ok := v.stringField(st, fIdentifier, v.idRequired)
	if !ok {
		return
	}
	var buf [64]byte
	s := decoded(buf[:0], st.p.b[id.lo:id.hi], id.esc)
	switch {
	case len(s) == 0:
		st.rep.add("identifier", "must not be empty")
		return
	case len(s) > v.idMax:
		st.rep.add("identifier", "must be at most "+strconv.Itoa(v.idMax)+" characters")
		return
	}
	for _, c := range s {
		if !v.idChars[c] {
			st.rep.add("identifier", v.idCharsMsg)
			return
		}
	}
	o.Identifier = string(s)
}

// amounts reads the decimal fields into o and checks them against the
// market's rules (rs, nil without a market), a limit order's
// quote_amount against price × base_amount, and the market's minimum
// order value. The decimals are read and checked in o itself: field
// id's decimal is o.amounts[id-fBaseAmount], o.has[id-fBaseAmount] says
// whether the order carries it.
func (v *Validator) amounts(st *state, rs *rules, o *Order) {
	ds, ok := &o.amounts, &o.has
	for id := fBaseAmount; id <= fOCOTarget; id++ {
		ok[id-fBaseAmount] = v.decimalField(st, id, o.Type, &ds[id-fBaseAmount])
	}
	if rs != nil {
		v.marketRules(st, rs, o)
	}
	const price, base, quote = fPrice - fBaseAmount, fBaseAmount - fBaseAmount, fQuoteAmount - fBaseAmount
	rep := &st.rep
	// A limit order's quote_amount is price × base_amount (trading-api.md).
	if o.Type == TypeLimit && ok[quote] && ok[price] && ok[base] &&
		cmpProduct(&ds[price], &ds[base], &ds[quote]) != 0 {
		rep.add("quote_amount", "must equal price × base_amount ("+product(&ds[price], &ds[base])+") or be omitted")
	}
	if rs != nil && rs.minValue != nil && o.Type != "" {
		switch {
		case o.Type != TypeMarket && ok[price] && ok[base]:
			if cmpProduct(&ds[price], &ds[base], rs.minValue) < 0 {
				rep.add(NonFieldErrors, rs.minValueMsg+" (price × base_amount)")
			}
		case o.Type == TypeMarket && ok[quote]:
			if cmpDec(&ds[quote], rs.minValue) < 0 {
				rep.add(NonFieldErrors, rs.minValueMsg+" (quote_amount)")
			}
		}
	}
}

// stringField returns a field that must be a JSON string. Absent or null
// is refused when required and otherwise returns false quietly; a
// repeated field returns false (already reported).
func (v *Validator) stringField(st *state, id int, req bool) (val, bool) {
	f := st.vals[id]
	switch {
	case f.dup:
		return val{}, false
	case f.kind == kAbsent:
		if req {
			st.rep.add(fieldName(id), "required")
		}
		return val{}, false
	case f.kind == kNull:
		if req {
			st.rep.add(fieldName(id), "must not be null")
		}
		return val{}, false
	case f.kind != kString:
		st.rep.add(fieldName(id), "must be a string, got "+f.kind.jsonName())
		return val{}, false
	case f.hi-f.lo > 256:
		st.rep.add(fieldName(id), "is too long")
		return val{}, false
	}
	return f, true
}

// decimalField reads a decimal field and checks its presence against the
// order type (typ is "" when the type is invalid: presence is then not
// judged) and its value against the market-independent bounds, into d
// (left zero when it reports false).
func (v *Validator) decimalField(st *state, id int, typ string, d *dec) bool {
	f := &st.vals[id]
	if f.dup {
		return false
	}
	u := usage(typ, id)
	if f.kind == kAbsent || f.kind == kNull {
		if u != required {
			return false
		}
		name := fieldName(id)
		switch {
		case typ == "" && f.kind == kAbsent:
			st.rep.add(name, "required")
		case typ == "":
			st.rep.add(name, "must not be null")
		case f.kind == kAbsent:
			st.rep.add(name, "required for "+typ+" orders")
		default:
			st.rep.add(name, "must not be null for "+typ+" orders")
		}
		return false
	}
	name := fieldName(id)
	if u == unused {
		st.rep.add(name, "not used by "+typ+" orders; omit it or send null")
		return false
	}
	var text []byte
	var buf [64]byte
	switch f.kind {
	case kNumber:
		text = st.p.b[f.lo:f.hi]
	case kString:
		if f.hi-f.lo > 256 {
			st.rep.add(name, msgNotDecimal)
			return false
		}
		text = decoded(buf[:0], st.p.b[f.lo:f.hi], f.esc)
	default:
		st.rep.add(name, msgNotDecimal+", got "+f.kind.jsonName())
		return false
	}
	p, msg := parseDec(text)
	if msg != "" {
		st.rep.add(name, msg)
		return false
	}
	*d = p
	return true
}

// marketRules checks o's decimals against the market's precisions,
// price increment and price bounds; a decimal that fails is marked not
// carried (o.has).
func (v *Validator) marketRules(st *state, rs *rules, o *Order) {
	m := rs.m
	ds, ok := &o.amounts, &o.has
	if base := fBaseAmount - fBaseAmount; ok[base] && ds[base].scale > m.BaseAmountPrecision {
		st.rep.add("base_amount", rs.basePlaces)
		ok[base] = false
	}
	if quote := fQuoteAmount - fBaseAmount; ok[quote] && ds[quote].scale > m.QuoteAmountPrecision {
		st.rep.add("quote_amount", rs.quotePlaces)
		ok[quote] = false
	}
	for id := fPrice; id <= fOCOTarget; id++ {
		if !ok[id-fBaseAmount] {
			continue
		}
		d := &ds[id-fBaseAmount]
		switch {
		case !rs.customInc && d.scale > m.PricePrecision:
			st.rep.add(fieldName(id), rs.incMsg)
		case rs.customInc && !isMultiple(d, &rs.increment):
			st.rep.add(fieldName(id), rs.incMsg)
		case rs.customInc && d.scale > m.PricePrecision:
			st.rep.add(fieldName(id), rs.pricePlaces)
		case rs.minPrice != nil && cmpDec(d, rs.minPrice) < 0:
			st.rep.add(fieldName(id), rs.minPriceMsg)
		case rs.maxPrice != nil && cmpDec(d, rs.maxPrice) > 0:
			st.rep.add(fieldName(id), rs.maxPriceMsg)
		default:
			continue
		}
		ok[id-fBaseAmount] = false
	}
}
