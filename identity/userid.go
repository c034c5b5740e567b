package identity

import (
	"strings"
	"unicode"
)

// integerUser returns the account a string user claim names to a
// backend that keys its users by an integer (identity.jwt.user_claim_type
// integer), read as that backend reads it: Django looks the user up with
// Python's int(), which takes "01", "+1", " 1 ", "1_0" and digits of any
// script ("١") as the numbers 1, 1, 1, 10 and 1. The account is that
// integer in canonical decimal, as a JSON number claim's is. exgate's
// reading is at least as coarse as Python's (it drops every underscore
// and every Unicode space around the number, where Python is stricter),
// so two spellings the backend reads as one user are never two accounts
// to exgate's limits, duplicate protection and tiers. A string with no
// integer in it (ok false) names no user of such a backend.
func integerUser(s string) (string, bool) {
	t := strings.TrimFunc(s, isPythonSpace)
	neg := false
	if t != "" && (t[0] == '+' || t[0] == '-') {
		neg, t = t[0] == '-', t[1:]
	}
	var b strings.Builder
	digits := false
	for _, r := range t {
		switch {
		case r == '_':
			continue
		case !unicode.IsDigit(r):
			return "", false
		}
		digits = true
		d := digitValue(r)
		if b.Len() == 0 && d == 0 {
			continue // a leading zero
		}
		b.WriteByte(byte('0' + d))
	}
	switch {
	case !digits:
		return "", false
	case b.Len() == 0:
		return "0", true // "-0", "000"
	case neg:
		return "-" + b.String(), true
	}
	return b.String(), true
}

// isPythonSpace reports whether Python's str.strip() (and so int())
// takes r for white space: Unicode's, and the separators U+001C–U+001F.
func isPythonSpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
}

// digitValue returns the value of r, a decimal digit (Unicode Nd): every
// range of the Nd table starts at a zero and runs in steps of one, in
// blocks of ten.
func digitValue(r rune) int {
	for _, rg := range unicode.Nd.R16 {
		if r >= rune(rg.Lo) && r <= rune(rg.Hi) {
			return int(r-rune(rg.Lo)) % 10
		}
	}
	for _, rg := range unicode.Nd.R32 {
		if r >= rune(rg.Lo) && r <= rune(rg.Hi) {
			return int(r-rune(rg.Lo)) % 10
		}
	}
	return 0
}
