package validate

import (
	"bytes"
	"encoding/json"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/shopspring/decimal"

	"github.com/exgate/exgate/config"
)

// The reference is a second, deliberately plain statement of the rules in
// docs/validation.md: encoding/json with UseNumber, shopspring/decimal
// and regular expressions, no code shared with the validator. FuzzCheck
// holds the validator to it in both directions.

// refSpec is the reference's view of the configuration.
type refSpec struct {
	maxBody      int
	allowUnknown bool
	idMax        int
	idChars      string
	markets      map[string]Market
	incr         map[string]decimal.Decimal // price_increment overrides
	minPrice     map[string]decimal.Decimal
	maxPrice     map[string]decimal.Decimal
	minValue     map[string]decimal.Decimal // by symbol, then by quote as "quote:" + code
}

// fuzzConfig is the configuration both the validator and the reference
// use in FuzzCheck.
func fuzzConfig(allow bool) (config.Validation, *refSpec) {
	cfg := config.DefaultValidation()
	if allow {
		cfg.UnknownFields = config.UnknownAllow
	}
	cfg.Markets = map[string]config.MarketRules{
		"BTC_USDT": {PriceIncrement: "0.05", MinPrice: "100", MaxPrice: "1000000", MinValue: "10"},
		"ETH_BTC":  {PriceIncrement: "0.000005"},
	}
	cfg.Quotes = map[string]config.QuoteRules{"USDT": {MinValue: "5"}, "IRT": {MinValue: "100000"}}
	d := decimal.RequireFromString
	r := &refSpec{
		maxBody: 8 << 10, allowUnknown: allow, idMax: 64, idChars: "-_.:",
		markets:  map[string]Market{},
		incr:     map[string]decimal.Decimal{"BTC_USDT": d("0.05"), "ETH_BTC": d("0.000005")},
		minPrice: map[string]decimal.Decimal{"BTC_USDT": d("100")},
		maxPrice: map[string]decimal.Decimal{"BTC_USDT": d("1000000")},
		minValue: map[string]decimal.Decimal{"BTC_USDT": d("10"), "quote:USDT": d("5"), "quote:IRT": d("100000")},
	}
	for _, m := range seedMarkets() {
		r.markets[m.Symbol] = m
	}
	return cfg, r
}

// refResult is the reference's verdict: status 200 for accepted.
type refResult struct {
	status int
	code   string
	fields []string // sorted names, for invalid_order
	// surrogate reports an unpaired \u surrogate escape somewhere, which
	// encoding/json accepts and the validator refuses as a parse error.
	surrogate bool
}

var (
	decimalRE = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)
	symbolRE  = regexp.MustCompile(`^[A-Z0-9]{1,16}_[A-Z0-9]{1,16}$`)
	safeRE    = regexp.MustCompile(`^[A-Za-z0-9_.\-]{1,32}$`)
	surrRE    = regexp.MustCompile(`(?i)\\u[dD][89a-fA-F][0-9a-fA-F]{2}`)
)

// topKey is what the token walk learns about one top-level key.
type topKey struct {
	count     int
	nestedDup bool
}

// walkValue reads one value from d, returning the deepest nesting inside
// it (counting itself) and whether an object in it repeats a key.
func walkValue(d *json.Decoder, depth int) (deepest int, dup bool, err error) {
	tok, err := d.Token()
	if err != nil {
		return 0, false, err
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return depth, false, nil
	}
	deepest = depth + 1
	seen := map[string]bool{}
	for d.More() {
		if delim == '{' {
			k, err := d.Token()
			if err != nil {
				return 0, false, err
			}
			if seen[k.(string)] {
				dup = true
			}
			seen[k.(string)] = true
		}
		n, du, err := walkValue(d, depth+1)
		if err != nil {
			return 0, false, err
		}
		deepest, dup = max(deepest, n), dup || du
	}
	_, err = d.Token() // closing delimiter
	return deepest, dup, err
}

// reference is the fuzz tests' model of Check: it reads body with
// encoding/json and the rules written out plainly, and says what Check must
// answer.
func reference(r *refSpec, body []byte) refResult {
	res := refResult{surrogate: surrRE.Match(body)}
	if len(body) > r.maxBody {
		return refResult{status: 413, code: CodeTooLarge}
	}
	if !utf8.Valid(body) || !json.Valid(body) {
		return refResult{status: 400, code: CodeParseError}
	}
	keys, object, ok := refTopKeys(body)
	switch {
	case !ok:
		return refResult{status: 400, code: CodeParseError}
	case !object:
		res.status, res.code, res.fields = 400, CodeInvalidOrder, []string{NonFieldErrors}
		return res
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		panic(err) // json.Valid said yes
	}

	b := &refBody{r: r, keys: keys, m: m, fields: map[string]bool{}}
	b.checkKeys()
	market, typ := b.checkStrings()
	vals := b.decimals(typ)
	if market != nil {
		b.checkMarketRules(market, vals)
	}
	b.checkTotals(market, typ, vals)
	if len(b.fields) == 0 {
		res.status = 200
		return res
	}
	res.status, res.code = 400, CodeInvalidOrder
	res.fields = slices.Sorted(maps.Keys(b.fields))
	return res
}

// refTopKeys walks a valid JSON body and counts its top-level keys. object
// reports whether the body is an object at all; ok is false when the body
// nests deeper than MaxDepth.
func refTopKeys(body []byte) (keys map[string]*topKey, object, ok bool) {
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber() // numbers must not pass through float64 even here
	keys = map[string]*topKey{}
	tok, _ := d.Token()
	if tok != json.Delim('{') {
		d = json.NewDecoder(bytes.NewReader(body))
		d.UseNumber()
		if n, _, err := walkValue(d, 0); err != nil || n > MaxDepth {
			return nil, false, false
		}
		return nil, false, true
	}
	for d.More() {
		k, _ := d.Token()
		n, dup, err := walkValue(d, 1)
		if err != nil || n > MaxDepth {
			return nil, true, false
		}
		tk := keys[k.(string)]
		if tk == nil {
			tk = &topKey{}
			keys[k.(string)] = tk
		}
		tk.count++
		tk.nestedDup = tk.nestedDup || dup
	}
	return keys, true, true
}

// refBody is one JSON object body as the reference reads it: its top-level
// keys, their raw values, and the fields found wrong so far.
type refBody struct {
	r      *refSpec
	keys   map[string]*topKey
	m      map[string]json.RawMessage
	fields map[string]bool
}

// repeated reports whether key k appears more than once at the top level.
func (b *refBody) repeated(k string) bool { return b.keys[k] != nil && b.keys[k].count > 1 }

// get returns a known field's raw value, or nil when absent or
// repeated (repeats are already reported).
func (b *refBody) get(k string) json.RawMessage {
	if b.keys[k] == nil || b.repeated(k) {
		return nil
	}
	return b.m[k]
}

// isNullRaw reports whether a raw value is absent or JSON null.
func isNullRaw(raw json.RawMessage) bool { return raw == nil || string(raw) == "null" }

// str returns field k's string value, marking the field wrong when it is
// not a string of at most 256 bytes, or when it is required and missing.
func (b *refBody) str(k string, required bool) (string, bool) {
	raw := b.get(k)
	if isNullRaw(raw) {
		if required && !b.repeated(k) {
			b.fields[k] = true
		}
		return "", false
	}
	var s string
	if raw[0] != '"' || len(raw)-2 > 256 || json.Unmarshal(raw, &s) != nil {
		b.fields[k] = true
		return "", false
	}
	return s, true
}

// checkKeys marks known fields that are repeated, and unknown fields unless
// the configuration allows them.
func (b *refBody) checkKeys() {
	known := []string{"symbol", "type", "side", "base_amount", "quote_amount", "price", "stop_price", "oco_target_price", "identifier"}
	for k, tk := range b.keys {
		name := k
		if !safeRE.MatchString(k) {
			name = NonFieldErrors
		}
		switch {
		case slices.Contains(known, k):
			if tk.count > 1 {
				b.fields[k] = true
			}
		case !b.r.allowUnknown || tk.count > 1 || tk.nestedDup:
			b.fields[name] = true
		}
	}
}

// checkStrings checks symbol, type, side and identifier, and returns the
// order's market and type when they are good (nil and "" otherwise).
func (b *refBody) checkStrings() (market *Market, typ string) {
	r := b.r
	if s, ok := b.str("symbol", true); ok {
		mk, found := r.markets[s]
		switch {
		case !symbolRE.MatchString(s) || len(s) > 32 || !found || !mk.Tradable:
			b.fields["symbol"] = true
		default:
			market = &mk
		}
	}
	if s, ok := b.str("type", true); ok {
		if slices.Contains([]string{"limit", "market", "stop_limit", "oco"}, s) {
			typ = s
		} else {
			b.fields["type"] = true
		}
	}
	if s, ok := b.str("side", true); ok && s != "buy" && s != "sell" {
		b.fields["side"] = true
	}
	if s, ok := b.str("identifier", false); ok {
		good := len(s) >= 1 && len(s) <= r.idMax
		for _, c := range []byte(s) {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte(r.idChars, c) >= 0) {
				good = false
			}
		}
		if !good {
			b.fields["identifier"] = true
		}
	}
	return market, typ
}

// decimals reads the decimal fields an order of type typ needs, marks those
// missing, unused or malformed, and returns the values of the good ones.
func (b *refBody) decimals(typ string) map[string]decimal.Decimal {
	need := map[string]string{"base_amount": "required", "quote_amount": "optional"}
	for _, k := range []string{"price", "stop_price", "oco_target_price"} {
		need[k] = "optional"
	}
	switch typ {
	case "limit":
		need["price"], need["stop_price"], need["oco_target_price"] = "required", "unused", "unused"
	case "market":
		need["price"], need["stop_price"], need["oco_target_price"] = "unused", "unused", "unused"
	case "stop_limit":
		need["price"], need["stop_price"], need["oco_target_price"] = "required", "required", "unused"
	case "oco":
		need["price"], need["stop_price"], need["oco_target_price"] = "required", "required", "required"
	}
	vals := map[string]decimal.Decimal{}
	for k, n := range need {
		raw := b.get(k)
		if b.repeated(k) {
			continue
		}
		if isNullRaw(raw) {
			if n == "required" {
				b.fields[k] = true
			}
			continue
		}
		if n == "unused" {
			b.fields[k] = true
			continue
		}
		text := string(raw)
		if raw[0] == '"' {
			if len(raw)-2 > 256 || json.Unmarshal(raw, &text) != nil {
				b.fields[k] = true
				continue
			}
		} else if raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
			b.fields[k] = true // boolean, object, array
			continue
		}
		v, ok := refDecimal(text)
		if !ok {
			b.fields[k] = true
			continue
		}
		vals[k] = v
	}
	return vals
}

// refPlaces returns the number of decimal places v needs.
func refPlaces(v decimal.Decimal) int {
	for p := 0; ; p++ {
		if v.Truncate(int32(p)).Equal(v) {
			return p
		}
	}
}

// checkMarketRules marks the decimals that break market's precision,
// price increment or price bounds, and drops them from vals.
func (b *refBody) checkMarketRules(market *Market, vals map[string]decimal.Decimal) {
	r := b.r
	check := func(k string, bad bool) {
		if _, ok := vals[k]; ok && bad {
			b.fields[k] = true
			delete(vals, k)
		}
	}
	check("base_amount", refPlaces(vals["base_amount"]) > market.BaseAmountPrecision)
	check("quote_amount", refPlaces(vals["quote_amount"]) > market.QuoteAmountPrecision)
	for _, k := range []string{"price", "stop_price", "oco_target_price"} {
		v := vals[k]
		bad := refPlaces(v) > market.PricePrecision
		if inc, ok := r.incr[market.Symbol]; ok && !v.Mod(inc).IsZero() {
			bad = true
		}
		if lo, ok := r.minPrice[market.Symbol]; ok && v.LessThan(lo) {
			bad = true
		}
		if hi, ok := r.maxPrice[market.Symbol]; ok && v.GreaterThan(hi) {
			bad = true
		}
		check(k, bad)
	}
}

// checkTotals marks a limit order's quote_amount that is not price ×
// base_amount, and an order worth less than its market's minimum value.
func (b *refBody) checkTotals(market *Market, typ string, vals map[string]decimal.Decimal) {
	price, hasPrice := vals["price"]
	base, hasBase := vals["base_amount"]
	quote, hasQuote := vals["quote_amount"]
	if typ == "limit" && hasPrice && hasBase && hasQuote && !price.Mul(base).Equal(quote) {
		b.fields["quote_amount"] = true
	}
	if market != nil && typ != "" {
		minV, ok := b.r.minValue[market.Symbol]
		if !ok {
			minV, ok = b.r.minValue["quote:"+market.Quote]
		}
		switch {
		case !ok:
		case typ != "market" && hasPrice && hasBase && price.Mul(base).LessThan(minV):
			b.fields[NonFieldErrors] = true
		case typ == "market" && hasQuote && quote.LessThan(minV):
			b.fields[NonFieldErrors] = true
		}
	}
}

// refDecimal reads a decimal field's text and applies the bounds every
// decimal obeys: JSON number syntax, > 0, < 10^20, at most 30 places.
func refDecimal(text string) (decimal.Decimal, bool) {
	if !decimalRE.MatchString(text) {
		return decimal.Decimal{}, false
	}
	mant, exp := text, 0
	if i := strings.IndexAny(text, "eE"); i >= 0 {
		mant = text[:i]
		e, err := strconv.Atoi(text[i+1:])
		if err != nil || e > 10000 || e < -10000 {
			// Such exponents are out of bounds whatever the mantissa
			// (or leave zero at zero); decide without big arithmetic.
			return decimal.Decimal{}, false
		}
		exp = e
	}
	v, err := decimal.NewFromString(mant)
	if err != nil {
		return decimal.Decimal{}, false
	}
	v = v.Shift(int32(exp))
	if !v.IsPositive() || v.GreaterThanOrEqual(decimal.New(1, MaxIntegerDigits)) ||
		!v.Truncate(MaxDecimalPlaces).Equal(v) {
		return decimal.Decimal{}, false
	}
	return v, true
}

func FuzzCheck(f *testing.F) {
	for _, c := range fixCases(edgeCases()) {
		f.Add(false, []byte(c.body))
	}
	for _, b := range []string{
		typicalLimitOrder,
		limit("quote_amount", `"97.50"`, "extra", `{"a":[1,{"b":2}]}`),
		edit(limitBase, "symbol", `"ETH_BTC"`, "price", `"0.049505"`, "base_amount", `"3"`),
		edit(limitBase, "symbol", `"USDT_IRT"`, "price", `"92000"`, "base_amount", `"1.5"`),
		market("quote_amount", `"4.99"`),
		edit(ocoBase, "price", `"1000000.05"`),
		limit("price", `"1e-2"`, "base_amount", `"1e3"`),
	} {
		f.Add(false, []byte(b))
		f.Add(true, []byte(b))
	}
	validators := map[bool]*Validator{}
	specs := map[bool]*refSpec{}
	for _, allow := range []bool{false, true} {
		cfg, spec := fuzzConfig(allow)
		cat := unloadedCatalogue(f)
		if err := cat.Set(seedMarkets()); err != nil {
			f.Fatal(err)
		}
		v, err := New(cfg, cat, nil)
		if err != nil {
			f.Fatal(err)
		}
		validators[allow], specs[allow] = v, spec
	}
	f.Fuzz(func(t *testing.T, allow bool, body []byte) {
		orig := bytes.Clone(body)
		o, p := validators[allow].Check(jsonCT, body)
		if !bytes.Equal(orig, body) {
			t.Fatal("Check modified the body")
		}
		if p != nil {
			checkProblem(t, body, p)
			if p.Status >= 500 {
				t.Fatalf("status %d with a loaded catalogue", p.Status)
			}
		}
		want := reference(specs[allow], body)
		if p != nil && p.Code == CodeParseError && strings.Contains(p.Detail, "surrogate") && want.surrogate {
			return // encoding/json accepts unpaired surrogate escapes; the validator refuses them
		}
		switch {
		case p == nil && want.status != 200:
			t.Fatalf("accepted %q (order %+v); the reference says %d %s %v", body, o, want.status, want.code, want.fields)
		case p == nil:
			if o.Market == nil || o.Type == "" || o.Side == "" {
				t.Fatalf("accepted order %+v", o)
			}
			checkCanonical(t, validators[allow], body, &o)
		case want.status == 200:
			t.Fatalf("refused %q with %d %s %v; the reference accepts it", body, p.Status, p.Code, p.Fields)
		case p.Status != want.status || p.Code != want.code:
			t.Fatalf("%q: %d %s (%s), reference %d %s", body, p.Status, p.Code, p.Detail, want.status, want.code)
		case p.Code == CodeInvalidOrder:
			got := slices.Sorted(maps.Keys(p.Fields))
			if !slices.Equal(got, want.fields) {
				t.Fatalf("%q: fields %v, reference %v", body, p.Fields, want.fields)
			}
		}
	})
}

// TestReferenceAgreesOnTable runs the reference over the edge-case table,
// so that a wrong reference cannot hide behind a passing fuzzer.
func TestReferenceAgreesOnTable(t *testing.T) {
	_, spec := fuzzConfig(false)
	spec.incr, spec.minPrice, spec.maxPrice, spec.minValue = nil, nil, nil, nil
	for _, c := range fixCases(edgeCases()) {
		want := reference(spec, []byte(c.body))
		if want.surrogate && c.code == CodeParseError && want.code != c.code {
			continue
		}
		if want.status != c.status || want.code != c.code || (c.code == CodeInvalidOrder && !slices.Equal(want.fields, c.fields)) {
			t.Errorf("%s: reference %d %s %v, table %d %s %v", c.name, want.status, want.code, want.fields, c.status, c.code, c.fields)
		}
	}
}
