package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
)

// This file holds lean replacements for the two net/http calls of an
// UpstreamTransport exchange: writeRequestHead for (*http.Request).Write
// and readResponseHead for http.ReadResponse. Both give the same result as
// the net/http function on every input; they take a shorter path for the
// common case and hand everything else to net/http itself.

// Errors of the lean wire functions, with net/http's texts.
var (
	errWireCTLInURL   = errors.New("net/http: can't write control character in Request.URL")
	errWireTrailerEOF = errors.New("http: unexpected EOF reading trailer")
	errWireLongTrail  = errors.New("http: suspiciously long trailer after chunked body")
)

// wireDefaultUserAgent is the User-Agent (*http.Request).Write sends when
// the request's header has none.
const wireDefaultUserAgent = "Go-http-client/1.1"

// writeRequestHead writes req to bw as (*http.Request).Write does, header
// fields in map order instead of sorted and without allocating. It writes
// the requests UpstreamTransport serves itself: method GET, HEAD, OPTIONS
// or "" (GET), no body (nil or http.NoBody), ContentLength 0, no
// Transfer-Encoding; for those the output is the request line, Host,
// User-Agent (Go's default when the header has no User-Agent key, none
// when its first value is empty), Connection: close when req.Close asks
// for it and the first Connection value does not say so already, then
// every other header field but Host, User-Agent, Content-Length,
// Transfer-Encoding and Trailer, byte for byte as Request.Write writes
// them but for their order. Any other request, a host that is not ASCII
// (which Request.Write converts to punycode) and a request whose context
// carries an httptrace.ClientTrace with a WroteHeaderField, WroteHeaders
// or WroteRequest hook are written by req.Write itself.
func writeRequestHead(bw *bufio.Writer, req *http.Request) error {
	if !wirePlainRequest(req) {
		return req.Write(bw)
	}
	u := req.URL
	host := req.Host
	if host == "" {
		host = u.Host
	}
	if !wireASCII(host) {
		return req.Write(bw) // punycode: rare, and its errors are net/http's
	}
	if !wireValidHost(host) {
		host = "" // as Request.Write does when not writing to a proxy
	}
	host = wireRemoveZone(host)

	// The request target, u.RequestURI() without its concatenation.
	var path, query string
	hasQuery := false
	if u.Opaque != "" {
		path = u.RequestURI()
	} else {
		path = u.EscapedPath()
		if path == "" {
			path = "/"
		}
		if u.ForceQuery || u.RawQuery != "" {
			hasQuery, query = true, u.RawQuery
		}
	}
	if wireHasCTL(path) || wireHasCTL(query) {
		return errWireCTLInURL
	}

	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	_, _ = bw.WriteString(method)
	_ = bw.WriteByte(' ')
	_, _ = bw.WriteString(path)
	if hasQuery {
		_ = bw.WriteByte('?')
		_, _ = bw.WriteString(query)
	}
	_, _ = bw.WriteString(" HTTP/1.1\r\nHost: ")
	_, _ = bw.WriteString(host)
	_, _ = bw.WriteString("\r\n")

	h := req.Header
	if ua, ok := h["User-Agent"]; !ok {
		_, _ = bw.WriteString("User-Agent: " + wireDefaultUserAgent + "\r\n")
	} else if len(ua) > 0 && ua[0] != "" {
		_, _ = bw.WriteString("User-Agent: ")
		wireWriteValue(bw, ua[0])
		_, _ = bw.WriteString("\r\n")
	}
	if req.Close {
		var conn string
		if v := h["Connection"]; len(v) > 0 {
			conn = v[0]
		}
		if !wireHasToken(conn, "close") {
			_, _ = bw.WriteString("Connection: close\r\n")
		}
	}
	for k, vv := range h {
		switch k {
		case "Host", "User-Agent", "Content-Length", "Transfer-Encoding", "Trailer":
			continue
		}
		if !wireValidFieldName(k) {
			continue // Request.Write drops invalid field names
		}
		for _, v := range vv {
			_, _ = bw.WriteString(k)
			_, _ = bw.WriteString(": ")
			wireWriteValue(bw, v)
			_, _ = bw.WriteString("\r\n")
		}
	}
	// A bufio.Writer keeps its first error: the last write returns it.
	_, err := bw.WriteString("\r\n")
	return err
}

// wirePlainRequest reports whether writeRequestHead writes req itself.
func wirePlainRequest(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, "":
	default:
		return false
	}
	if req.URL == nil || (req.Body != nil && req.Body != http.NoBody) ||
		req.ContentLength != 0 || len(req.TransferEncoding) > 0 {
		return false
	}
	trace := httptrace.ContextClientTrace(req.Context())
	return trace == nil || trace.WroteHeaderField == nil && trace.WroteHeaders == nil && trace.WroteRequest == nil
}

// wireWriteValue writes a header field value as Request.Write does: CR and
// LF become spaces, and leading and trailing spaces, tabs, CRs and LFs go.
func wireWriteValue(bw *bufio.Writer, v string) {
	i, j := 0, len(v)
	for i < j && wireSpace(v[i]) {
		i++
	}
	for j > i && wireSpace(v[j-1]) {
		j--
	}
	v = v[i:j]
	for {
		k := wireIndexCRLF(v)
		if k < 0 {
			_, _ = bw.WriteString(v)
			return
		}
		_, _ = bw.WriteString(v[:k])
		_ = bw.WriteByte(' ')
		v = v[k+1:]
	}
}

// wireSpace reports whether textproto.TrimString trims b.
func wireSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\r' || b == '\n' }

// wireIndexCRLF returns the index of the first CR or LF in s, or -1.
func wireIndexCRLF(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] == '\r' || s[i] == '\n' {
			return i
		}
	}
	return -1
}

// wireASCII reports whether s is all ASCII.
func wireASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// wireHasCTL reports whether s holds an ASCII control byte, which
// Request.Write refuses in the request target.
func wireHasCTL(s string) bool {
	for i := 0; i < len(s); i++ {
		if b := s[i]; b < ' ' || b == 0x7f {
			return true
		}
	}
	return false
}

// wireValidHost reports whether h is a valid Host header, as
// httpguts.ValidHostHeader does.
func wireValidHost(h string) bool {
	for i := 0; i < len(h); i++ {
		if !wireHostByte[h[i]] {
			return false
		}
	}
	return true
}

// wireRemoveZone removes the IPv6 zone from host, as net/http's removeZone
// does: "[fe80::1%en0]:8080" becomes "[fe80::1]:8080".
func wireRemoveZone(host string) string {
	if len(host) == 0 || host[0] != '[' {
		return host
	}
	i := strings.LastIndexByte(host, ']')
	if i < 0 {
		return host
	}
	j := strings.LastIndexByte(host[:i], '%')
	if j < 0 {
		return host
	}
	return host[:j] + host[i:]
}

// wireValidFieldName reports whether k is a valid header field name (a
// token), as httpguts.ValidHeaderFieldName does.
func wireValidFieldName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		if !wireTokenByte[k[i]] {
			return false
		}
	}
	return true
}

// wireHasToken reports whether token (lower case) appears in v, ASCII
// case-insensitive, with space, tab or comma boundaries: net/http's
// hasToken, with which Request.Write looks for "close" in Connection.
func wireHasToken(v, token string) bool {
	if len(token) > len(v) || token == "" {
		return false
	}
	if v == token {
		return true
	}
	for sp := 0; sp <= len(v)-len(token); sp++ {
		if b := v[sp]; b != token[0] && b|0x20 != token[0] {
			continue
		}
		if sp > 0 && !wireTokenBoundary(v[sp-1]) {
			continue
		}
		if end := sp + len(token); end != len(v) && !wireTokenBoundary(v[end]) {
			continue
		}
		if wireEqualFold(v[sp:sp+len(token)], token) {
			return true
		}
	}
	return false
}

func wireTokenBoundary(b byte) bool { return b == ' ' || b == ',' || b == '\t' }

// wireEqualFold reports whether s and t are equal under ASCII case
// folding (bytes outside ASCII must match exactly), as net/http's
// internal ascii.EqualFold does; strings.EqualFold folds Unicode too.
func wireEqualFold(s, t string) bool {
	if len(s) != len(t) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if wireLower(s[i]) != wireLower(t[i]) {
			return false
		}
	}
	return true
}

func wireLower(b byte) byte {
	if 'A' <= b && b <= 'Z' {
		return b + ('a' - 'A')
	}
	return b
}

// readResponseHead reads a response from br as http.ReadResponse(br, req)
// does, with the same result on every input: status, protocol, header
// (canonical keys, values in order, with net/http's fixes: Pragma:
// no-cache adds Cache-Control, Transfer-Encoding goes, Connection goes
// when it says close on HTTP/1.1, Content-Length goes under chunked and is
// deduplicated), ContentLength, TransferEncoding, Close, Trailer, and a
// body that reads, ends, fails and closes as net/http's does (the same
// errors, http.NoBody in the same cases, the trailer of a chunked body
// read the same way). Only the body's concrete type differs.
//
// It finds the end of the head with br.Peek before consuming anything,
// parses it from the buffered bytes and only then discards it, so it can
// leave every case it does not handle itself to http.ReadResponse on the
// untouched reader: a head that does not fit in br's buffer; any line it
// would have to reject or that net/http reads in a way of its own (a
// malformed or non-HTTP/1.0-or-1.1 status line, a status code that is not
// three digits, an obs-fold continuation, a field name with a space or
// another invalid byte, an invalid byte in a value, a line without a
// colon); a Transfer-Encoding other than one "chunked" on HTTP/1.1; a
// Content-Length that is empty, not all digits, longer than 18 digits or
// repeated with different values; and a Trailer header on a chunked
// response. It checks each line as it arrives and hands a line it does not
// take over at once, so it never waits for bytes net/http would not wait
// for. When the reader fails (end of file, timeout…) after part of a head
// arrived, http.ReadResponse reads the same bytes and the same error
// replayed from a copy, because br hands a read error out only once: the
// head is incomplete then, so that always ends in net/http's error.
func readResponseHead(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	var sc wireHeadScan
	want := max(br.Buffered(), 1)
	for {
		_, err := br.Peek(want)
		buf, _ := br.Peek(br.Buffered())
		if err == nil || err == bufio.ErrBufferFull {
			switch end := sc.scan(buf); {
			case end > 0:
				if res, ok := wireParseHead(buf[:end], sc.lines, req, br); ok {
					_, _ = br.Discard(end)
					return res, nil
				}
				return http.ReadResponse(br, req)
			case end < 0 || err != nil:
				// A line to leave to net/http, or a head larger than
				// the buffer.
				return http.ReadResponse(br, req)
			}
			want = len(buf) + 1
			continue
		}
		if len(buf) == 0 {
			// What http.ReadResponse returns when the status line
			// cannot be read at all.
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		// Peek consumed the reader's error, which came with no new
		// byte: the head in buf is incomplete. Replay the bytes and the
		// error to http.ReadResponse for its error.
		data := bytes.Clone(buf)
		_, _ = br.Discard(len(buf))
		r := bufio.NewReaderSize(io.MultiReader(bytes.NewReader(data), wireErrReader{err}), br.Size())
		return http.ReadResponse(r, req)
	}
}

// wireErrReader returns err on every read.
type wireErrReader struct{ err error }

func (r wireErrReader) Read([]byte) (int, error) { return 0, r.err }

// wireHeadScan finds the end of a response head in the growing bytes
// buffered by a bufio.Reader, checking each line as it completes.
type wireHeadScan struct {
	next   int  // offset of the first line not yet looked at
	status bool // the status line was seen
	lines  int  // header lines seen
}

// scan looks at the lines of buf from where the last call stopped. It
// returns the length of the head (through its blank line) once complete,
// -1 at a line the lean parser does not take, 0 when it needs more bytes.
func (sc *wireHeadScan) scan(buf []byte) int {
	for {
		i := bytes.IndexByte(buf[sc.next:], '\n')
		if i < 0 {
			return 0
		}
		line := buf[sc.next : sc.next+i]
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
		sc.next += i + 1
		if !sc.status {
			if _, _, ok := wireStatusLine(line); !ok {
				return -1
			}
			sc.status = true
			continue
		}
		if len(line) == 0 {
			return sc.next
		}
		if !wireHeaderLine(line) {
			return -1
		}
		sc.lines++
	}
}

// wireStatusLine parses a status line (without its line ending) of the
// form the lean parser takes: "HTTP/1.x", spaces, three digits, then the
// end or a space and anything. status is the line from the code on, as
// http.ReadResponse sets Response.Status.
func wireStatusLine(line []byte) (minor int, status []byte, ok bool) {
	if len(line) < 9 || string(line[:7]) != "HTTP/1." || line[8] != ' ' {
		return 0, nil, false
	}
	switch line[7] {
	case '0':
	case '1':
		minor = 1
	default:
		return 0, nil, false
	}
	status = line[9:]
	for len(status) > 0 && status[0] == ' ' {
		status = status[1:]
	}
	if len(status) < 3 || len(status) > 3 && status[3] != ' ' {
		return 0, nil, false
	}
	for _, c := range status[:3] {
		if c < '0' || c > '9' {
			return 0, nil, false
		}
	}
	return minor, status, true
}

// wireHeaderLine reports whether the lean parser takes a header line
// (without its line ending): a field name of token bytes, a colon, a
// value of valid bytes, as textproto.Reader.ReadMIMEHeader reads them.
func wireHeaderLine(line []byte) bool {
	if len(line) == 0 || line[0] == ' ' || line[0] == '\t' {
		return false // obs-fold (or a malformed first line)
	}
	colon := bytes.IndexByte(line, ':')
	if colon <= 0 {
		return false
	}
	for _, c := range line[:colon] {
		if !wireTokenByte[c] {
			return false
		}
	}
	for _, c := range line[colon+1:] {
		if !wireValueByte[c] {
			return false
		}
	}
	return true
}

// wireSplitLine splits a header line wireHeaderLine takes: the name is
// line[:colon], the value, trimmed of spaces and tabs, line[vs:ve];
// canonical reports a name already in canonical form.
func wireSplitLine(line []byte) (colon, vs, ve int, canonical bool) {
	colon = bytes.IndexByte(line, ':')
	canonical = true
	upper := true
	for _, c := range line[:colon] {
		if upper && 'a' <= c && c <= 'z' || !upper && 'A' <= c && c <= 'Z' {
			canonical = false
		}
		upper = c == '-'
	}
	vs, ve = colon+1, len(line)
	for vs < ve && (line[vs] == ' ' || line[vs] == '\t') {
		vs++
	}
	for ve > vs && (line[ve-1] == ' ' || line[ve-1] == '\t') {
		ve--
	}
	return colon, vs, ve, canonical
}

// wireResponse is a response with its body and the values of its first
// header fields, allocated together.
type wireResponse struct {
	res  http.Response
	body wireBody
	vals [8]string
}

// wireParseHead builds the response whose head (status line through
// blank line, lines header lines, all taken by wireHeadScan) is head, the
// body to be read from br past it. ok is false when net/http must parse
// it: an unsupported Transfer-Encoding, a Content-Length to reject or
// that only net/http's settings decide on, a Trailer header.
func wireParseHead(head []byte, lines int, req *http.Request, br *bufio.Reader) (_ *http.Response, ok bool) {
	var blk wireBlock
	blk.head = head

	nl := bytes.IndexByte(head, '\n')
	status := head[:nl]
	if n := len(status); n > 0 && status[n-1] == '\r' {
		status = status[:n-1]
	}
	minor, st, _ := wireStatusLine(status)
	code := int(st[0]-'0')*100 + int(st[1]-'0')*10 + int(st[2]-'0')

	wr := new(wireResponse)
	res := &wr.res
	res.StatusCode = code
	if s := wireStatusText(code); string(st) == s {
		res.Status = s
	} else {
		res.Status = blk.sub(len(status)-len(st), len(st))
	}
	res.ProtoMajor, res.ProtoMinor = 1, minor
	res.Proto = "HTTP/1.1"
	if minor == 0 {
		res.Proto = "HTTP/1.0"
	}
	res.Request = req

	// The header, as textproto.Reader.ReadMIMEHeader builds it.
	h := make(http.Header, lines)
	vals := wr.vals[:]
	if lines > len(vals) {
		vals = make([]string, lines)
	}
	var seen uint8 // the wireHas flags of the fields present
	off := nl + 1
	for {
		i := bytes.IndexByte(head[off:], '\n')
		line := head[off : off+i]
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
		if len(line) == 0 {
			break
		}
		colon, vs, ve, canonical := wireSplitLine(line)
		key, f := blk.key(line[:colon], off, canonical)
		seen |= f
		val := blk.value(line[vs:ve], off+vs)
		if vv := h[key]; vv != nil {
			h[key] = append(vv, val)
		} else {
			vals[0] = val
			h[key] = vals[:1:1]
			vals = vals[1:]
		}
		off += i + 1
	}
	res.Header = h

	// http.ReadResponse's fixPragmaCacheControl.
	if seen&wireHasPragma != 0 {
		if p := h["Pragma"]; len(p) > 0 && p[0] == "no-cache" {
			if _, ok := h["Cache-Control"]; !ok {
				h["Cache-Control"] = []string{"no-cache"}
			}
		}
	}

	// readTransfer's shouldClose.
	var conn []string
	if seen&wireHasConnection != 0 {
		conn = h["Connection"]
	}
	hasClose := wireContainsToken(conn, "close")
	if minor == 0 {
		res.Close = hasClose || !wireContainsToken(conn, "keep-alive")
	} else {
		res.Close = hasClose
		if hasClose {
			delete(h, "Connection")
		}
	}

	// parseTransferEncoding.
	chunked := false
	if seen&wireHasTransferEncoding != 0 {
		te := h["Transfer-Encoding"]
		delete(h, "Transfer-Encoding")
		if minor == 1 {
			if len(te) != 1 || !wireEqualFold(te[0], "chunked") {
				return nil, false // an error
			}
			chunked = true
		}
	}

	// fixLength.
	n := int64(-1)
	if seen&wireHasContentLength != 0 {
		cls := h["Content-Length"]
		for _, cl := range cls[1:] {
			if cl != cls[0] { // values hold no CR, LF or outer blanks
				return nil, false // an error
			}
		}
		if len(cls) > 1 {
			h["Content-Length"] = cls[:1:1]
		}
		if n, ok = wireParseLength(cls[0]); !ok {
			return nil, false // an error, or up to the httplaxcontentlength setting
		}
	}
	isHead := req != nil && req.Method == http.MethodHead
	bodyAllowed := !(code >= 100 && code <= 199 || code == 204 || code == 304)
	var realLength int64
	switch {
	case isHead || !bodyAllowed:
		realLength = 0
	case chunked:
		delete(h, "Content-Length")
		realLength = -1
	default:
		realLength = n // -1 when there is no Content-Length
	}
	if isHead {
		res.ContentLength = n
	} else {
		res.ContentLength = realLength
	}

	// fixTrailer.
	if seen&wireHasTrailer != 0 && chunked {
		return nil, false
	}

	if realLength == -1 && !chunked && bodyAllowed {
		res.Close = true // the body ends with the connection
	}
	b := &wr.body
	switch {
	case chunked:
		res.TransferEncoding = []string{"chunked"}
		if isHead || !bodyAllowed {
			res.Body = http.NoBody
		} else {
			b.src, b.res, b.br, b.closing = httputil.NewChunkedReader(br), res, br, res.Close
			res.Body = b
		}
	case realLength == 0:
		res.Body = http.NoBody
	case realLength > 0:
		b.lr = io.LimitedReader{R: br, N: realLength}
		b.src, b.closing = &b.lr, res.Close
		res.Body = b
	case res.Close:
		b.src, b.closing = br, true
		res.Body = b
	default:
		res.Body = http.NoBody // unreachable, as in net/http
	}
	return res, true
}

// wireContainsToken reports whether a comma-separated list in values has
// token (lower case), ASCII case-insensitive: what net/http looks for in
// a response's Connection header (httpguts.HeaderValuesContainsToken).
func wireContainsToken(values []string, token string) bool {
	for _, v := range values {
		for {
			part, rest, more := strings.Cut(v, ",")
			for len(part) > 0 && (part[0] == ' ' || part[0] == '\t') {
				part = part[1:]
			}
			for len(part) > 0 && (part[len(part)-1] == ' ' || part[len(part)-1] == '\t') {
				part = part[:len(part)-1]
			}
			if wireEqualFold(part, token) {
				return true
			}
			if !more {
				break
			}
			v = rest
		}
	}
	return false
}

// wireParseLength parses a Content-Length value of 1 to 18 digits; ok is
// false for any other value, which net/http's parseContentLength may
// reject or (an empty one) accept depending on GODEBUG.
func wireParseLength(s string) (int64, bool) {
	if len(s) == 0 || len(s) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// wireBlock hands out strings from a response head: interned constants
// for common header names and values, else substrings of one string copy
// of the head, made the first time one is needed.
type wireBlock struct {
	head []byte
	str  string
}

// sub returns head[off:off+n] as a string.
func (b *wireBlock) sub(off, n int) string {
	if b.str == "" {
		b.str = string(b.head)
	}
	return b.str[off : off+n]
}

// key returns the canonical form of the field name k found at off, and
// its wireCommonKey flag.
func (b *wireBlock) key(k []byte, off int, canonical bool) (string, uint8) {
	if canonical {
		if s, f := wireCommonKey(k); s != "" {
			return s, f
		}
		return b.sub(off, len(k)), 0
	}
	var tmp [64]byte
	var c []byte
	if len(k) <= len(tmp) {
		c = tmp[:len(k)]
	} else {
		c = make([]byte, len(k))
	}
	upper := true
	for i, ch := range k {
		if upper && 'a' <= ch && ch <= 'z' {
			ch -= 'a' - 'A'
		} else if !upper && 'A' <= ch && ch <= 'Z' {
			ch += 'a' - 'A'
		}
		c[i] = ch
		upper = ch == '-'
	}
	if s, f := wireCommonKey(c); s != "" {
		return s, f
	}
	return string(c), 0
}

// value returns the field value v found at off.
func (b *wireBlock) value(v []byte, off int) string {
	if len(v) == 0 {
		return ""
	}
	if s := wireCommonValue(v); s != "" {
		return s
	}
	return b.sub(off, len(v))
}

// Flags of the header fields the transfer semantics look at, which
// wireCommonKey reports.
const (
	wireHasConnection uint8 = 1 << iota
	wireHasContentLength
	wireHasTransferEncoding
	wireHasTrailer
	wireHasPragma
)

// wireCommonKey returns the constant for a common response header name
// in canonical form, or "", and the flag of a field the transfer
// semantics look at. Every case returns its own text: the result, when
// not empty, is k.
func wireCommonKey(k []byte) (string, uint8) {
	switch string(k) {
	case "Accept-Ranges":
		return "Accept-Ranges", 0
	case "Access-Control-Allow-Credentials":
		return "Access-Control-Allow-Credentials", 0
	case "Access-Control-Allow-Headers":
		return "Access-Control-Allow-Headers", 0
	case "Access-Control-Allow-Methods":
		return "Access-Control-Allow-Methods", 0
	case "Access-Control-Allow-Origin":
		return "Access-Control-Allow-Origin", 0
	case "Access-Control-Expose-Headers":
		return "Access-Control-Expose-Headers", 0
	case "Access-Control-Max-Age":
		return "Access-Control-Max-Age", 0
	case "Age":
		return "Age", 0
	case "Allow":
		return "Allow", 0
	case "Alt-Svc":
		return "Alt-Svc", 0
	case "Cache-Control":
		return "Cache-Control", 0
	case "Connection":
		return "Connection", wireHasConnection
	case "Content-Disposition":
		return "Content-Disposition", 0
	case "Content-Encoding":
		return "Content-Encoding", 0
	case "Content-Language":
		return "Content-Language", 0
	case "Content-Length":
		return "Content-Length", wireHasContentLength
	case "Content-Location":
		return "Content-Location", 0
	case "Content-Range":
		return "Content-Range", 0
	case "Content-Security-Policy":
		return "Content-Security-Policy", 0
	case "Content-Type":
		return "Content-Type", 0
	case "Cross-Origin-Resource-Policy":
		return "Cross-Origin-Resource-Policy", 0
	case "Date":
		return "Date", 0
	case "Etag":
		return "Etag", 0
	case "Expires":
		return "Expires", 0
	case "Keep-Alive":
		return "Keep-Alive", 0
	case "Last-Modified":
		return "Last-Modified", 0
	case "Link":
		return "Link", 0
	case "Location":
		return "Location", 0
	case "Pragma":
		return "Pragma", wireHasPragma
	case "Ratelimit":
		return "Ratelimit", 0
	case "Ratelimit-Limit":
		return "Ratelimit-Limit", 0
	case "Ratelimit-Policy":
		return "Ratelimit-Policy", 0
	case "Ratelimit-Remaining":
		return "Ratelimit-Remaining", 0
	case "Ratelimit-Reset":
		return "Ratelimit-Reset", 0
	case "Referrer-Policy":
		return "Referrer-Policy", 0
	case "Retry-After":
		return "Retry-After", 0
	case "Server":
		return "Server", 0
	case "Server-Timing":
		return "Server-Timing", 0
	case "Set-Cookie":
		return "Set-Cookie", 0
	case "Strict-Transport-Security":
		return "Strict-Transport-Security", 0
	case "Trailer":
		return "Trailer", wireHasTrailer
	case "Transfer-Encoding":
		return "Transfer-Encoding", wireHasTransferEncoding
	case "Upgrade":
		return "Upgrade", 0
	case "Vary":
		return "Vary", 0
	case "Via":
		return "Via", 0
	case "Www-Authenticate":
		return "Www-Authenticate", 0
	case "X-Content-Type-Options":
		return "X-Content-Type-Options", 0
	case "X-Correlation-Id":
		return "X-Correlation-Id", 0
	case "X-Frame-Options":
		return "X-Frame-Options", 0
	case "X-Powered-By":
		return "X-Powered-By", 0
	case "X-Ratelimit-Limit":
		return "X-Ratelimit-Limit", 0
	case "X-Ratelimit-Remaining":
		return "X-Ratelimit-Remaining", 0
	case "X-Ratelimit-Reset":
		return "X-Ratelimit-Reset", 0
	case "X-Request-Id":
		return "X-Request-Id", 0
	case "X-Xss-Protection":
		return "X-Xss-Protection", 0
	}
	return "", 0
}

// wireCommonValue returns the constant for a common response header
// value, or "". Every case returns its own text: the result, when not
// empty, is v.
func wireCommonValue(v []byte) string {
	switch string(v) {
	case "*":
		return "*"
	case "0":
		return "0"
	case "Accept-Encoding":
		return "Accept-Encoding"
	case "DENY":
		return "DENY"
	case "Origin":
		return "Origin"
	case "SAMEORIGIN":
		return "SAMEORIGIN"
	case "application/json":
		return "application/json"
	case "application/json; charset=utf-8":
		return "application/json; charset=utf-8"
	case "br":
		return "br"
	case "bytes":
		return "bytes"
	case "chunked":
		return "chunked"
	case "close":
		return "close"
	case "gzip":
		return "gzip"
	case "keep-alive":
		return "keep-alive"
	case "max-age=0":
		return "max-age=0"
	case "no-cache":
		return "no-cache"
	case "no-store":
		return "no-store"
	case "nosniff":
		return "nosniff"
	case "text/html; charset=utf-8":
		return "text/html; charset=utf-8"
	case "text/plain; charset=utf-8":
		return "text/plain; charset=utf-8"
	case "true":
		return "true"
	}
	return ""
}

// wireStatuses holds "NNN Text" for the status codes net/http knows.
var wireStatuses = func() []string {
	s := make([]string, 600)
	for code := 100; code < len(s); code++ {
		if t := http.StatusText(code); t != "" {
			s[code] = strconv.Itoa(code) + " " + t
		}
	}
	return s
}()

// wireStatusText returns "NNN Text" for a known code, else "".
func wireStatusText(code int) string {
	if code < len(wireStatuses) {
		return wireStatuses[code]
	}
	return ""
}

// wireTokenByte, wireValueByte and wireHostByte are the bytes valid in a
// header field name (a token), in a field value (VCHAR, obs-text, space
// and tab) and in a Host header (as httpguts.ValidHostHeader sees it).
var wireTokenByte, wireValueByte, wireHostByte = func() (tok, val, host [256]bool) {
	for c := '0'; c <= '9'; c++ {
		tok[c], host[c] = true, true
	}
	for c := 'a'; c <= 'z'; c++ {
		tok[c], host[c] = true, true
		tok[c-'a'+'A'], host[c-'a'+'A'] = true, true
	}
	for _, c := range []byte("!#$%&'*+-.^_`|~") {
		tok[c] = true
	}
	for _, c := range []byte("!$%&()*+,-.:;=[']_~") {
		host[c] = true
	}
	for c := range val {
		val[c] = c == '\t' || c >= ' ' && c != 0x7f
	}
	return tok, val, host
}()

// wireBody is the body of a response read by readResponseHead: net/http's
// body for a response, the same reads, ends, errors and Close.
type wireBody struct {
	src     io.Reader
	lr      io.LimitedReader // src of a Content-Length body
	res     *http.Response   // a chunked body's response, for its trailer; nil once read
	br      *bufio.Reader    // under a chunked body, for its trailer
	closing bool             // the connection closes after the body

	mu     sync.Mutex // guards the following and Read and Close
	sawEOF bool
	closed bool
}

// Read reads the body.
func (b *wireBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	return b.readLocked(p)
}

func (b *wireBody) readLocked(p []byte) (n int, err error) {
	if b.sawEOF {
		return 0, io.EOF
	}
	n, err = b.src.Read(p)
	if err == io.EOF {
		b.sawEOF = true
		if b.res != nil {
			// The last chunk: read the trailer.
			if e := b.readTrailer(); e != nil {
				err = e
				b.sawEOF = false
				b.closed = true
			}
			b.res = nil
		} else if b.src == &b.lr && b.lr.N > 0 {
			err = io.ErrUnexpectedEOF
		}
	}
	if err == nil && n > 0 && b.src == &b.lr && b.lr.N == 0 {
		err = io.EOF
		b.sawEOF = true
	}
	return n, err
}

// readTrailer reads the trailer after the last chunk, as net/http does.
func (b *wireBody) readTrailer() error {
	buf, err := b.br.Peek(2)
	if bytes.Equal(buf, []byte("\r\n")) {
		_, _ = b.br.Discard(2)
		return nil
	}
	if len(buf) < 2 {
		return errWireTrailerEOF
	}
	if err != nil {
		return err
	}
	if !wireUpcomingDoubleCRLF(b.br) {
		return errWireLongTrail
	}
	hdr, err := textproto.NewReader(b.br).ReadMIMEHeader()
	if err != nil {
		if err == io.EOF {
			return errWireTrailerEOF
		}
		return err
	}
	if b.res.Trailer == nil {
		b.res.Trailer = http.Header(hdr)
	} else {
		maps.Copy(b.res.Trailer, http.Header(hdr))
	}
	return nil
}

// wireUpcomingDoubleCRLF reports whether a CRLF CRLF comes up in r's
// buffer, as net/http's seeUpcomingDoubleCRLF does.
func wireUpcomingDoubleCRLF(r *bufio.Reader) bool {
	for peekSize := 4; ; peekSize++ {
		buf, err := r.Peek(peekSize)
		if bytes.HasSuffix(buf, []byte("\r\n\r\n")) {
			return true
		}
		if err != nil {
			return false
		}
	}
}

// Close closes the body. Like net/http's, it reads the rest of it first
// (and the trailer), unless the connection closes after it anyway.
func (b *wireBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	var err error
	switch {
	case b.sawEOF:
	case b.res == nil && b.closing:
	default:
		_, err = io.Copy(io.Discard, wireBodyLocked{b})
	}
	b.closed = true
	return err
}

// wireBodyLocked reads a wireBody whose mutex is held.
type wireBodyLocked struct{ b *wireBody }

func (bl wireBodyLocked) Read(p []byte) (int, error) {
	if bl.b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	return bl.b.readLocked(p)
}
