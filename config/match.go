package config

import (
	"errors"
	"fmt"
	"strings"
)

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
			if !ok || !isName(name) {
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

// Covers reports whether every request n matches is matched by m too, as
// the gateway matches them: by method (no method is any method, and GET
// is HEAD as well) and by path, a parameter taking any one segment, a
// last "{name...}" the rest of the path (zero or more segments), and
// literal segments compared case-insensitively. Both must be valid path
// matchers; the default route "*" covers nothing and is covered by none.
// A route covered by one before it in the route table is never matched.
func (m Match) Covers(n Match) bool {
	switch {
	case m.IsDefault() || n.IsDefault():
		return false
	case m.Method != "" && m.Method != n.Method && !(m.Method == "GET" && n.Method == "HEAD"):
		return false
	}
	ms, ns := patternSegments(m.Path), patternSegments(n.Path)
	for i, s := range ms {
		if strings.HasSuffix(s, "...}") {
			return true // the rest of n's path, whatever it is
		}
		if i >= len(ns) || strings.HasSuffix(ns[i], "...}") {
			return false // n matches fewer segments than m needs
		}
		if !strings.HasPrefix(s, "{") && (strings.HasPrefix(ns[i], "{") || !strings.EqualFold(s, ns[i])) {
			return false
		}
	}
	return len(ns) == len(ms)
}

// patternSegments returns the segments of a valid path pattern ("/" has
// none).
func patternSegments(p string) []string {
	p = strings.Trim(p, "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// patternKey identifies a route's method and pattern up to the names of
// its parameters.
func patternKey(m Match) string {
	segs := strings.Split(m.Path, "/")
	for i, s := range segs {
		switch {
		case strings.HasSuffix(s, "...}"):
			segs[i] = "{...}"
		case strings.HasPrefix(s, "{"):
			segs[i] = "{}"
		}
	}
	return m.Method + " " + strings.Join(segs, "/")
}
