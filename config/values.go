package config

import (
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/shopspring/decimal"
)

// Value types written as one YAML scalar: sizes, URLs, IP prefixes and
// exact decimals. Each reads and writes its text form and refuses what it
// cannot hold. Rates are in rate.go, route matchers in match.go.

// ByteSize is a size in bytes, written as a whole number of bytes or with a
// unit: "16KiB", "1MiB", "8KB" (KB and KiB both mean 1024).
type ByteSize int64

// UnmarshalText parses a size.
func (b *ByteSize) UnmarshalText(t []byte) error {
	s := strings.TrimSpace(string(t))
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"B", 1}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = strings.TrimSpace(v), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > (1<<40)/mult {
		return fmt.Errorf("size %q: want a whole number of bytes, optionally with KiB, MiB or GiB", string(t))
	}
	*b = ByteSize(n * mult)
	return nil
}

// MarshalText writes the size in the largest exact binary unit.
func (b ByteSize) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

// String returns the size in the largest exact binary unit.
func (b ByteSize) String() string {
	switch {
	case b >= 1<<30 && b%(1<<30) == 0:
		return strconv.FormatInt(int64(b>>30), 10) + "GiB"
	case b >= 1<<20 && b%(1<<20) == 0:
		return strconv.FormatInt(int64(b>>20), 10) + "MiB"
	case b >= 1<<10 && b%(1<<10) == 0:
		return strconv.FormatInt(int64(b>>10), 10) + "KiB"
	}
	return strconv.FormatInt(int64(b), 10)
}

// URL is an absolute http or https URL without query or fragment.
type URL struct{ *url.URL }

// MustURL parses s or panics; for defaults and tests.
func MustURL(s string) URL {
	var u URL
	if err := u.UnmarshalText([]byte(s)); err != nil {
		panic(err)
	}
	return u
}

// UnmarshalText parses and checks the URL. An empty string leaves the URL
// unset (validation then reports it as required).
func (u *URL) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	if s == "" {
		u.URL = nil
		return nil
	}
	p, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("url %q: %v", s, err)
	}
	if p.Scheme != "http" && p.Scheme != "https" {
		return fmt.Errorf("url %q: scheme must be http or https", s)
	}
	if p.Host == "" || p.Hostname() == "" {
		return fmt.Errorf("url %q: no host", s)
	}
	if p.User != nil {
		return fmt.Errorf("url %q: credentials do not belong in the URL", redact(p))
	}
	if p.RawQuery != "" || p.Fragment != "" || p.ForceQuery {
		return fmt.Errorf("url %q: no query or fragment allowed", s)
	}
	u.URL = p
	return nil
}

func redact(p *url.URL) string { return p.Redacted() }

// MarshalText writes the URL.
func (u URL) MarshalText() ([]byte, error) { return []byte(u.String()), nil }

// String returns the URL, or "" when unset.
func (u URL) String() string {
	if u.URL == nil {
		return ""
	}
	return u.URL.String()
}

// Prefix is an IP network, written in CIDR form ("10.0.0.0/8") or as a
// single address ("10.1.2.3", meaning /32 or /128).
type Prefix struct{ netip.Prefix }

// UnmarshalText parses a CIDR prefix or a single address.
func (p *Prefix) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	if strings.Contains(s, "/") {
		pp, err := netip.ParsePrefix(s)
		if err != nil {
			return fmt.Errorf("prefix %q: not a CIDR prefix", s)
		}
		p.Prefix = pp.Masked()
		return nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return fmt.Errorf("prefix %q: not an IP address or CIDR prefix", s)
	}
	if a.Zone() != "" {
		return fmt.Errorf("prefix %q: an address with a zone cannot be a prefix", s)
	}
	a = a.Unmap()
	p.Prefix = netip.PrefixFrom(a, a.BitLen())
	return nil
}

// MarshalText writes the prefix in CIDR form.
func (p Prefix) MarshalText() ([]byte, error) { return []byte(p.Prefix.String()), nil }

// Decimal is an exact non-negative decimal number written in plain
// notation ("0.01", "10", "65000.5"), or "" for unset. It is kept as
// written; it never passes through a float. At most 20 integer digits
// and 30 decimal places.
type Decimal string

// UnmarshalText checks and sets the decimal.
func (d *Decimal) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	if err := checkDecimalText(s); err != nil {
		return err
	}
	*d = Decimal(s)
	return nil
}

// MarshalText writes the decimal as it was given.
func (d Decimal) MarshalText() ([]byte, error) { return []byte(d), nil }

// IsSet reports whether the decimal has a value.
func (d Decimal) IsSet() bool { return d != "" }

// String returns the decimal as written, or "" when unset.
func (d Decimal) String() string { return string(d) }

// Value returns the decimal's value; an unset or invalid decimal is 0.
func (d Decimal) Value() decimal.Decimal {
	v, err := decimal.NewFromString(string(d))
	if err != nil {
		return decimal.Decimal{}
	}
	return v
}

// checkDecimalText checks plain decimal notation: [0-9]+(.[0-9]+)?,
// bounded, or "".
func checkDecimalText(s string) error {
	if s == "" {
		return nil
	}
	whole, frac, dot := strings.Cut(s, ".")
	digits := func(p string) bool {
		if p == "" {
			return false
		}
		for i := 0; i < len(p); i++ {
			if p[i] < '0' || p[i] > '9' {
				return false
			}
		}
		return true
	}
	if !digits(whole) || dot && !digits(frac) {
		return fmt.Errorf("decimal %q: want plain decimal notation such as \"0.01\" or \"10\"", s)
	}
	if len(strings.TrimLeft(whole, "0")) > 20 {
		return fmt.Errorf("decimal %q: more than 20 integer digits", s)
	}
	if len(strings.TrimRight(frac, "0")) > 30 {
		return fmt.Errorf("decimal %q: more than 30 decimal places", s)
	}
	return nil
}

// checkPositiveDecimal reports a set decimal that is not greater than
// zero.
func checkPositiveDecimal(col *collector, p path, d Decimal) {
	if d.IsSet() && !d.Value().IsPositive() {
		col.addf(p, "must be greater than 0, got %s", d)
	}
}
