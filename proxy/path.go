package proxy

import (
	"net/url"
	"strings"

	"github.com/exgate/exgate/config"
)

// pathError is a reason a request path is refused with 400. Its text is the
// error's detail and never echoes the client's input.
type pathError string

func (e pathError) Error() string { return string(e) }

// Reasons a path is refused.
const (
	errPathNotAbsolute  pathError = "Request path must start with /."
	errPathBadEscape    pathError = "Request path has a malformed percent-escape."
	errPathEncodedSep   pathError = "Request path has an encoded slash, backslash or percent sign."
	errPathBadChar      pathError = "Request path has a character that is not allowed."
	errPathAboveRoot    pathError = "Request path climbs above the root."
	errPathTooManySlash pathError = "Request path has too many segments."
)

// isPathByte reports whether c may stand in a canonical path: an RFC 3986
// path character without "%" and ";" (config.IsPathChar), or a brace,
// which clients send raw or as %7B and %7D and backends read decoded.
// Braces separate nothing, so exgate keeps them decoded in the canonical
// path and net/url escapes them again when forwarding. (The API's order
// id list is "3,2", without braces; a route that checks one refuses them,
// orderids.go.)
func isPathByte(c byte) bool {
	return config.IsPathChar(c) || c == '{' || c == '}'
}

// maxSegments bounds the work canonicalisation does for one path.
const maxSegments = 128

// canonicalPath returns the canonical form of an escaped request path (as
// from url.URL.EscapedPath), or a pathError.
//
// The canonical form is what exgate matches and what it forwards, so no
// other spelling of a path can reach the backend:
//
//   - percent-escapes are decoded; an escape of "/", "\", "%" or of any
//     byte that is not an RFC 3986 path character is refused (so there is
//     no double decoding and no encoded separator);
//   - a raw byte outside the RFC 3986 path characters (";" and "\"
//     included) is refused;
//   - empty segments ("//") are removed, "." segments are removed and ".."
//     segments remove their parent (RFC 3986 section 5.2.4); climbing above
//     the root is refused;
//   - a trailing slash is kept, and "/a/b/." or "/a/b/.." end in a slash.
//
// The result contains only "/", path characters and braces (which
// net/url escapes when the request is forwarded). A path that is already canonical is returned as is, without
// allocating.
func canonicalPath(p string) (string, error) {
	if p == "" || p[0] != '/' {
		return "", errPathNotAbsolute
	}
	if isClean(p) {
		return p, nil
	}
	return cleanPath(p)
}

// isClean reports whether p is already canonical: only path characters and
// single slashes, no "." or ".." segments, no escapes, and at most
// maxSegments segments.
func isClean(p string) bool { return isCleanOf(p, &pathBytes) }

// isCleanOf is isClean with the bytes a segment may have in allowed
// (pathBytes, or plainPathBytes).
func isCleanOf(p string, allowed *[256]bool) bool {
	start, nsegs := 0, 0
	if p != "" && p[0] == '/' {
		start = 1
	}
	for {
		end := start
		for ; end < len(p) && p[end] != '/'; end++ {
			if !allowed[p[end]] {
				return false
			}
		}
		// p[start:end] is a segment.
		if nsegs++; nsegs > maxSegments {
			return false
		}
		switch seg := p[start:end]; {
		case seg == "" && end < len(p):
			return false // "//" or a leading "//"
		case seg == "." || seg == "..":
			return false
		}
		if end == len(p) {
			return true
		}
		start = end + 1
	}
}

// requestPath returns the canonical form of u's path, as
// canonicalPath(u.EscapedPath()) does. A path net/url read as sent (no
// RawPath) of bytes it never escapes (plainPathBytes) is its own escaped
// form: when it is canonical too it is returned as is, read once, where
// EscapedPath and isClean read it twice. Any other goes through
// EscapedPath and canonicalPath (TestRequestPathIsCanonicalPath).
func requestPath(u *url.URL) (string, error) {
	if p := u.Path; u.RawPath == "" && p != "" && p[0] == '/' && isCleanOf(p, &plainPathBytes) {
		return p, nil
	}
	return canonicalPath(u.EscapedPath())
}

// pathBytes holds isPathByte for each byte; plainPathBytes the path bytes
// net/url leaves unescaped in a path (url.URL.EscapedPath: letters,
// digits and "-._~$&+,:=@", not "!'()*" nor braces).
var pathBytes, plainPathBytes = pathByteTables()

func pathByteTables() (path, plain [256]bool) {
	for c := range 256 {
		b := byte(c)
		path[c] = isPathByte(b)
		p := "/" + string(rune(b))
		plain[c] = path[c] && (&url.URL{Path: p}).EscapedPath() == p
	}
	return path, plain
}

// cleanPath decodes and resolves p. It is the slow path of canonicalPath.
func cleanPath(p string) (string, error) {
	var (
		decoded  = make([]byte, 0, len(p))
		out      = make([]byte, 0, len(p))
		segEnds  [maxSegments]int // where each kept segment of out ends
		nsegs    int
		trailing bool
	)
	// Decode first: after decoding, a '/' can only be a real separator
	// because encoded slashes are refused.
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '%':
			if i+2 >= len(p) {
				return "", errPathBadEscape
			}
			hi, ok1 := unhex(p[i+1])
			lo, ok2 := unhex(p[i+2])
			if !ok1 || !ok2 {
				return "", errPathBadEscape
			}
			b := hi<<4 | lo
			if b == '/' || b == '\\' || b == '%' {
				return "", errPathEncodedSep
			}
			if !isPathByte(b) {
				return "", errPathBadChar
			}
			decoded = append(decoded, b)
			i += 2
		case c == '/' || isPathByte(c):
			decoded = append(decoded, c)
		default:
			return "", errPathBadChar
		}
	}
	// Resolve the segments of decoded, which starts with '/'. The last
	// segment decides the trailing slash: "", "." and ".." leave one.
	out = append(out, '/')
	for start := 1; start <= len(decoded); {
		j := start + indexSlash(decoded[start:])
		if j < start {
			j = len(decoded)
		}
		seg := decoded[start:j]
		start = j + 1
		trailing = false
		switch {
		case len(seg) == 0:
			trailing = true // "//" or the final slash
		case len(seg) == 1 && seg[0] == '.':
			trailing = true
		case len(seg) == 2 && seg[0] == '.' && seg[1] == '.':
			if nsegs == 0 {
				return "", errPathAboveRoot
			}
			nsegs--
			if nsegs == 0 {
				out = out[:1]
			} else {
				out = out[:segEnds[nsegs-1]]
			}
			trailing = true
		default:
			if nsegs == maxSegments {
				return "", errPathTooManySlash
			}
			if nsegs > 0 {
				out = append(out, '/')
			}
			out = append(out, seg...)
			segEnds[nsegs] = len(out)
			nsegs++
		}
	}
	if trailing && nsegs > 0 {
		out = append(out, '/')
	}
	return string(out), nil
}

func indexSlash(b []byte) int {
	for i, c := range b {
		if c == '/' {
			return i
		}
	}
	return -1
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// segmentIter walks the segments of a canonical path without allocating.
type segmentIter struct {
	p string
	i int
}

// next returns the next segment, or ok false at the end.
func (it *segmentIter) next() (seg string, ok bool) {
	for it.i < len(it.p) && it.p[it.i] == '/' {
		it.i++
	}
	if it.i >= len(it.p) {
		return "", false
	}
	j := strings.IndexByte(it.p[it.i:], '/')
	if j < 0 {
		seg, it.i = it.p[it.i:], len(it.p)
		return seg, true
	}
	seg, it.i = it.p[it.i:it.i+j], it.i+j
	return seg, true
}
