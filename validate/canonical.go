package validate

import "strconv"

// amountKeys are the keys of the decimal fields, each with the separator
// and opening quote that precede its value in the canonical encoding.
var amountKeys = [numAmounts]string{
	fBaseAmount - fBaseAmount:  `,"base_amount":"`,
	fQuoteAmount - fBaseAmount: `,"quote_amount":"`,
	fPrice - fBaseAmount:       `,"price":"`,
	fStopPrice - fBaseAmount:   `,"stop_price":"`,
	fOCOTarget - fBaseAmount:   `,"oco_target_price":"`,
}

// AppendCanonical appends the canonical JSON encoding of the validated
// order to dst and returns the extended buffer. It is what the backend
// receives instead of the client's bytes, so that the backend reads the
// order exgate checked, whatever its JSON parser:
//
//	{"symbol":"BTC_USDT","type":"limit","side":"buy","base_amount":"0.0015","price":"65000","identifier":"ord-1"}
//
// UTF-8 (in fact ASCII), no white space, the known fields only, in the
// fixed order symbol, type, side, base_amount, quote_amount, price,
// stop_price, oco_target_price, identifier; fields that are absent or
// null are left out (the backend reads both as not given). Decimals are
// JSON strings holding the exact value validated, in plain notation
// without exponent, leading or trailing zeros ("1.5E-3" → "0.0015",
// 1e2 → "100", "65000.00" → "65000"), never a JSON number a backend
// would read through a float. Two spellings of one order encode to the
// same bytes.
//
// It allocates only when dst is too small, or for a decimal of more than
// 19 significant digits.
func (o *Order) AppendCanonical(dst []byte) []byte {
	// Each string's quotes go out with the key before it and after it.
	dst = append(dst, `{"symbol":"`...)
	dst = appendEscaped(dst, o.Symbol)
	dst = append(dst, `","type":"`...)
	dst = appendEscaped(dst, o.Type)
	dst = append(dst, `","side":"`...)
	dst = appendEscaped(dst, o.Side)
	dst = append(dst, '"')
	for i := range o.amounts {
		if o.has[i] {
			dst = append(dst, amountKeys[i]...)
			dst = appendDec(dst, &o.amounts[i])
			dst = append(dst, '"')
		}
	}
	if o.Identifier != "" {
		dst = append(dst, `,"identifier":"`...)
		dst = appendEscaped(dst, o.Identifier)
		dst = append(dst, '"')
	}
	return append(dst, '}')
}

// appendDec appends d in plain notation, without trailing zeros.
func appendDec(dst []byte, d *dec) []byte {
	if d.big {
		return append(dst, d.slow.String()...) // plain notation, trailing zeros trimmed
	}
	var buf [20]byte
	digits := strconv.AppendUint(buf[:0], d.coef, 10)
	switch {
	case d.scale == 0:
		return append(dst, digits...)
	case len(digits) <= d.scale:
		dst = append(dst, '0', '.')
		for i := len(digits); i < d.scale; i++ {
			dst = append(dst, '0')
		}
		return append(dst, digits...)
	}
	k := len(digits) - d.scale
	dst = append(dst, digits[:k]...)
	dst = append(dst, '.')
	return append(dst, digits[k:]...)
}

// appendEscaped appends s as the content of a JSON string. Validated
// strings are printable ASCII without '"' or '\' (symbols, types, sides,
// identifiers of the configured characters): each byte is looked up in
// jsonPlain, and a string of plain bytes is appended in one copy; quotes,
// backslashes and control characters are escaped all the same.
func appendEscaped(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	plain := 0 // s[plain:i] needs no escape
	for i := 0; i < len(s); i++ {
		c := s[i]
		if jsonPlain[c] {
			continue
		}
		dst = append(dst, s[plain:i]...)
		plain = i + 1
		if c == '"' || c == '\\' {
			dst = append(dst, '\\', c)
		} else {
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
	}
	return append(dst, s[plain:]...)
}

// jsonPlain says which bytes appendEscaped writes as they are: all but
// control characters, DEL, '"' and '\' (a byte of a multi-byte character
// is plain).
var jsonPlain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\' && c != 0x7f
	}
	return t
}()
