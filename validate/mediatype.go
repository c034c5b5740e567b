package validate

import "strings"

// jsonContentType reports whether the Content-Type header values are
// exactly one "application/json", optionally with the one parameter
// charset=utf-8 (RFC 9110: media type and parameter name and value
// compared case-insensitively, the value optionally quoted, optional
// white space around ";", one trailing ";" allowed).
//
// Anything else is refused: another charset, another parameter, a
// parameter given twice, the RFC 2231 forms ("charset*=utf-8”…",
// continuations), white space around "=", quoted values with escapes,
// empty parameters other than a trailing ";" (mime.ParseMediaType refuses
// them).
// Backends read Content-Type with parsers that differ exactly there
// (Django reads "charset*" as charset and decodes the body with it;
// mime.ParseMediaType merges RFC 2231 forms too), so only the spelling
// that every parser reads alike passes. The order is forwarded with
// "Content-Type: application/json" in any case.
func jsonContentType(values []string) bool {
	if len(values) != 1 {
		return false
	}
	s := values[0]
	if s == "application/json" || s == "application/json; charset=utf-8" {
		return true // the common spellings
	}
	const mediaType = "application/json"
	s = trimOWS(s)
	if !hasPrefixFold(s, mediaType) {
		return false
	}
	s = s[len(mediaType):]
	charset := false
	for {
		s = trimLeftOWS(s)
		if s == "" {
			return true
		}
		if s[0] != ';' {
			return false
		}
		s = trimLeftOWS(s[1:])
		if s == "" {
			return true // a trailing ";"
		}
		const name = "charset="
		if charset || !hasPrefixFold(s, name) {
			return false
		}
		s = s[len(name):]
		switch {
		case hasPrefixFold(s, "utf-8"):
			s = s[len("utf-8"):]
		case hasPrefixFold(s, `"utf-8"`):
			s = s[len(`"utf-8"`):]
		default:
			return false
		}
		charset = true
	}
}

// trimOWS removes RFC 9110 optional white space (spaces and tabs) from
// both ends of s.
func trimOWS(s string) string { return strings.Trim(s, " \t") }

// trimLeftOWS removes optional white space from the start of s.
func trimLeftOWS(s string) string { return strings.TrimLeft(s, " \t") }
