package validate

import (
	"bytes"
	"unicode/utf8"
)

// MaxDepth is the deepest nesting of JSON objects and arrays a body may
// have; the order object itself is depth 1.
const MaxDepth = 32

// kind is the JSON type of a value.
type kind uint8

const (
	kAbsent kind = iota
	kNull
	kTrue
	kFalse
	kNumber
	kString
	kObject
	kArray
)

// jsonName names a kind in messages.
func (k kind) jsonName() string {
	switch k {
	case kNull:
		return "null"
	case kTrue, kFalse:
		return "a boolean"
	case kNumber:
		return "a number"
	case kString:
		return "a string"
	case kObject:
		return "an object"
	case kArray:
		return "an array"
	}
	return "nothing"
}

// val is one scanned JSON value: for a string, [lo,hi) is its content
// between the quotes; for a number, its text.
type val struct {
	kind   kind
	esc    bool // a string with escapes
	dup    bool // an object inside repeats a key; or, at the top level, the key itself was repeated
	lo, hi int
}

// parser scans JSON text in one pass without building values. It checks
// RFC 8259 syntax, that strings are valid UTF-8 without unpaired
// surrogate escapes, and the nesting depth.
type parser struct {
	b   []byte
	i   int
	err string // the syntax problem, once found
}

func (p *parser) fail(reason string) bool {
	if p.err == "" {
		p.err = reason
	}
	return false
}

func (p *parser) skipWS() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) at(c byte) bool { return p.i < len(p.b) && p.b[p.i] == c }

// str scans the string whose opening quote is at p.i.
func (p *parser) str() (lo, hi int, esc, ok bool) {
	b := p.b
	p.i++
	lo = p.i
	for {
		i := p.i // a local index: the loop keeps it in a register
		for i < len(b) && plainByte[b[i]] {
			i++
		}
		p.i = i
		if p.i >= len(b) {
			return 0, 0, false, p.fail("unterminated string")
		}
		switch c := b[p.i]; {
		case c == '"':
			hi = p.i
			p.i++
			return lo, hi, esc, true
		case c == '\\':
			esc = true
			if !p.escape() {
				return 0, 0, false, false
			}
		case c < 0x20:
			return 0, 0, false, p.fail("control character in a string")
		default:
			r, size := utf8.DecodeRune(b[p.i:])
			if r == utf8.RuneError && size <= 1 {
				return 0, 0, false, p.fail("invalid UTF-8")
			}
			p.i += size
		}
	}
}

// plainByte says which bytes a JSON string holds as they are: printable
// ASCII but '"' and '\\' (a control character, an escape, the end of the
// string or a byte of a multi-byte character stops str's fast loop).
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// escape scans the escape sequence at p.i.
func (p *parser) escape() bool {
	b := p.b
	if p.i+1 >= len(b) {
		return p.fail("unterminated string")
	}
	switch b[p.i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		p.i += 2
		return true
	case 'u':
		r, ok := hex4(b, p.i+2)
		if !ok {
			return p.fail(`invalid \u escape`)
		}
		p.i += 6
		switch {
		case r >= 0xD800 && r < 0xDC00:
			if p.i+1 < len(b) && b[p.i] == '\\' && b[p.i+1] == 'u' {
				if r2, ok := hex4(b, p.i+2); ok && r2 >= 0xDC00 && r2 < 0xE000 {
					p.i += 6
					return true
				}
			}
			return p.fail(`unpaired surrogate in a \u escape`)
		case r >= 0xDC00 && r < 0xE000:
			return p.fail(`unpaired surrogate in a \u escape`)
		}
		return true
	}
	return p.fail("invalid escape in a string")
}

// hex4 reads four hex digits at b[i:].
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// num scans a number at p.i in JSON syntax.
func (p *parser) num() (lo, hi int, ok bool) {
	b := p.b
	lo = p.i
	if b[p.i] == '-' {
		p.i++
	}
	switch {
	case p.at('0'):
		p.i++
	case p.i < len(b) && b[p.i] >= '1' && b[p.i] <= '9':
		for p.i < len(b) && isDigit(b[p.i]) {
			p.i++
		}
	default:
		return 0, 0, p.fail("invalid number")
	}
	if p.at('.') {
		p.i++
		start := p.i
		for p.i < len(b) && isDigit(b[p.i]) {
			p.i++
		}
		if p.i == start {
			return 0, 0, p.fail("invalid number")
		}
	}
	if p.at('e') || p.at('E') {
		p.i++
		if p.at('+') || p.at('-') {
			p.i++
		}
		start := p.i
		for p.i < len(b) && isDigit(b[p.i]) {
			p.i++
		}
		if p.i == start {
			return 0, 0, p.fail("invalid number")
		}
	}
	return lo, p.i, true
}

// literal scans true, false or null.
func (p *parser) literal(word string, k kind) (val, bool) {
	if !bytes.HasPrefix(p.b[p.i:], []byte(word)) {
		return val{}, p.fail("invalid literal")
	}
	p.i += len(word)
	return val{kind: k}, true
}

// value scans the value at p.i, which sits inside a container at depth.
func (p *parser) value(depth int) (val, bool) {
	if p.i >= len(p.b) {
		return val{}, p.fail("unexpected end of input")
	}
	switch c := p.b[p.i]; {
	case c == '"':
		lo, hi, esc, ok := p.str()
		return val{kind: kString, lo: lo, hi: hi, esc: esc}, ok
	case c == '-' || isDigit(c):
		lo, hi, ok := p.num()
		return val{kind: kNumber, lo: lo, hi: hi}, ok
	case c == 't':
		return p.literal("true", kTrue)
	case c == 'f':
		return p.literal("false", kFalse)
	case c == 'n':
		return p.literal("null", kNull)
	case c == '{' || c == '[':
		if depth+1 > MaxDepth {
			return val{}, p.fail("nested deeper than 32 levels")
		}
		if c == '{' {
			dup, ok := p.object(depth + 1)
			return val{kind: kObject, dup: dup}, ok
		}
		dup, ok := p.array(depth + 1)
		return val{kind: kArray, dup: dup}, ok
	}
	return val{}, p.fail("invalid character")
}

// object scans a nested object at p.i and reports whether it, or any
// object inside it, repeats a key.
func (p *parser) object(depth int) (dup, ok bool) {
	p.i++
	p.skipWS()
	if p.at('}') {
		p.i++
		return false, true
	}
	var keys keySet
	for {
		p.skipWS()
		if !p.at('"') {
			return false, p.fail("expected a string key")
		}
		lo, hi, esc, ok := p.str()
		if !ok {
			return false, false
		}
		if keys.add(p.b, lo, hi, esc) {
			dup = true
		}
		p.skipWS()
		if !p.at(':') {
			return false, p.fail("expected ':' after a key")
		}
		p.i++
		p.skipWS()
		v, ok := p.value(depth)
		if !ok {
			return false, false
		}
		dup = dup || v.dup
		p.skipWS()
		switch {
		case p.at(','):
			p.i++
		case p.at('}'):
			p.i++
			return dup, true
		case p.i >= len(p.b):
			return false, p.fail("unexpected end of input")
		default:
			return false, p.fail("expected ',' or '}' after a value")
		}
	}
}

// array scans an array at p.i and reports whether an object inside it
// repeats a key.
func (p *parser) array(depth int) (dup, ok bool) {
	p.i++
	p.skipWS()
	if p.at(']') {
		p.i++
		return false, true
	}
	for {
		p.skipWS()
		v, ok := p.value(depth)
		if !ok {
			return false, false
		}
		dup = dup || v.dup
		p.skipWS()
		switch {
		case p.at(','):
			p.i++
		case p.at(']'):
			p.i++
			return dup, true
		case p.i >= len(p.b):
			return false, p.fail("unexpected end of input")
		default:
			return false, p.fail("expected ',' or ']' after a value")
		}
	}
}

// keySet detects repeated keys in one object. The first few keys are
// kept as spans of the input (no allocation); past them, in a map.
type keySet struct {
	n     int
	spans [8]struct {
		lo, hi int
		esc    bool
	}
	m map[string]struct{}
}

// add records a key and reports whether it was already there.
func (s *keySet) add(b []byte, lo, hi int, esc bool) bool {
	if s.m != nil {
		k := string(unquote(nil, b[lo:hi], esc))
		if _, dup := s.m[k]; dup {
			return true
		}
		s.m[k] = struct{}{}
		return false
	}
	for j := 0; j < s.n; j++ {
		o := s.spans[j]
		if sameKey(b[o.lo:o.hi], o.esc, b[lo:hi], esc) {
			return true
		}
	}
	if s.n < len(s.spans) {
		s.spans[s.n].lo, s.spans[s.n].hi, s.spans[s.n].esc = lo, hi, esc
		s.n++
		return false
	}
	s.m = make(map[string]struct{}, 2*len(s.spans))
	for j := 0; j < s.n; j++ {
		o := s.spans[j]
		s.m[string(unquote(nil, b[o.lo:o.hi], o.esc))] = struct{}{}
	}
	s.m[string(unquote(nil, b[lo:hi], esc))] = struct{}{}
	return false
}

// sameKey compares two string contents by their decoded value.
func sameKey(a []byte, aesc bool, b []byte, besc bool) bool {
	if !aesc && !besc {
		return bytes.Equal(a, b)
	}
	var x, y [64]byte
	return bytes.Equal(unquote(x[:0], a, aesc), unquote(y[:0], b, besc))
}

// decoded returns the decoded content of a scanned JSON string: s itself
// when it has no escapes, else s decoded into dst.
func decoded(dst, s []byte, esc bool) []byte {
	if !esc {
		return s
	}
	return unquote(dst, s, true)
}

// unquote appends the decoded content of a scanned (hence valid) JSON
// string to dst.
func unquote(dst, s []byte, esc bool) []byte {
	if !esc {
		return append(dst, s...)
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c != '\\' {
			dst = append(dst, c)
			i++
			continue
		}
		switch s[i+1] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, _ := hex4(s, i+2)
			i += 6
			if r >= 0xD800 && r < 0xDC00 {
				r2, _ := hex4(s, i+2)
				r = 0x10000 + (r-0xD800)<<10 + (r2 - 0xDC00)
				i += 6
			}
			dst = utf8.AppendRune(dst, r)
			continue
		default: // '"', '\\', '/'
			dst = append(dst, s[i+1])
		}
		i += 2
	}
	return dst
}
