package validate

import (
	"math/big"
	"math/bits"

	"github.com/shopspring/decimal"
)

// Bounds on every decimal field, whatever the market.
const (
	// MaxIntegerDigits bounds the integer part: every decimal is below
	// 10^20.
	MaxIntegerDigits = 20
	// MaxDecimalPlaces bounds the decimal places of any decimal (and the
	// precisions the catalogue may declare).
	MaxDecimalPlaces = 30
)

// Messages about a decimal's text or magnitude. They are constants so
// that a refusal allocates nothing but the report.
const (
	msgNotDecimal  = `must be a decimal number such as "0.01", as a JSON string or number`
	msgEmpty       = "must not be empty"
	msgSpaces      = "must not have leading or trailing spaces"
	msgNotFinite   = "must be a finite number"
	msgLeadingZero = "must not have leading zeros"
	msgPositive    = "must be greater than 0"
	msgTooLarge    = "must have at most 20 digits before the decimal point"
	msgTooPrecise  = "must have at most 30 decimal places"
)

// dec is an exact positive decimal read from its text. Its value is
// coef × 10^-scale, or slow when big. scale is the number of decimal
// places the value needs (trailing zeros do not count).
type dec struct {
	coef  uint64
	scale int
	big   bool
	slow  *decimal.Decimal
	// intDigits is the number of digits before the decimal point.
	intDigits int
}

// digitAcc accumulates significant digits, keeping trailing zeros
// pending so that they are never multiplied in.
type digitAcc struct {
	coef    uint64
	pending int // zeros seen since the last non-zero digit
	sig     int // digits from the first non-zero to the last non-zero
	seen    bool
	over    bool
}

func (a *digitAcc) digits(s []byte) {
	for _, c := range s {
		if c == '0' {
			if a.seen {
				a.pending++
			}
			continue
		}
		a.seen = true
		for k := 0; k <= a.pending; k++ {
			hi, lo := bits.Mul64(a.coef, 10)
			if hi != 0 {
				a.over = true
			}
			a.coef = lo
		}
		var carry uint64
		a.coef, carry = bits.Add64(a.coef, uint64(c-'0'), 0)
		if carry != 0 {
			a.over = true
		}
		a.sig += a.pending + 1
		a.pending = 0
	}
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// parseDec reads s as a positive decimal in JSON number syntax
// (-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?). It returns a message
// saying what is wrong, or "".
func parseDec(s []byte) (d dec, msg string) {
	if len(s) == 0 {
		return d, msgEmpty
	}
	if isSpaceByte(s[0]) || isSpaceByte(s[len(s)-1]) {
		return d, msgSpaces
	}
	i, neg := 0, false
	if s[0] == '-' {
		neg, i = true, 1
	}
	intStart := i
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && isDigit(s[i]):
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	default:
		return d, notDecimal(s)
	}
	intEnd := i
	fracStart, fracEnd := i, i
	if i < len(s) && s[i] == '.' {
		i++
		fracStart = i
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		fracEnd = i
		if fracEnd == fracStart {
			return d, msgNotDecimal
		}
	}
	exp := 0
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		eneg := false
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			eneg = s[i] == '-'
			i++
		}
		start := i
		for i < len(s) && isDigit(s[i]) {
			if exp < 1_000_000 { // far beyond any accepted value; no overflow
				exp = exp*10 + int(s[i]-'0')
			}
			i++
		}
		if i == start {
			return d, msgNotDecimal
		}
		if eneg {
			exp = -exp
		}
	}
	if i != len(s) {
		if intEnd-intStart == 1 && s[intStart] == '0' && isDigit(s[i]) {
			return d, msgLeadingZero
		}
		return d, msgNotDecimal
	}

	var a digitAcc
	a.digits(s[intStart:intEnd])
	a.digits(s[fracStart:fracEnd])
	if !a.seen || neg {
		return d, msgPositive
	}
	exp10 := exp - (fracEnd - fracStart) + a.pending // value = coef × 10^exp10
	d.intDigits = max(0, a.sig+exp10)
	d.scale = max(0, -exp10)
	switch {
	case d.intDigits > MaxIntegerDigits:
		return d, msgTooLarge
	case d.scale > MaxDecimalPlaces:
		return d, msgTooPrecise
	}
	d.coef, d.big = a.coef, a.over
	if !d.big && exp10 > 0 {
		var fits bool
		d.coef, fits = mulPow10(d.coef, exp10)
		d.big = !fits
	}
	if d.big {
		v, err := decimal.NewFromString(string(s))
		if err != nil { // cannot happen: s has the syntax checked above
			return d, msgNotDecimal
		}
		d.slow = &v
	}
	return d, ""
}

// notDecimal refines the message for text that does not start like a
// number.
func notDecimal(s []byte) string {
	t := s
	if len(t) > 0 && (t[0] == '-' || t[0] == '+') {
		t = t[1:]
	}
	if len(t) > 0 && (t[0] == 's' || t[0] == 'S') {
		t = t[1:] // Python's sNaN
	}
	if hasPrefixFold(t, "nan") || hasPrefixFold(t, "inf") {
		return msgNotFinite
	}
	return msgNotDecimal
}

// hasPrefixFold reports whether s starts with the lower-case ASCII
// prefix, ignoring ASCII case only (no Unicode folding: "ſ" is not "s").
func hasPrefixFold[T string | []byte](s T, prefix string) bool {
	if len(s) < len(prefix) {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != prefix[i] {
			return false
		}
	}
	return true
}

func isSpaceByte(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\r', '\v', '\f':
		return true
	}
	return false
}

// mulPow10 returns x × 10^k and whether it fits in 64 bits.
func mulPow10(x uint64, k int) (uint64, bool) {
	for ; k > 0; k-- {
		hi, lo := bits.Mul64(x, 10)
		if hi != 0 {
			return 0, false
		}
		x = lo
	}
	return x, true
}

// value returns d as a decimal.Decimal (the slow path).
func (d *dec) value() decimal.Decimal {
	if d.big {
		return *d.slow
	}
	return decimal.NewFromBigInt(new(big.Int).SetUint64(d.coef), -int32(d.scale))
}

// String writes d in plain notation.
func (d *dec) String() string { return d.value().String() }

// cmpDec compares a and b.
func cmpDec(a, b *dec) int {
	if !a.big && !b.big {
		switch {
		case a.scale == b.scale:
			return cmpU64(a.coef, b.coef)
		case a.scale < b.scale:
			if x, ok := mulPow10(a.coef, b.scale-a.scale); ok {
				return cmpU64(x, b.coef)
			}
		default:
			if x, ok := mulPow10(b.coef, a.scale-b.scale); ok {
				return cmpU64(a.coef, x)
			}
		}
	}
	return a.value().Cmp(b.value())
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// isMultiple reports whether v is a whole multiple of step.
func isMultiple(v, step *dec) bool {
	if !v.big && !step.big {
		if v.scale > step.scale {
			return false // a multiple of step needs at most step.scale places
		}
		if x, ok := mulPow10(v.coef, step.scale-v.scale); ok {
			return x%step.coef == 0
		}
	}
	return v.value().Mod(step.value()).IsZero()
}

// u128 is an unsigned 128-bit integer.
type u128 struct{ hi, lo uint64 }

// mulPow10 returns x × 10^k and whether it fits in 128 bits.
func (x u128) mulPow10(k int) (u128, bool) {
	for ; k > 0; k-- {
		h1, l1 := bits.Mul64(x.lo, 10)
		h2, l2 := bits.Mul64(x.hi, 10)
		if h2 != 0 {
			return u128{}, false
		}
		hi, carry := bits.Add64(h1, l2, 0)
		if carry != 0 {
			return u128{}, false
		}
		x = u128{hi, l1}
	}
	return x, true
}

func (x u128) cmp(y u128) int {
	if c := cmpU64(x.hi, y.hi); c != 0 {
		return c
	}
	return cmpU64(x.lo, y.lo)
}

// cmpProduct compares a × b with c.
func cmpProduct(a, b, c *dec) int {
	if !a.big && !b.big && !c.big {
		hi, lo := bits.Mul64(a.coef, b.coef)
		p, q := u128{hi, lo}, u128{0, c.coef}
		ps, ok := a.scale+b.scale, true
		switch {
		case ps > c.scale:
			q, ok = q.mulPow10(ps - c.scale)
		case ps < c.scale:
			p, ok = p.mulPow10(c.scale - ps)
		}
		if ok {
			return p.cmp(q)
		}
	}
	return a.value().Mul(b.value()).Cmp(c.value())
}

// product returns a × b in plain notation (for messages).
func product(a, b *dec) string { return a.value().Mul(b.value()).String() }
