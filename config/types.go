package config

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Rate is N events per Period, written "N/period" in YAML: "5400/1h",
// "60/1m", "10000/24h", "2/1d" or "200/minute". The zero Rate is invalid.
type Rate struct {
	N      int64
	Period time.Duration
}

// maxRateN bounds N so that arithmetic on rates cannot overflow.
const maxRateN = 1 << 40

// UnmarshalText parses "N/period".
func (r *Rate) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	n, p, ok := strings.Cut(s, "/")
	if !ok {
		return fmt.Errorf("rate %q: want N/period, such as 60/1m", s)
	}
	count, err := strconv.ParseInt(strings.TrimSpace(n), 10, 64)
	if err != nil || count <= 0 || count > maxRateN {
		return fmt.Errorf("rate %q: N must be a whole number from 1 to %d", s, int64(maxRateN))
	}
	period, err := parsePeriod(strings.TrimSpace(p))
	if err != nil {
		return fmt.Errorf("rate %q: %v", s, err)
	}
	*r = Rate{N: count, Period: period}
	return nil
}

// MarshalText writes the rate in the form UnmarshalText reads.
func (r Rate) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// String returns "N/period", with the period in its shortest exact unit.
func (r Rate) String() string {
	return strconv.FormatInt(r.N, 10) + "/" + formatPeriod(r.Period)
}

// IsZero reports whether the rate is unset.
func (r Rate) IsZero() bool { return r.N == 0 && r.Period == 0 }

var periodWords = map[string]time.Duration{
	"s": time.Second, "sec": time.Second, "second": time.Second,
	"m": time.Minute, "min": time.Minute, "minute": time.Minute,
	"h": time.Hour, "hour": time.Hour,
	"d": 24 * time.Hour, "day": 24 * time.Hour,
}

func parsePeriod(p string) (time.Duration, error) {
	if d, ok := periodWords[p]; ok {
		return d, nil
	}
	var d time.Duration
	if days, ok := strings.CutSuffix(p, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 32)
		if err != nil || n <= 0 || n > 366 {
			return 0, fmt.Errorf("period %q: days must be 1 to 366", p)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(p); err != nil {
			return 0, fmt.Errorf("period %q: want a duration such as 1s, 1m, 1h, 24h or 1d", p)
		}
	}
	if d < time.Second {
		return 0, fmt.Errorf("period %q: must be at least 1s", p)
	}
	if d > 366*24*time.Hour {
		return 0, fmt.Errorf("period %q: must be at most 366d", p)
	}
	if d%time.Second != 0 {
		return 0, fmt.Errorf("period %q: must be whole seconds", p)
	}
	return d, nil
}

func formatPeriod(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d%(24*time.Hour) == 0 && d >= 48*time.Hour:
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	default:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
}

// Match is a route's request matcher: "METHOD /path/{param}/", "/path/"
// (any method) or "*" (the default route: everything else). Path patterns
// are absolute, have no empty, "." or ".." segments, and each segment is
// either literal (RFC 3986 path characters, no "%" and no ";") or a
// whole-segment parameter "{name}". The last segment may be "{name...}",
// which matches the rest of the path: zero or more segments, so
// "/api/v1/odr/{rest...}" matches "/api/v1/odr/" and everything under it.
// A trailing slash is part of the canonical form forwarded to the backend.
type Match struct {
	// Method is an upper-case HTTP method, or "" for any method.
	Method string
	// Path is the pattern, or "*" for the default route.
	Path string
}

// Methods that a route may match.
var knownMethods = map[string]bool{
	"GET": true, "HEAD": true, "POST": true, "PUT": true,
	"PATCH": true, "DELETE": true, "OPTIONS": true,
}

// IsDefault reports whether m is the catch-all "*" matcher.
func (m Match) IsDefault() bool { return m.Path == "*" }

// String returns the matcher in the form UnmarshalText reads.
func (m Match) String() string {
	if m.Method == "" {
		return m.Path
	}
	return m.Method + " " + m.Path
}

// MarshalText writes the matcher in the form UnmarshalText reads.
func (m Match) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText parses a matcher.
func (m *Match) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	if s == "" {
		return errors.New("empty match: want \"METHOD /path/\", \"/path/\" or \"*\"")
	}
	method, path := "", s
	if f := strings.Fields(s); len(f) == 2 {
		method, path = f[0], f[1]
	} else if len(f) > 2 {
		return fmt.Errorf("match %q: want \"METHOD /path/\"", s)
	}
	if method != "" && !knownMethods[method] {
		return fmt.Errorf("unknown method %q", method)
	}
	if path == "*" {
		if method != "" {
			return fmt.Errorf("match %q: the default route \"*\" takes no method", s)
		}
		*m = Match{Path: "*"}
		return nil
	}
	if err := CheckPattern(path); err != nil {
		return err
	}
	*m = Match{Method: method, Path: path}
	return nil
}

// CheckPattern reports whether p is a valid route path pattern.
func CheckPattern(p string) error {
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("path %q: must start with /", p)
	}
	if p == "/" {
		return nil
	}
	segs := strings.Split(strings.TrimSuffix(p[1:], "/"), "/")
	params := map[string]bool{}
	for i, seg := range segs {
		switch {
		case seg == "":
			return fmt.Errorf("path %q: empty segment", p)
		case seg == "." || seg == "..":
			return fmt.Errorf("path %q: dot segment", p)
		case strings.HasPrefix(seg, "{"):
			name, ok := strings.CutSuffix(seg[1:], "}")
			if rest, tail := strings.CutSuffix(name, "..."); tail && ok {
				if i != len(segs)-1 || strings.HasSuffix(p, "/") {
					return fmt.Errorf("path %q: %q matches the rest of the path and must be its last segment, without a trailing slash", p, seg)
				}
				name = rest
			}
			if !ok || !isParamName(name) {
				return fmt.Errorf("path %q: parameter %q must be a whole segment {name} (or a last {name...}) of a-z, 0-9 and _", p, seg)
			}
			if params[name] {
				return fmt.Errorf("path %q: parameter {%s} repeated", p, name)
			}
			params[name] = true
		default:
			for i := 0; i < len(seg); i++ {
				if !IsPathChar(seg[i]) {
					return fmt.Errorf("path %q: character %q is not allowed in a literal segment", p, seg[i])
				}
			}
		}
	}
	return nil
}

func isParamName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// IsPathChar reports whether c may stand unescaped in a canonical path
// segment: RFC 3986 pchar without "%" (no escapes survive
// canonicalisation) and without ";" (path parameters are refused).
func IsPathChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	switch c {
	case '-', '.', '_', '~', '!', '$', '&', '\'', '(', ')', '*', '+', ',', '=', ':', '@':
		return true
	}
	return false
}

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
