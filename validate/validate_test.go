package validate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/exgate/exgate/apierror"
	"github.com/exgate/exgate/config"
)

// field is one raw member of a test body.
type field struct{ key, raw string }

// obj writes members as a JSON object, byte for byte.
func obj(fs ...field) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, f := range fs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"` + f.key + `":` + f.raw)
	}
	b.WriteByte('}')
	return b.String()
}

// edit returns base with members replaced (same key), added (new key) or
// removed (raw "-"), given as key, raw pairs.
func edit(base []field, kv ...string) string {
	fs := slices.Clone(base)
	for i := 0; i+1 < len(kv); i += 2 {
		k, raw := kv[i], kv[i+1]
		j := slices.IndexFunc(fs, func(f field) bool { return f.key == k })
		switch {
		case raw == "-" && j >= 0:
			fs = slices.Delete(fs, j, j+1)
		case j >= 0:
			fs[j].raw = raw
		case raw != "-":
			fs = append(fs, field{k, raw})
		}
	}
	return obj(fs...)
}

var (
	limitBase = []field{{"symbol", `"BTC_USDT"`}, {"type", `"limit"`}, {"side", `"buy"`},
		{"price", `"65000.00"`}, {"base_amount", `"0.0015"`}}
	marketBase = []field{{"symbol", `"BTC_USDT"`}, {"type", `"market"`}, {"side", `"sell"`},
		{"base_amount", `"0.5"`}}
	stopBase = []field{{"symbol", `"BTC_USDT"`}, {"type", `"stop_limit"`}, {"side", `"sell"`},
		{"price", `"64000.00"`}, {"stop_price", `"64100.00"`}, {"base_amount", `"0.01"`}}
	ocoBase = []field{{"symbol", `"BTC_USDT"`}, {"type", `"oco"`}, {"side", `"sell"`},
		{"price", `"66000.00"`}, {"stop_price", `"64000.00"`}, {"oco_target_price", `"63900.00"`}, {"base_amount", `"0.01"`}}
)

func limit(kv ...string) string  { return edit(limitBase, kv...) }
func market(kv ...string) string { return edit(marketBase, kv...) }

// bodyCase is one row of the edge-case tables: a body and the answer it
// must get. fields lists exactly the field names the problem must name
// (sorted); msg, when set, must be one of the messages.
type bodyCase struct {
	name   string
	body   string
	status int
	code   string
	fields []string
	msg    string
}

// Shorthands for the expected answer.
const (
	ok400 = 400
	ok200 = 200
)

func bad(name, body string, fields []string, msg string) bodyCase {
	return bodyCase{name, body, ok400, CodeInvalidOrder, fields, msg}
}

func good(name, body string) bodyCase { return bodyCase{name: name, body: body, status: ok200} }

func parseErr(name, body string) bodyCase {
	return bodyCase{name: name, body: body, status: ok400, code: CodeParseError}
}

func f(names ...string) []string { return names }

const (
	nf = NonFieldErrors
)

// edgeCases is the main table: default configuration, the reference
// backend's markets.
func edgeCases() []bodyCase {
	return slices.Concat(acceptedOrderCases(), decimalValueCases(), presenceCases(),
		marketRuleCases(), stringCases(), keyAndShapeCases(), malformedJSONCases())
}

// acceptedOrderCases are well-formed orders of every type that the default configuration accepts.
func acceptedOrderCases() []bodyCase {
	return []bodyCase{
		good("limit order", limit()),
		good("limit order, decimals as numbers", limit("price", `65000`, "base_amount", `0.0015`)),
		good("limit order with matching quote_amount", limit("quote_amount", `"97.50"`)),
		good("quote_amount as a number, fewer zeros", limit("quote_amount", `97.5`)),
		good("market order", market()),
		good("market order with quote_amount", market("quote_amount", `"100.25"`)),
		good("market order with null prices", market("price", `null`, "stop_price", `null`, "oco_target_price", `null`)),
		good("stop_limit order", edit(stopBase)),
		good("stop_limit with quote_amount not equal to price × base", edit(stopBase, "quote_amount", `"1.00"`)),
		good("oco order", edit(ocoBase)),
		good("identifier", limit("identifier", `"abc-123_X.y:z"`)),
		good("identifier null", limit("identifier", `null`)),
		good("identifier of 64 characters", limit("identifier", `"`+strings.Repeat("a", 64)+`"`)),
		good("price in exponent form as a string", limit("price", `"6.5e4"`)),
		good("price in exponent form as a number", limit("price", `6.5E+4`)),
		good("amount 1.5e-3 as a number", limit("base_amount", `1.5e-3`)),
		good("amount 1.5E-3 as a string", limit("base_amount", `"1.5E-3"`)),
		good("trailing zeros past the precision", limit("base_amount", `"0.00150000000"`)),
		good("price with six zero decimals", limit("price", `"65000.000000"`)),
		good("40-digit amount whose value is 1", limit("base_amount", `"1.000000000000000000000000000000000000000"`)),
		good("white space around and inside", " \t\n{ \"symbol\" : \"BTC_USDT\" ,\r\n\"type\":\"limit\", \"side\":\"buy\",\"price\":\"65000.00\",\"base_amount\":\"0.0015\" } \n"),
		good("escaped key", limit("price", "-", `pr\u0069ce`, `"65000.00"`)),
		good("escaped symbol", limit("symbol", `"BTC\u005fUSDT"`)),
		good("ETH_BTC price with six places", edit(limitBase, "symbol", `"ETH_BTC"`, "price", `"0.049500"`, "base_amount", `"2.5"`)),
		good("BTC_IRT whole price and 8-place amount", edit(limitBase, "symbol", `"BTC_IRT"`, "price", `"6000000000"`, "base_amount", `"0.00000001"`)),
		good("1e-7 fits BTC_IRT's 8 places", edit(limitBase, "symbol", `"BTC_IRT"`, "price", `6e9`, "base_amount", `1e-7`)),
		good("20-digit amount", edit(limitBase, "symbol", `"USDT_IRT"`, "price", `"1"`, "base_amount", `"99999999999999999999"`)),
		good("fields in another order", obj(field{"base_amount", `"1"`}, field{"side", `"sell"`}, field{"price", `"3200.5"`}, field{"type", `"limit"`}, field{"symbol", `"ETH_USDT"`})),
	}
}

// decimalValueCases are amounts and prices that are not positive, finite, plain decimals within range.
func decimalValueCases() []bodyCase {
	return []bodyCase{
		bad(`"0"`, limit("base_amount", `"0"`), f("base_amount"), msgPositive),
		bad(`"-1"`, limit("base_amount", `"-1"`), f("base_amount"), msgPositive),
		bad(`"-0"`, limit("base_amount", `"-0"`), f("base_amount"), msgPositive),
		bad("number 0", limit("base_amount", `0`), f("base_amount"), msgPositive),
		bad("number -1", limit("price", `-1`), f("price"), msgPositive),
		bad(`"0.000"`, limit("price", `"0.000"`), f("price"), msgPositive),
		bad("0e10", limit("price", `0e10`), f("price"), msgPositive),
		bad(`"1e400"`, limit("base_amount", `"1e400"`), f("base_amount"), msgTooLarge),
		bad("number 1e400", limit("base_amount", `1e400`), f("base_amount"), msgTooLarge),
		bad("exponent with 30 digits", limit("price", `1e999999999999999999999999999999`), f("price"), msgTooLarge),
		bad(`"1e-400"`, limit("base_amount", `"1e-400"`), f("base_amount"), msgTooPrecise),
		bad(`"1e-9"`, limit("base_amount", `"1e-9"`), f("base_amount"), "must have at most 6 decimal places"),
		bad("number 1e-9", limit("base_amount", `1e-9`), f("base_amount"), "must have at most 6 decimal places"),
		bad("1e-7 over BTC_USDT's 6 places", limit("base_amount", `1e-7`), f("base_amount"), "must have at most 6 decimal places"),
		bad(`"00.10"`, limit("base_amount", `"00.10"`), f("base_amount"), msgLeadingZero),
		bad(`"01"`, limit("base_amount", `"01"`), f("base_amount"), msgLeadingZero),
		bad(`".5"`, limit("base_amount", `".5"`), f("base_amount"), msgNotDecimal),
		bad(`"5."`, limit("base_amount", `"5."`), f("base_amount"), msgNotDecimal),
		bad(`" 1"`, limit("base_amount", `" 1"`), f("base_amount"), msgSpaces),
		bad(`"1 "`, limit("base_amount", `"1 "`), f("base_amount"), msgSpaces),
		bad(`escaped tab "\t1"`, limit("base_amount", `"\t1"`), f("base_amount"), msgSpaces),
		bad(`"NaN"`, limit("price", `"NaN"`), f("price"), msgNotFinite),
		bad(`"nan"`, limit("price", `"nan"`), f("price"), msgNotFinite),
		bad(`"Infinity"`, limit("price", `"Infinity"`), f("price"), msgNotFinite),
		bad(`"-Infinity"`, limit("price", `"-Infinity"`), f("price"), msgNotFinite),
		bad(`"inf"`, limit("price", `"inf"`), f("price"), msgNotFinite),
		bad(`"sNaN"`, limit("price", `"sNaN"`), f("price"), msgNotFinite),
		bad(`""`, limit("base_amount", `""`), f("base_amount"), msgEmpty),
		bad(`"+1"`, limit("base_amount", `"+1"`), f("base_amount"), msgNotDecimal),
		bad(`"1,000"`, limit("base_amount", `"1,000"`), f("base_amount"), msgNotDecimal),
		bad(`"1_000"`, limit("base_amount", `"1_000"`), f("base_amount"), msgNotDecimal),
		bad(`"0x10"`, limit("base_amount", `"0x10"`), f("base_amount"), msgNotDecimal),
		bad("Arabic-Indic digit", limit("base_amount", `"١"`), f("base_amount"), msgNotDecimal),
		bad("fullwidth digit", limit("base_amount", `"１"`), f("base_amount"), msgNotDecimal),
		bad("escaped fullwidth digit", limit("base_amount", `"\uff11"`), f("base_amount"), msgNotDecimal),
		bad("Devanagari digits after an ASCII one", limit("base_amount", `"1२"`), f("base_amount"), msgNotDecimal),
		bad(`"1.2.3"`, limit("base_amount", `"1.2.3"`), f("base_amount"), msgNotDecimal),
		bad(`"1e"`, limit("base_amount", `"1e"`), f("base_amount"), msgNotDecimal),
		bad(`"1e+"`, limit("base_amount", `"1e+"`), f("base_amount"), msgNotDecimal),
		bad("40-digit integer string", limit("base_amount", `"1234567890123456789012345678901234567890"`), f("base_amount"), msgTooLarge),
		bad("40-digit integer number", limit("base_amount", `1234567890123456789012345678901234567890`), f("base_amount"), msgTooLarge),
		bad("21-digit amount", limit("base_amount", `"100000000000000000000"`), f("base_amount"), msgTooLarge),
		bad("40 decimal places", limit("base_amount", `"0.0000000000000000000000000000000000000001"`), f("base_amount"), msgTooPrecise),
		bad("40-digit fraction", limit("base_amount", `"0.1234567890123456789012345678901234567890"`), f("base_amount"), msgTooPrecise),
		bad("boolean amount", limit("base_amount", `true`), f("base_amount"), msgNotDecimal+", got a boolean"),
		bad("false price", limit("price", `false`), f("price"), msgNotDecimal+", got a boolean"),
		bad("object amount", limit("base_amount", `{}`), f("base_amount"), msgNotDecimal+", got an object"),
		bad("object with a value", limit("base_amount", `{"value":"1"}`), f("base_amount"), msgNotDecimal+", got an object"),
		bad("array amount", limit("base_amount", `[]`), f("base_amount"), msgNotDecimal+", got an array"),
		bad("array with a value", limit("price", `["65000"]`), f("price"), msgNotDecimal+", got an array"),
	}
}

// presenceCases are prices and amounts missing, null or present where the order type says otherwise.
func presenceCases() []bodyCase {
	return []bodyCase{
		bad("base_amount null", limit("base_amount", `null`), f("base_amount"), "must not be null for limit orders"),
		bad("base_amount missing", limit("base_amount", "-"), f("base_amount"), "required for limit orders"),
		bad("base_amount missing on a market order", market("base_amount", "-"), f("base_amount"), "required for market orders"),
		bad("price missing on a limit order", limit("price", "-"), f("price"), "required for limit orders"),
		bad("price null on a limit order", limit("price", `null`), f("price"), "must not be null for limit orders"),
		bad("price on a market order", market("price", `"65000.00"`), f("price"), "not used by market orders; omit it or send null"),
		bad("stop_price on a limit order", limit("stop_price", `"1.00"`), f("stop_price"), "not used by limit orders; omit it or send null"),
		bad("oco_target_price on a stop_limit order", edit(stopBase, "oco_target_price", `"1.00"`), f("oco_target_price"), "not used by stop_limit orders; omit it or send null"),
		bad("stop_price missing on stop_limit", edit(stopBase, "stop_price", "-"), f("stop_price"), "required for stop_limit orders"),
		bad("price missing on stop_limit", edit(stopBase, "price", "-"), f("price"), "required for stop_limit orders"),
		bad("oco_target_price missing on oco", edit(ocoBase, "oco_target_price", "-"), f("oco_target_price"), "required for oco orders"),
		bad("oco with every price null", edit(ocoBase, "price", `null`, "stop_price", `null`, "oco_target_price", `null`), f("oco_target_price", "price", "stop_price"), ""),
	}
}

// marketRuleCases break a market's price increment, amount precision or quote_amount rule.
func marketRuleCases() []bodyCase {
	return []bodyCase{
		bad("price 65000.001", limit("price", `"65000.001"`), f("price"), "must be a multiple of 0.01"),
		bad("price 65000.005 as a number", limit("price", `65000.005`), f("price"), "must be a multiple of 0.01"),
		bad("price 6.5000001e4", limit("price", `6.5000001e4`), f("price"), "must be a multiple of 0.01"),
		bad("stop price off the increment", edit(stopBase, "stop_price", `"64100.123"`), f("stop_price"), "must be a multiple of 0.01"),
		bad("BTC_IRT price with decimals", edit(limitBase, "symbol", `"BTC_IRT"`, "price", `"6000000000.5"`), f("price"), "must be a multiple of 1"),
		bad("amount with 7 places", limit("base_amount", `"0.0000001"`), f("base_amount"), "must have at most 6 decimal places"),
		bad("USDT_IRT amount with 3 places", edit(limitBase, "symbol", `"USDT_IRT"`, "price", `"92000"`, "base_amount", `"1.001"`), f("base_amount"), "must have at most 2 decimal places"),
		bad("quote_amount with 3 places", limit("quote_amount", `"97.505"`), f("quote_amount"), "must have at most 2 decimal places"),
		bad("quote_amount not price × base", limit("quote_amount", `"97.51"`), f("quote_amount"), "must equal price × base_amount (97.5) or be omitted"),
		bad("quote_amount 100 on a limit order", limit("quote_amount", `100`), f("quote_amount"), "must equal price × base_amount (97.5) or be omitted"),
		bad("market quote_amount with 3 places", market("quote_amount", `"0.001"`), f("quote_amount"), "must have at most 2 decimal places"),
	}
}

// stringCases are symbols, types, sides and identifiers that are missing, mistyped or malformed.
func stringCases() []bodyCase {
	return []bodyCase{
		bad("symbol missing", limit("symbol", "-"), f("symbol"), "required"),
		bad("symbol null", limit("symbol", `null`), f("symbol"), "must not be null"),
		bad("symbol a number", limit("symbol", `123`), f("symbol"), "must be a string, got a number"),
		bad("symbol lower case", limit("symbol", `"btc_usdt"`), f("symbol"), `must be <BASE>_<QUOTE> of upper-case letters and digits, such as "BTC_USDT"`),
		bad("symbol without underscore", limit("symbol", `"BTCUSDT"`), f("symbol"), ""),
		bad("symbol with a dash", limit("symbol", `"BTC-USDT"`), f("symbol"), ""),
		bad("symbol with a Cyrillic letter", limit("symbol", `"BTC_USDТ"`), f("symbol"), ""),
		bad("symbol of 300 bytes", limit("symbol", `"`+strings.Repeat("A", 300)+`"`), f("symbol"), "is too long"),
		bad("unknown market", limit("symbol", `"DOGE_USDT"`), f("symbol"), `no market "DOGE_USDT"`),
		bad("market not tradable", edit(limitBase, "symbol", `"LUNC_USDT"`, "price", `"0.00010000"`, "base_amount", `"10"`), f("symbol"), "market LUNC_USDT is not tradable"),
		bad("type missing", limit("type", "-"), f("type"), "required"),
		bad("type upper case", limit("type", `"LIMIT"`), f("type"), "must be one of limit, market, stop_limit, oco"),
		bad("type stop-limit", limit("type", `"stop-limit"`), f("type"), ""),
		bad("type a number", limit("type", `1`), f("type"), "must be a string, got a number"),
		bad("type null", limit("type", `null`), f("type"), "must not be null"),
		bad("side upper case", limit("side", `"BUY"`), f("side"), "must be buy or sell"),
		bad("side missing", limit("side", "-"), f("side"), "required"),
		bad("side boolean", limit("side", `true`), f("side"), "must be a string, got a boolean"),
		bad("identifier empty", limit("identifier", `""`), f("identifier"), "must not be empty"),
		bad("identifier of 65 characters", limit("identifier", `"`+strings.Repeat("a", 65)+`"`), f("identifier"), "must be at most 64 characters"),
		bad("identifier with a space", limit("identifier", `"has space"`), f("identifier"), `may contain only letters, digits and "-_.:"`),
		bad("identifier with non-ASCII letters", limit("identifier", `"ünïcode"`), f("identifier"), ""),
		bad("identifier a number", limit("identifier", `123`), f("identifier"), "must be a string, got a number"),
		bad("identifier with an escaped NUL", limit("identifier", `"a\u0000b"`), f("identifier"), ""),
		bad("identifier with a slash", limit("identifier", `"a/b"`), f("identifier"), ""),
		bad("every field wrong at once", obj(field{"symbol", `"x"`}, field{"type", `"y"`}, field{"side", `"z"`}, field{"base_amount", `"0"`}, field{"identifier", `""`}),
			f("base_amount", "identifier", "side", "symbol", "type"), ""),
		bad("empty object", `{}`, f("base_amount", "side", "symbol", "type"), ""),
	}
}

// keyAndShapeCases are repeated or unknown keys and bodies that are not a JSON object.
func keyAndShapeCases() []bodyCase {
	return []bodyCase{
		bad("price twice", limit("price", `"65000.00"`)+"", nil, ""), // replaced below
		bad("unknown field", limit("foo", `1`), f("foo"), "unknown field"),
		bad("unknown field differing in case", limit("Price", `"1"`), f("Price"), "unknown field"),
		bad("unknown field with a long name", limit(strings.Repeat("x", 40), `1`), f(nf), ""),
		bad("unknown field with an odd name", limit(`a b`, `1`), f(nf), ""),
		bad("unknown field repeated", limit("foo", `1`)[:len(limit("foo", `1`))-1]+`,"foo":2}`, f("foo"), "unknown field"),

		// Not an object.
		bad("array", `[]`, f(nf), "expected a JSON object, got an array"),
		bad("string", `"order"`, f(nf), "expected a JSON object, got a string"),
		bad("null", `null`, f(nf), "expected a JSON object, got null"),
		bad("number", ` 42 `, f(nf), "expected a JSON object, got a number"),
	}
}

// malformedJSONCases are bodies that are not valid JSON, or JSON nested too deeply.
func malformedJSONCases() []bodyCase {
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	return []bodyCase{
		parseErr("empty body", ``),
		parseErr("white space only", " \n\t "),
		parseErr("trailing object", limit()+` {}`),
		parseErr("trailing garbage", limit()+`x`),
		parseErr("trailing NUL", limit()+"\x00"),
		parseErr("two objects", `{}{}`),
		parseErr("trailing comma", `{"symbol":"BTC_USDT",}`),
		parseErr("unterminated", `{"symbol":"BTC_USDT"`),
		parseErr("unterminated string", `{"symbol":"BTC_USDT`),
		parseErr("missing colon", `{"symbol" "BTC_USDT"}`),
		parseErr("single quotes", `{'symbol':'BTC_USDT'}`),
		parseErr("unquoted key", `{symbol:"BTC_USDT"}`),
		parseErr("bare NaN", limit("price", `NaN`)),
		parseErr("bare Infinity", limit("price", `Infinity`)),
		parseErr("number with leading zero", limit("price", `01`)),
		parseErr("number with trailing dot", limit("price", `1.`)),
		parseErr("number with leading dot", limit("price", `.5`)),
		parseErr("number with plus", limit("price", `+1`)),
		parseErr("lone minus", `{"symbol":"BTC_USDT","price":-}`),
		parseErr("minus without digits", `{"price":-x}`),
		parseErr("hex number", limit("price", `0x10`)),
		parseErr("raw newline in a string", limit("identifier", "\"a\nb\"")),
		parseErr("invalid escape", limit("identifier", `"a\xb"`)),
		parseErr("short unicode escape", limit("identifier", `"\u12"`)),
		parseErr("invalid UTF-8 in a string", limit("identifier", "\"a\xffb\"")),
		parseErr("invalid UTF-8 in a key", limit("\xff", `1`)),
		parseErr("invalid UTF-8 outside strings", "{\xff}"),
		parseErr("overlong UTF-8", limit("identifier", "\"\xc0\xaf\"")),
		parseErr("UTF-8-encoded surrogate", limit("identifier", "\"\xed\xa0\x80\"")),
		parseErr("truncated UTF-8", limit("identifier", "\"\xe2\x82\"")),
		parseErr("lone high surrogate escape", limit("identifier", `"\ud800"`)),
		parseErr("lone low surrogate escape", limit("identifier", `"\udc00"`)),
		parseErr("reversed surrogates", limit("identifier", `"\udc00\ud800"`)),
		parseErr("byte order mark", "\xef\xbb\xbf"+limit()),
		parseErr("comment", `{/* c */"symbol":"BTC_USDT"}`),
		parseErr("nested deeper than 32 levels", limit("x", deep(40))),
		parseErr("very deep nesting", strings.Repeat("[", 5000)),
		parseErr("True in capitals", limit("x", `True`)),
		parseErr("nul literal", limit("x", `nul`)),
		parseErr("key not a string", `{1:2}`),
		parseErr("missing value", `{"symbol":}`),
		parseErr("missing comma", `{"symbol":"BTC_USDT" "type":"limit"}`),
		parseErr("unclosed array", limit("x", `[1,2`)),
		parseErr("array trailing comma", limit("x", `[1,]`)),
	}
}

// fixCases replaces the rows that need bodies edit cannot write.
func fixCases(cases []bodyCase) []bodyCase {
	for i, c := range cases {
		if c.name == "price twice" {
			cases[i] = bad("price twice", `{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"65000.00","price":"1","base_amount":"0.0015"}`, f("price"), "must appear only once")
		}
	}
	return append(cases,
		bad("symbol twice", `{"symbol":"BTC_USDT","symbol":"ETH_USDT","type":"limit","side":"buy","price":"65000.00","base_amount":"0.0015"}`, f("symbol"), "must appear only once"),
		bad("price twice, once escaped", `{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"65000.00","pr\u0069ce":"1","base_amount":"0.0015"}`, f("price"), "must appear only once"),
		bad("identifier twice, same value", limit("identifier", `"a"`)[:len(limit("identifier", `"a"`))-1]+`,"identifier":"a"}`, f("identifier"), "must appear only once"),
		bad("base_amount twice and type twice", `{"symbol":"BTC_USDT","type":"limit","type":"market","side":"buy","price":"65000.00","base_amount":"1","base_amount":"2"}`, f("base_amount", "type"), "must appear only once"),
	)
}

// checkProblem asserts the invariants of every refusal: a 4xx or 503
// status, a code, a detail, fields only on invalid_order, and messages
// that are short and do not echo the body.
func checkProblem(t *testing.T, body []byte, p *apierror.Error) {
	t.Helper()
	if p.Status < 400 || p.Status > 599 || p.Code == "" || p.Detail == "" {
		t.Fatalf("malformed problem %+v", p)
	}
	if (p.Code == CodeInvalidOrder) != (len(p.Fields) > 0) {
		t.Errorf("code %s with fields %v", p.Code, p.Fields)
	}
	if _, err := json.Marshal(p); err != nil {
		t.Errorf("problem does not encode: %v", err)
	}
	for name, msgs := range p.Fields {
		if len(name) > 32 || len(msgs) == 0 {
			t.Errorf("field %q: %v", name, msgs)
		}
		for _, m := range msgs {
			if len(m) > 160 {
				t.Errorf("field %s: message of %d bytes", name, len(m))
			}
			for i := 0; i+24 <= len(m); i++ {
				if bytes.Contains(body, []byte(m[i:i+24])) {
					t.Errorf("field %s: message %q echoes the body", name, m)
					break
				}
			}
		}
	}
}

func runCases(t *testing.T, v *Validator, cases []bodyCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := []byte(c.body)
			orig := bytes.Clone(body)
			o, p := v.Check(jsonCT, body)
			if !bytes.Equal(body, orig) {
				t.Fatal("Check modified the body")
			}
			if c.status == ok200 {
				if p != nil {
					t.Fatalf("refused: %d %s %v", p.Status, p.Code, p.Fields)
				}
				if o.Type == "" || o.Side == "" || (o.Market == nil) != o.Partial {
					t.Errorf("accepted order = %+v", o)
				}
				return
			}
			if p == nil {
				t.Fatalf("accepted: %+v", o)
			}
			checkProblem(t, body, p)
			if p.Status != c.status || p.Code != c.code {
				t.Errorf("got %d %s (%s), want %d %s", p.Status, p.Code, p.Detail, c.status, c.code)
			}
			var names []string
			for n := range p.Fields {
				names = append(names, n)
			}
			slices.Sort(names)
			if !slices.Equal(names, c.fields) {
				t.Errorf("fields %v (%v), want %v", names, p.Fields, c.fields)
			}
			if c.msg != "" && !slices.ContainsFunc(names, func(n string) bool { return slices.Contains(p.Fields[n], c.msg) }) {
				t.Errorf("messages %v lack %q", p.Fields, c.msg)
			}
			checkDetailNamesFields(t, p)
		})
	}
}

func TestCheckEdgeCases(t *testing.T) {
	cases := fixCases(edgeCases())
	if len(cases) < 100 {
		t.Fatalf("only %d cases", len(cases))
	}
	runCases(t, newValidator(t, nil), cases)
}

func TestCheckReturnsOrder(t *testing.T) {
	v := newValidator(t, nil)
	o, p := v.Check(jsonCT, []byte(limit("identifier", `"\u0061b-1"`, "side", `"s\u0065ll"`)))
	if p != nil {
		t.Fatal(p.Fields)
	}
	if o.Market == nil || o.Market.Symbol != "BTC_USDT" || o.Type != TypeLimit || o.Side != SideSell || o.Identifier != "ab-1" || o.Partial {
		t.Errorf("order = %+v", o)
	}
	o, p = v.Check(jsonCT, []byte(edit(ocoBase)))
	if p != nil || o.Type != TypeOCO || o.Side != SideSell || o.Identifier != "" {
		t.Errorf("order = %+v, %v", o, p)
	}
}

func TestContentType(t *testing.T) {
	v := newValidator(t, nil)
	tests := []struct {
		values []string
		ok     bool
	}{
		{[]string{"application/json"}, true},
		{[]string{"application/json; charset=utf-8"}, true},
		{[]string{"application/json;charset=UTF-8"}, true},
		{[]string{`application/json; charset="utf-8"`}, true},
		{[]string{`application/json; charset="UTF-8"`}, true},
		{[]string{"Application/JSON"}, true},
		{[]string{"APPLICATION/JSON; CHARSET=UTF-8"}, true},
		{[]string{" application/json "}, true},
		{[]string{"application/json \t; \tcharset=utf-8 "}, true},
		{[]string{"application/json;"}, true},
		{[]string{"application/json; charset=utf-8;"}, true},
		{[]string{"application/json;;"}, false},
		{[]string{"application/json; ; charset=utf-8"}, false},
		{nil, false},
		{[]string{""}, false},
		{[]string{"text/plain"}, false},
		{[]string{"application/x-www-form-urlencoded"}, false},
		// Another charset, or utf-8 under another name.
		{[]string{"application/json; charset=latin1"}, false},
		{[]string{"application/json; charset=utf-16"}, false},
		{[]string{"application/json; charset=utf8"}, false},
		{[]string{"application/json; charset=shift_jis_2004"}, false},
		{[]string{"application/json; charset=idna"}, false},
		{[]string{"application/json; charset=utf-8x"}, false},
		{[]string{"application/json; charset=\"utf-8\"x"}, false},
		// Any other parameter.
		{[]string{"application/json; version=2"}, false},
		{[]string{"application/json; charset=utf-8; version=2"}, false},
		{[]string{"application/json; q=1"}, false},
		// A repeated parameter, even with the same value.
		{[]string{"application/json; charset=utf-8; charset=utf-8"}, false},
		{[]string{"application/json; charset=utf-8; CHARSET=utf-8"}, false},
		// RFC 2231: extended values and continuations (Django reads
		// charset* as charset).
		{[]string{"application/json; charset*=idna"}, false},
		{[]string{"application/json; charset*=utf-8''"}, false},
		{[]string{"application/json; charset*=shift_jis_2004''x"}, false},
		{[]string{"application/json; charset=utf-8; charset*=idna"}, false},
		{[]string{"application/json; charset*0=utf; charset*1=-8"}, false},
		// Spellings parsers read differently: spaces around "=", escapes
		// in quotes, Unicode look-alikes, lists.
		{[]string{"application/json; charset = utf-8"}, false},
		{[]string{"application/json; charset= utf-8"}, false},
		{[]string{`application/json; charset="utf\-8"`}, false},
		{[]string{"application/json; char\u017fet=utf-8"}, false},
		{[]string{"application/j\u017fon"}, false},
		{[]string{"application/jsonx"}, false},
		{[]string{"application/json-patch+json"}, false},
		{[]string{"application/vnd.api+json"}, false},
		{[]string{"application/json, text/plain"}, false},
		{[]string{"application/json", "application/json"}, false},
		{[]string{"application/json; charset"}, false},
		{[]string{"application/json; =utf-8"}, false},
		{[]string{`application/json; charset="utf-8`}, false},
		{[]string{"application /json"}, false},
		{[]string{"application/json\x00"}, false},
	}
	body := []byte(limit())
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q", tt.values), func(t *testing.T) {
			_, p := v.Check(tt.values, body)
			if tt.ok != (p == nil) {
				t.Fatalf("problem %v, want ok=%v", p, tt.ok)
			}
			if !tt.ok && (p.Status != 415 || p.Code != CodeUnsupportedMediaType) {
				t.Errorf("%d %s, want 415 %s", p.Status, p.Code, CodeUnsupportedMediaType)
			}
			if pre := v.PreCheck(tt.values, -1); (pre == nil) != tt.ok {
				t.Errorf("PreCheck = %v", pre)
			}
		})
	}
}

func TestBodySize(t *testing.T) {
	v := newValidator(t, func(c *config.Validation) { c.MaxBodyBytes = 200 })
	if v.MaxBodyBytes() != 200 {
		t.Fatalf("MaxBodyBytes() = %d", v.MaxBodyBytes())
	}
	fits := limit("identifier", `"x"`)
	fits = fits[:len(fits)-1] + strings.Repeat(" ", 200-len(fits)) + "}"
	if _, p := v.Check(jsonCT, []byte(fits)); p != nil {
		t.Errorf("200-byte body refused: %v", p)
	}
	over := fits[:len(fits)-1] + " }"
	_, p := v.Check(jsonCT, []byte(over))
	if p == nil || p.Status != 413 || p.Code != CodeTooLarge || p.Detail != "Request body is larger than 200 bytes." {
		t.Errorf("201-byte body: %+v", p)
	}
	if p := v.PreCheck(jsonCT, 201); p == nil || p.Status != 413 {
		t.Errorf("PreCheck with Content-Length 201: %v", p)
	}
	if p := v.PreCheck(jsonCT, 200); p != nil {
		t.Errorf("PreCheck with Content-Length 200: %v", p)
	}
	// The default is 8KiB.
	d := newValidator(t, nil)
	big := limit("x", `"`+strings.Repeat("a", 9000)+`"`)
	if _, p := d.Check(jsonCT, []byte(big)); p == nil || p.Status != 413 {
		t.Errorf("9000-byte body under the default: %v", p)
	}
}

// TestConfiguredRules covers per-market and per-quote rules, identifier
// settings and unknown fields allowed.
func TestConfiguredRules(t *testing.T) {
	v := newValidator(t, func(c *config.Validation) {
		c.Markets = map[string]config.MarketRules{
			"BTC_USDT": {PriceIncrement: "0.5", MinPrice: "1000", MaxPrice: "1000000", MinValue: "10"},
			"BTC_IRT":  {PriceIncrement: "10"},
			"ETH_USDT": {PriceIncrement: "0.001"}, // finer than the precision: both apply
			"XRP_USDT": {MinValue: "1"},           // not in the catalogue: unused
		}
		c.Quotes = map[string]config.QuoteRules{"USDT": {MinValue: "5"}, "BTC": {MinValue: "0.0001"}}
	})
	eth := func(kv ...string) string {
		return edit(limitBase, append([]string{"symbol", `"ETH_USDT"`, "price", `"3200.00"`, "base_amount", `"1"`}, kv...)...)
	}
	runCases(t, v, []bodyCase{
		good("price on the 0.5 increment", limit("price", `"65000.50"`)),
		good("price on the increment in exponent form", limit("price", `6.50005e4`)),
		bad("price off the 0.5 increment", limit("price", `"65000.25"`), f("price"), "must be a multiple of 0.5"),
		bad("stop price off the 0.5 increment", edit(stopBase, "stop_price", `"64100.10"`), f("stop_price"), "must be a multiple of 0.5"),
		bad("price below min_price", limit("price", `"999.50"`, "base_amount", `"1"`), f("price"), "must be at least 1000"),
		bad("price above max_price", limit("price", `"1000000.5"`), f("price"), "must be at most 1000000"),
		bad("oco target above max_price", edit(ocoBase, "oco_target_price", `"2000000"`), f("oco_target_price"), "must be at most 1000000"),
		good("price at min_price", limit("price", `"1000"`, "base_amount", `"0.01"`)),
		good("price at max_price", limit("price", `"1000000"`)),
		bad("order value below the market's min_value", limit("base_amount", `"0.0001"`), f(nf), "order value must be at least 10 USDT (price × base_amount)"),
		good("order value exactly the min_value", limit("price", `"1000"`, "base_amount", `"0.01"`)),
		bad("market order quote_amount below min_value", market("quote_amount", `"9.99"`), f(nf), "order value must be at least 10 USDT (quote_amount)"),
		good("market order without quote_amount: value unknown", market("base_amount", `"0.000001"`)),
		bad("quote min_value for ETH_USDT", eth("base_amount", `"0.001"`), f(nf), "order value must be at least 5 USDT (price × base_amount)"),
		good("quote min_value met", eth("base_amount", `"0.0016"`, "price", `"3125.000"`)),
		bad("increment finer than the precision", eth("price", `"3200.001"`), f("price"), "must have at most 2 decimal places"),
		bad("BTC_IRT increment 10", edit(limitBase, "symbol", `"BTC_IRT"`, "price", `"6000000005"`, "base_amount", `"1"`), f("price"), "must be a multiple of 10"),
		good("BTC_IRT price on increment 10", edit(limitBase, "symbol", `"BTC_IRT"`, "price", `"6.00000001e9"`, "base_amount", `"1"`)),
		bad("min value in BTC", edit(limitBase, "symbol", `"ETH_BTC"`, "price", `"0.049500"`, "base_amount", `"0.001"`), f(nf), "order value must be at least 0.0001 BTC (price × base_amount)"),
	})

	allow := newValidator(t, func(c *config.Validation) {
		c.UnknownFields = config.UnknownAllow
		c.Identifier = config.Identifier{Required: true, MaxLength: 8, Punctuation: ""}
	})
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	runCases(t, allow, []bodyCase{
		good("unknown field allowed", limit("identifier", `"a1"`, "client_tag", `{"x":[1,2,{"y":null}]}`)),
		good("nesting of exactly 32 levels", limit("identifier", `"a1"`, "x", deep(31))),
		parseErr("nesting of 33 levels", limit("identifier", `"a1"`, "x", deep(32))),
		bad("unknown field repeated", limit("identifier", `"a1"`, "x", `1`)[:len(limit("identifier", `"a1"`, "x", `1`))-1]+`,"x":1}`, f("x"), "must appear only once"),
		bad("unknown field repeated, escaped", limit("identifier", `"a1"`, "x", `1`)[:len(limit("identifier", `"a1"`, "x", `1`))-1]+`,"\u0078":1}`, f("x"), "must appear only once"),
		bad("nested repeated key", limit("identifier", `"a1"`, "x", `{"a":1,"a":2}`), f("x"), "contains an object with a repeated key"),
		bad("repeated key deep in an array", limit("identifier", `"a1"`, "x", `[[{"b":{"a":1,"\u0061":2}}]]`), f("x"), "contains an object with a repeated key"),
		bad("repeated key among many", limit("identifier", `"a1"`, "x", `{"a":1,"b":1,"c":1,"d":1,"e":1,"f":1,"g":1,"h":1,"i":1,"j":1,"k":1,"a":1}`), f("x"), "contains an object with a repeated key"),
		good("many distinct nested keys", limit("identifier", `"a1"`, "x", `{"a":1,"b":1,"c":1,"d":1,"e":1,"f":1,"g":1,"h":1,"i":1,"j":1,"k":1,"l":1}`)),
		bad("identifier required", limit(), f("identifier"), "required"),
		bad("identifier null when required", limit("identifier", `null`), f("identifier"), "must not be null"),
		bad("identifier too long for max_length 8", limit("identifier", `"abcdefghi"`), f("identifier"), "must be at most 8 characters"),
		bad("punctuation not allowed", limit("identifier", `"a-1"`), f("identifier"), "may contain only letters and digits"),
	})
}

func TestBeforeCatalogue(t *testing.T) {
	cfg := config.DefaultValidation()
	v, err := New(cfg, unloadedCatalogue(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, p := v.Check(jsonCT, []byte(limit()))
	if p == nil || p.Status != 503 || p.Code != CodeCatalogueUnavailable || !strings.Contains(p.Detail, "catalogue") {
		t.Fatalf("before the first load: %+v", p)
	}
	// Transport checks still come first.
	if _, p := v.Check([]string{"text/plain"}, []byte(limit())); p == nil || p.Status != 415 {
		t.Errorf("415 must come before 503: %+v", p)
	}

	cfg.BeforeCatalogue = config.BeforeCataloguePass
	cat := unloadedCatalogue(t)
	v, err = New(cfg, cat, nil)
	if err != nil {
		t.Fatal(err)
	}
	runCases(t, v, []bodyCase{
		good("market rules skipped", limit("base_amount", `"0.0000001"`, "symbol", `"DOGE_USDT"`)),
		bad("symbol shape still checked", limit("symbol", `"doge"`), f("symbol"), ""),
		bad("decimals still checked", limit("price", `"0"`), f("price"), msgPositive),
		bad("quote_amount still price × base", limit("quote_amount", `"1"`), f("quote_amount"), ""),
		parseErr("syntax still checked", `{`),
	})
	o, p := v.Check(jsonCT, []byte(limit("identifier", `"id1"`)))
	if p != nil || !o.Partial || o.Market != nil || o.Identifier != "id1" {
		t.Errorf("pass mode: %+v %v", o, p)
	}
	// Once loaded, the market rules apply.
	if err := cat.Set(seedMarkets()); err != nil {
		t.Fatal(err)
	}
	o, p = v.Check(jsonCT, []byte(limit()))
	if p != nil || o.Partial || o.Market == nil {
		t.Errorf("after load: %+v %v", o, p)
	}
	if _, p := v.Check(jsonCT, []byte(limit("symbol", `"DOGE_USDT"`))); p == nil {
		t.Errorf("unknown market accepted after load")
	}
}

// TestCatalogueChangeRecompiles checks that rules follow the catalogue.
func TestCatalogueChangeRecompiles(t *testing.T) {
	v := newValidator(t, nil)
	if _, p := v.Check(jsonCT, []byte(limit("price", `"65000.10"`))); p != nil {
		t.Fatal(p.Fields)
	}
	ms := seedMarkets()
	ms[0].PricePrecision = 0
	ms[1].Tradable = false
	if err := v.cat.Set(ms); err != nil {
		t.Fatal(err)
	}
	if _, p := v.Check(jsonCT, []byte(limit("price", `"65000.10"`))); p == nil || p.Fields["price"][0] != "must be a multiple of 1" {
		t.Errorf("after the precision changed: %v", p)
	}
	if _, p := v.Check(jsonCT, []byte(edit(limitBase, "symbol", `"ETH_USDT"`))); p == nil || !strings.Contains(p.Fields["symbol"][0], "not tradable") {
		t.Errorf("after ETH_USDT stopped trading: %v", p)
	}
}

func TestNewRefusesBadDecimals(t *testing.T) {
	cfg := config.DefaultValidation()
	cfg.Markets = map[string]config.MarketRules{"BTC_USDT": {MinPrice: "abc"}}
	if _, err := New(cfg, unloadedCatalogue(t), nil); err == nil {
		t.Error("New accepted min_price \"abc\"")
	}
	if _, err := New(config.DefaultValidation(), nil, nil); err == nil {
		t.Error("New accepted a nil catalogue")
	}
}

func TestCheckAllocations(t *testing.T) {
	v := newValidator(t, nil)
	for _, tt := range []struct {
		body string
		max  float64
	}{
		{typicalLimitOrder, 1}, // the identifier string
		{limit(), 0},
		{market("quote_amount", `"100.25"`), 0},
		{edit(ocoBase, "identifier", `"x"`), 1},
	} {
		body := []byte(tt.body)
		if _, p := v.Check(jsonCT, body); p != nil {
			t.Fatalf("%s: %v", tt.body, p.Fields)
		}
		if n := testing.AllocsPerRun(200, func() { v.Check(jsonCT, body) }); n > tt.max {
			t.Errorf("%s: %v allocations per Check, want at most %v", tt.body, n, tt.max)
		}
	}
}

// checkDetailNamesFields asserts that an invalid_order detail is a
// sentence naming every field with a problem and saying what is wrong
// (each field's messages appear in it), as long as it spells them all out.
func checkDetailNamesFields(t *testing.T, p *apierror.Error) {
	t.Helper()
	if p.Code != CodeInvalidOrder {
		return
	}
	if !strings.HasPrefix(p.Detail, "Invalid order: ") || !strings.HasSuffix(p.Detail, ".") {
		t.Errorf("detail %q is not a sentence starting \"Invalid order: \"", p.Detail)
	}
	total := 0
	for _, ms := range p.Fields {
		total += len(ms)
	}
	if total > maxDetailProblems {
		if !strings.Contains(p.Detail, "more (see fields)") {
			t.Errorf("detail %q does not say more problems are in fields", p.Detail)
		}
		return
	}
	for f, ms := range p.Fields {
		if f != NonFieldErrors && !strings.Contains(p.Detail, f) {
			t.Errorf("detail %q does not name field %s", p.Detail, f)
		}
		for _, m := range ms {
			if !strings.Contains(p.Detail, strings.TrimPrefix(strings.TrimPrefix(m, "required"), "not used")) {
				t.Errorf("detail %q does not say %q", p.Detail, m)
			}
		}
	}
}

func TestInvalidDetailSentences(t *testing.T) {
	tests := []struct {
		fields map[string][]string
		order  []string
		want   string
	}{
		{map[string][]string{"price": {"must be a multiple of 0.01"}}, []string{"price"},
			"Invalid order: price must be a multiple of 0.01."},
		{map[string][]string{"symbol": {"required"}, "price": {"required for limit orders"}}, []string{"symbol", "price"},
			"Invalid order: symbol is required; price is required for limit orders."},
		{map[string][]string{"foo": {"unknown field"}}, []string{"foo"}, "Invalid order: foo is an unknown field."},
		{map[string][]string{"symbol": {`no market "DOGE_USDT"`}}, []string{"symbol"}, `Invalid order: symbol: no market "DOGE_USDT".`},
		{map[string][]string{NonFieldErrors: {"order value must be at least 10 USDT (price × base_amount)"}}, []string{NonFieldErrors},
			"Invalid order: order value must be at least 10 USDT (price × base_amount)."},
		{map[string][]string{"orders[2].price": {"must be a multiple of 0.01"}, "orders[0].non_field_errors": {"expected a JSON object, got a number"}},
			[]string{"orders[0].non_field_errors", "orders[2].price"},
			"Invalid order: orders[0]: expected a JSON object, got a number; orders[2].price must be a multiple of 0.01."},
	}
	for _, tt := range tests {
		if got := invalidDetail("Invalid order", tt.order, tt.fields); got != tt.want {
			t.Errorf("invalidDetail = %q, want %q", got, tt.want)
		}
	}
}
