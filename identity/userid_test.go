package identity

import (
	"strconv"
	"testing"
	"unicode"
)

// TestCanonicalUser reads string user claims as Django's integer lookup
// (Python's int()) reads them, and leaves other strings as they are.
func TestCanonicalUser(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"1", "1"},
		{"01", "1"},
		{"+1", "1"},
		{" 1\n", "1"},
		{"\x1c1\x1f", "1"},
		{"1_0", "10"},
		{"-01", "-1"},
		{"-0", "0"},
		{"000", "0"},
		{"١٢", "12"},                  // Arabic-Indic digits
		{"\U0001D7D8\U0001D7D9", "1"}, // mathematical double-struck 0 and 1
		{"123456789012345678901234567890", "123456789012345678901234567890"},
		{"alice", "alice"},
		{"550e8400-e29b-41d4-a716-446655440000", "550e8400-e29b-41d4-a716-446655440000"},
		{"1a", "1a"},
		{"+", "+"},
		{"  ", "  "},
		{"_", "_"},
		{"1.0", "1.0"},
		{"1e3", "1e3"},
	} {
		t.Run(strconv.Quote(tt.in), func(t *testing.T) {
			if got := canonicalUser(tt.in); got != tt.want {
				t.Fatalf("canonicalUser(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// TestDigitRanges checks what digitValue assumes of Unicode's Nd table:
// every range runs in steps of one over whole blocks of ten digits.
func TestDigitRanges(t *testing.T) {
	for _, rg := range unicode.Nd.R16 {
		if rg.Stride != 1 || (rg.Hi-rg.Lo+1)%10 != 0 {
			t.Errorf("Nd range %#x-%#x stride %d", rg.Lo, rg.Hi, rg.Stride)
		}
	}
	for _, rg := range unicode.Nd.R32 {
		if rg.Stride != 1 || (rg.Hi-rg.Lo+1)%10 != 0 {
			t.Errorf("Nd range %#x-%#x stride %d", rg.Lo, rg.Hi, rg.Stride)
		}
	}
}

// FuzzCanonicalUser checks that the account of a string claim is stable
// (canonical forms are their own account), never longer than the claim,
// and, for every string Python's int() reads in ASCII (an optional sign,
// digits with single underscores between them, spaces around), the
// decimal of that integer.
func FuzzCanonicalUser(f *testing.F) {
	for _, s := range []string{"1", "01", "+1", " -1_0 ", "alice", "١", "-0", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c := canonicalUser(s)
		if canonicalUser(c) != c {
			t.Fatalf("canonicalUser(%q) = %q, which is not its own account (%q)", s, c, canonicalUser(c))
		}
		if len(c) > len(s) {
			t.Fatalf("canonicalUser(%q) = %q, longer", s, c)
		}
		if n, ok := pythonASCIIInt(s); ok && c != n {
			t.Fatalf("canonicalUser(%q) = %q, Python reads %s", s, c, n)
		}
		if n, ok := integerUser(s); ok != isDecimal(c) || (ok && n != c) {
			t.Fatalf("integerUser(%q) = %q, %v; canonical %q", s, n, ok, c)
		}
		if _, ok := pythonASCIIInt(s); ok {
			if _, isInt := integerUser(s); !isInt {
				t.Fatalf("integerUser(%q) refuses what Python reads as an integer", s)
			}
		}
	})
}

// pythonASCIIInt reads s as Python's int() does when s is ASCII: spaces
// around, an optional sign, digits with single underscores between
// them. It returns the decimal, without leading zeros.
func pythonASCIIInt(s string) (string, bool) {
	i, j := 0, len(s)
	for i < j && (s[i] == ' ' || (s[i] >= '\t' && s[i] <= '\r') || (s[i] >= 0x1c && s[i] <= 0x1f)) {
		i++
	}
	for j > i && (s[j-1] == ' ' || (s[j-1] >= '\t' && s[j-1] <= '\r') || (s[j-1] >= 0x1c && s[j-1] <= 0x1f)) {
		j--
	}
	s = s[i:j]
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg, s = s[0] == '-', s[1:]
	}
	var digits []byte
	for k := 0; k < len(s); k++ {
		switch {
		case s[k] >= '0' && s[k] <= '9':
			digits = append(digits, s[k])
		case s[k] == '_' && k > 0 && k+1 < len(s) && s[k-1] != '_' && s[k+1] >= '0' && s[k+1] <= '9':
		default:
			return "", false
		}
	}
	if len(digits) == 0 {
		return "", false
	}
	for len(digits) > 1 && digits[0] == '0' {
		digits = digits[1:]
	}
	if neg && string(digits) != "0" {
		return "-" + string(digits), true
	}
	return string(digits), true
}
