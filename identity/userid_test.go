package identity

import (
	"strconv"
	"testing"
	"unicode"
)

// TestIntegerUser reads string user claims as Django's integer lookup
// (Python's int()) reads them, and finds no integer in other strings.
func TestIntegerUser(t *testing.T) {
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
		{"alice", ""},
		{"550e8400-e29b-41d4-a716-446655440000", ""},
		{"1a", ""},
		{"+", ""},
		{"  ", ""},
		{"_", ""},
		{"1.0", ""},
		{"1e3", ""},
	} {
		t.Run(strconv.Quote(tt.in), func(t *testing.T) {
			got, ok := integerUser(tt.in)
			if got != tt.want || ok != (tt.want != "") {
				t.Fatalf("integerUser(%q) = %q, %v; want %q", tt.in, got, ok, tt.want)
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

// FuzzIntegerUser checks that the account of a string claim is stable
// (an account is its own account), never longer than the claim, and, for
// every string Python's int() reads in ASCII (an optional sign, digits
// with single underscores between them, spaces around), the decimal of
// that integer.
func FuzzIntegerUser(f *testing.F) {
	for _, s := range []string{"1", "01", "+1", " -1_0 ", "alice", "١", "-0", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, ok := integerUser(s)
		if n, isInt := pythonASCIIInt(s); isInt && (!ok || c != n) {
			t.Fatalf("integerUser(%q) = %q, %v; Python reads %s", s, c, ok, n)
		}
		if !ok {
			return
		}
		if again, _ := integerUser(c); again != c {
			t.Fatalf("integerUser(%q) = %q, which is not its own account (%q)", s, c, again)
		}
		if len(c) > len(s) {
			t.Fatalf("integerUser(%q) = %q, longer", s, c)
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
