package config

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/idna"
)

// CORS is the optional policy exgate applies for browsers on other
// origins. Without allowed origins it is off: preflights pass to the
// backend (on the default route, without a token), so the backend's own
// CORS handling keeps working behind exgate. With them, exgate answers
// preflights itself — no backend call, no limit charged — and adds the
// response headers to every answer to an allowed origin, refusals (401,
// 429, …) included, so that a page can read why it was refused.
type CORS struct {
	// AllowedOrigins lists the origins allowed, exactly as browsers send
	// them ("https://app.example.com", "http://127.0.0.1:3000"), or "*"
	// alone for any origin. Default: none (the policy is off).
	AllowedOrigins []string `yaml:"allowed_origins"`
	// AllowedMethods are the methods a page may use. Default GET, HEAD,
	// POST, PUT, PATCH, DELETE.
	AllowedMethods []string `yaml:"allowed_methods"`
	// AllowedHeaders are the request headers a page may send, compared
	// case-insensitively. Default Authorization, Content-Type,
	// X-Request-ID.
	AllowedHeaders []string `yaml:"allowed_headers"`
	// ExposedHeaders are the response headers a page may read besides the
	// CORS-safelisted ones. Default the rate-limit headers, Retry-After,
	// X-Request-ID and Idempotent-Replayed.
	ExposedHeaders []string `yaml:"exposed_headers"`
	// AllowCredentials lets pages send cookies and read answers to
	// credentialed requests; not with the "*" origin. Default false.
	AllowCredentials bool `yaml:"allow_credentials"`
	// MaxAge is how long a browser may cache a preflight answer, at most
	// 24h; 0 sends no Access-Control-Max-Age. Default 10m.
	MaxAge time.Duration `yaml:"max_age"`
}

// Enabled reports whether the policy is on.
func (c *CORS) Enabled() bool { return len(c.AllowedOrigins) > 0 }

// DefaultCORS returns the CORS defaults: off, with the lists a trading
// page needs once origins are given.
func DefaultCORS() CORS {
	return CORS{
		AllowedMethods: []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"},
		AllowedHeaders: []string{"Authorization", "Content-Type", "X-Request-ID"},
		ExposedHeaders: []string{"RateLimit", "RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-Remaining",
			"X-RateLimit-Reset", "Retry-After", "X-Request-ID", "Idempotent-Replayed"},
		MaxAge: 10 * time.Minute,
	}
}

// check reports problems in the cors section at p.
func (cs *CORS) check(col *collector, p path) {
	for i, o := range cs.AllowedOrigins {
		op := p.key("allowed_origins").index(i)
		if o == "*" {
			if len(cs.AllowedOrigins) > 1 {
				col.addf(op, `"*" allows every origin and must be the only entry`)
			}
			if cs.AllowCredentials {
				col.addf(p.key("allow_credentials"), `cannot be true with the origin "*" (browsers refuse it); list the origins`)
			}
			continue
		}
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.RawQuery != "" ||
			u.Fragment != "" || u.User != nil || strings.ToLower(o) != o {
			col.addf(op, `want an origin as browsers send it, scheme://host[:port] in lower case without a path, such as "https://app.example.com"; got %q`, o)
			continue
		}
		switch sent, err := originAsSent(u); {
		case err != nil:
			col.addf(op, "%q can never match: %v", o, err)
		case sent != o:
			col.addf(op, "%q never matches: browsers send this origin as %q (the Origin header is compared exactly); write that", o, sent)
		}
	}
	for i, m := range cs.AllowedMethods {
		if !knownMethods[m] {
			col.addf(p.key("allowed_methods").index(i), "unknown method %q", m)
		}
	}
	for i, h := range cs.AllowedHeaders {
		if !isHeaderName(h) {
			col.addf(p.key("allowed_headers").index(i), "%q is not a header name", h)
		}
	}
	for i, h := range cs.ExposedHeaders {
		if !isHeaderName(h) {
			col.addf(p.key("exposed_headers").index(i), "%q is not a header name", h)
		}
	}
	if cs.MaxAge < 0 || cs.MaxAge > 24*time.Hour || cs.MaxAge%time.Second != 0 {
		col.addf(p.key("max_age"), "must be whole seconds from 0 to 24h, got %s", cs.MaxAge)
	}
}

// originAsSent returns the origin u (scheme://host[:port], already
// checked for its shape) as browsers write it in an Origin header, the
// WHATWG URL standard's serialisation: a host with non-ASCII letters in
// ASCII (IDNA, mapped as the standard's "domain to ASCII" does, with
// golang.org/x/net/idna: nontransitional, not strict, so that "_" stays
// allowed as browsers allow it), an IPv6 address in its shortest form,
// and the port without leading zeros, left out when it is the scheme's
// default (80 for http, 443 for https). An error says why no browser
// would send it at all.
func originAsSent(u *url.URL) (string, error) {
	host := u.Hostname()
	if a, err := netip.ParseAddr(host); err == nil && a.Is6() {
		if a.Zone() != "" {
			return "", fmt.Errorf("an IPv6 zone (%%%s) is not part of an origin", a.Zone())
		}
		host = "[" + a.String() + "]"
	} else if !isASCII(host) {
		p := idna.New(idna.MapForLookup(), idna.Transitional(false), idna.StrictDomainName(false), idna.BidiRule())
		h, err := p.ToASCII(host)
		if err != nil {
			return "", fmt.Errorf("host %q is not a valid domain name (%v)", host, err)
		}
		host = h
	}
	port := u.Port()
	if port == "" && strings.HasSuffix(u.Host, ":") {
		return "", errors.New("the port is empty")
	}
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return "", fmt.Errorf("port %q is not from 1 to 65535", port)
		}
		port = strconv.Itoa(n)
		if u.Scheme == "http" && n == 80 || u.Scheme == "https" && n == 443 {
			port = ""
		}
	}
	if port != "" {
		host += ":" + port
	}
	return u.Scheme + "://" + host, nil
}

// isASCII reports whether s is all ASCII.
func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// isHeaderName reports whether s is an RFC 9110 token.
func isHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}
