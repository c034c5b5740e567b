package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"unsafe"
)

// wireResponses are the responses the differential tests and the fuzz
// seeds read; fast marks those readResponseHead parses itself (for a GET).
var wireResponses = []struct {
	name, in string
	fast     bool
}{
	{"typical", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nDate: Mon, 02 Jun 2025 10:00:00 GMT\r\nContent-Length: 5\r\nX-Request-Id: 4f6c2a9e\r\n\r\nhello", true},
	{"pipelined rest", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 204 No Content\r\n\r\n", true},
	{"lower-case names", "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nx-some-thing: 1\r\nCONTENT-LENGTH: 2\r\nx-a-very-long-header-name-that-does-not-fit-in-the-sixty-four-byte-buffer: y\r\n\r\nok", true},
	{"lower case after a dash", "HTTP/1.1 200 OK\r\nX-request-id: 1\r\nContent-type: text/plain\r\nContent-Length: 0\r\n\r\n", true},
	{"repeated names", "HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nVary: Origin\r\nset-cookie: b=2\r\nSet-Cookie: c=3\r\nContent-Length: 0\r\n\r\n", true},
	{"many fields", "HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\nF: 6\r\nG: 7\r\nH: 8\r\nI: 9\r\nJ: 10\r\nA: 11\r\nContent-Length: 1\r\n\r\nx", true},
	{"blanks in values", "HTTP/1.1 200 OK\r\nX-A:   spaced  \t\r\nX-B:\r\nX-C: \t\r\nX-D:inner  space\r\nContent-Length: 0\r\n\r\n", true},
	{"bytes above ASCII", "HTTP/1.1 200 Tr\xe8s bien\r\nX-A: caf\xc3\xa9\r\nContent-Length: 0\r\n\r\n", true},
	{"bare LF", "HTTP/1.1 200 OK\nContent-Length: 2\nX: y\n\nok", true},
	{"mixed line ends", "HTTP/1.1 200 OK\r\nContent-Length: 2\nX: y\r\n\nok", true},
	{"CR CR LF", "HTTP/1.1 200 OK\r\nX: y\r\r\nContent-Length: 0\r\n\r\n", false},
	{"CR in status line", "HTTP/1.1 200 O\rK\r\r\nContent-Length: 0\r\n\r\n", true},
	{"status trailing space", "HTTP/1.1 200 OK \r\nContent-Length: 0\r\n\r\n", true},
	{"status without text", "HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n", true},
	{"status spaces", "HTTP/1.1    404   Not  Found\r\nContent-Length: 0\r\n\r\n", true},
	{"status unknown", "HTTP/1.1 299 Whatever\r\nContent-Length: 0\r\n\r\n", true},
	{"status 000", "HTTP/1.1 000 Zero\r\nContent-Length: 3\r\n\r\nabc", true},
	{"status 999", "HTTP/1.1 999 Nine\r\n\r\nabc", true},
	{"status text differs", "HTTP/1.1 200 Okay\r\nContent-Length: 0\r\n\r\n", true},
	{"no header", "HTTP/1.1 200 OK\r\n\r\nclose-delimited body", true},
	{"close delimited", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nto the end", true},
	{"content-length 0", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\nrest", true},
	{"content-length 00", "HTTP/1.1 200 OK\r\nContent-Length: 00\r\n\r\nrest", true},
	{"content-length leading zeros", "HTTP/1.1 200 OK\r\nContent-Length: 003\r\n\r\nabcd", true},
	{"content-length short", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", true},
	{"content-length one short", "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nabc", true},
	{"content-length huge", "HTTP/1.1 200 OK\r\nContent-Length: 999999999999999999\r\n\r\nabc", true},
	{"content-length 19 digits", "HTTP/1.1 200 OK\r\nContent-Length: 1000000000000000000\r\n\r\nabc", false},
	{"content-length overflow", "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\nabc", false},
	{"content-length empty", "HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\nabc", false},
	{"content-length plus", "HTTP/1.1 200 OK\r\nContent-Length: +3\r\n\r\nabc", false},
	{"content-length negative", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\nabc", false},
	{"content-length words", "HTTP/1.1 200 OK\r\nContent-Length: 3 4\r\n\r\nabc", false},
	{"content-length dup equal", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\ncontent-length: 3\r\n\r\nabcd", true},
	{"content-length dup unequal", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", false},
	{"content-length dup zeros", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 03\r\n\r\nabcd", false},
	{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\nnext", true},
	{"chunked closing", "HTTP/1.1 200 OK\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-T: 1\r\n\r\nrest", true},
	{"chunked upper case", "HTTP/1.1 200 OK\r\nTransfer-Encoding: CHUNKED\r\n\r\n2\r\nok\r\n0\r\n\r\n", true},
	{"chunked with trailer", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-Checksum: abc\r\nx-other: 1\r\n\r\nnext", true},
	{"chunked announced trailer", "HTTP/1.1 200 OK\r\nTrailer: X-Checksum\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-Checksum: abc\r\n\r\n", false},
	{"chunked bad trailer", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nbad trailer\r\n\r\n", true},
	{"chunked truncated trailer", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-Checksum: abc\r\n", true},
	{"chunked trailer EOF", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n", true},
	{"chunked with extension", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\n\r\n", true},
	{"chunked bad size", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n", true},
	{"chunked truncated", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", true},
	{"chunked and content-length", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", true},
	{"chunked and bad content-length", "HTTP/1.1 200 OK\r\nContent-Length: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", false},
	{"gzip encoding", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nabc", false},
	{"chunked, gzip", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\nabc", false},
	{"two encodings", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", false},
	{"identity encoding", "HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\nContent-Length: 2\r\n\r\nok", false},
	{"encoding on 1.0", "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n2\r\nok", true},
	{"trailer without chunked", "HTTP/1.1 200 OK\r\nTrailer: X\r\nContent-Length: 2\r\n\r\nok", true},
	{"HTTP/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", true},
	{"HTTP/1.0 keep-alive", "HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 2\r\n\r\nok", true},
	{"HTTP/1.0 keep-alive and close", "HTTP/1.0 200 OK\r\nConnection: keep-alive, close\r\nContent-Length: 2\r\n\r\nok", true},
	{"HTTP/1.0 close delimited", "HTTP/1.0 200 OK\r\n\r\nto the end", true},
	{"connection close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", true},
	{"connection list with close", "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nConnection: Upgrade,  CLOSE \r\nContent-Length: 2\r\n\r\nok", true},
	{"connection closed", "HTTP/1.1 200 OK\r\nConnection: closed\r\nContent-Length: 2\r\n\r\nok", true},
	{"connection keep-alive", "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\nContent-Length: 2\r\n\r\nok", true},
	{"pragma no-cache", "HTTP/1.1 200 OK\r\nPragma: no-cache\r\nContent-Length: 0\r\n\r\n", true},
	{"pragma with cache-control", "HTTP/1.1 200 OK\r\nPragma: no-cache\r\nCache-Control: max-age=5\r\nContent-Length: 0\r\n\r\n", true},
	{"204", "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\nHTTP/1.1 200 OK\r\n\r\n", true},
	{"204 chunked", "HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", true},
	{"304", "HTTP/1.1 304 Not Modified\r\nContent-Type: text/plain\r\nContent-Length: 187\r\nEtag: \"x\"\r\n\r\n", true},
	{"100 then 200", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", true},
	{"103", "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n", true},
	{"101", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nraw bytes", true},
	{"HTTP/2.0", "HTTP/2.0 200 OK\r\nContent-Length: 2\r\n\r\nok", false},
	{"HTTP/0.9", "HTTP/0.9 200 OK\r\nContent-Length: 2\r\n\r\nok", false},
	{"HTTP/1.2", "HTTP/1.2 200 OK\r\nContent-Length: 2\r\n\r\nok", false},
	{"HTTP/0.0", "HTTP/0.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", false},
	{"lower-case proto", "http/1.1 200 OK\r\n\r\n", false},
	{"ICY", "ICY 200 OK\r\n\r\n", false},
	{"proto only", "HTTP/1.1\r\n\r\n", false},
	{"tab after proto", "HTTP/1.1\t200 OK\r\n\r\n", false},
	{"short code", "HTTP/1.1 20 OK\r\n\r\n", false},
	{"long code", "HTTP/1.1 2000 OK\r\n\r\n", false},
	{"code letters", "HTTP/1.1 abc OK\r\n\r\n", false},
	{"code plus", "HTTP/1.1 +12 OK\r\nContent-Length: 0\r\n\r\n", false},
	{"code minus", "HTTP/1.1 -12 OK\r\n\r\n", false},
	{"code tab", "HTTP/1.1 200\tOK\r\n\r\n", false},
	{"empty status line", "\r\nHTTP/1.1 200 OK\r\n\r\n", false},
	{"obs-fold", "HTTP/1.1 200 OK\r\nX-A: one\r\n two\r\n\tthree\r\nContent-Length: 0\r\n\r\n", false},
	{"leading space", "HTTP/1.1 200 OK\r\n X-A: one\r\nContent-Length: 0\r\n\r\n", false},
	{"leading tab", "HTTP/1.1 200 OK\r\n\tX-A: one\r\n\r\n", false},
	{"space before colon", "HTTP/1.1 200 OK\r\nX-A : one\r\nContent-Length: 0\r\n\r\n", false},
	{"space in name", "HTTP/1.1 200 OK\r\nBad Name: one\r\nContent-Length: 0\r\n\r\n", false},
	{"empty name", "HTTP/1.1 200 OK\r\n: one\r\n\r\n", false},
	{"NUL in name", "HTTP/1.1 200 OK\r\nX\x00A: one\r\n\r\n", false},
	{"UTF-8 name", "HTTP/1.1 200 OK\r\nX-\xc3\xa9: one\r\n\r\n", false},
	{"no colon", "HTTP/1.1 200 OK\r\nGarbage\r\nContent-Length: 0\r\n\r\n", false},
	{"colon in value", "HTTP/1.1 200 OK\r\nLocation: http://x:80/\r\nContent-Length: 0\r\n\r\n", true},
	{"NUL in value", "HTTP/1.1 200 OK\r\nX-A: a\x00b\r\n\r\n", false},
	{"CR in value", "HTTP/1.1 200 OK\r\nX-A: a\rb\r\n\r\n", false},
	{"DEL in value", "HTTP/1.1 200 OK\r\nX-A: a\x7fb\r\n\r\n", false},
	{"tab in value", "HTTP/1.1 200 OK\r\nX-A: a\tb\r\nContent-Length: 0\r\n\r\n", true},
	{"huge header", "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("b", 20<<10) + "\r\nContent-Length: 2\r\n\r\nok", false},
	{"huge header lines", "HTTP/1.1 200 OK\r\n" + strings.Repeat("X-Many: 0123456789\r\n", 1000) + "Content-Length: 2\r\n\r\nok", false},
	{"empty", "", false},
	{"truncated status", "HTTP/1.1 20", false},
	{"truncated status line", "HTTP/1.1 200 OK", false},
	{"truncated header", "HTTP/1.1 200 OK\r\nContent-Le", false},
	{"truncated before blank line", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n", false},
	{"truncated in blank line", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r", false},
	{"truncated bad line", "HTTP/1.1 200 OK\r\nbad line\r\nX", false},
}

// wireOutcome is what can be observed of reading a response.
type wireOutcome struct {
	Err                       string
	Status, Proto             string
	StatusCode, Major, Minor  int
	Header                    http.Header
	ContentLength             int64
	TransferEncoding          []string
	Close, Uncompressed       bool
	SameRequest, NoBody       bool
	Trailer, TrailerAfterBody http.Header
	Body                      string
	BodyErr, AfterErr         string // the read that ended the body, one more read
	CloseErr                  string
	Rest                      string // what the reader held afterwards
	RestErr                   string
}

func wireErrString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

var errWireTest = errors.New("wire test: connection timed out")

// wireSource wraps the input as one kind of connection.
func wireSource(in string, kind int) io.Reader {
	r := io.Reader(strings.NewReader(in))
	switch kind {
	case 1:
		r = iotest.OneByteReader(r)
	case 2:
		r = iotest.DataErrReader(r)
	case 3:
		r = io.MultiReader(r, wireErrReader{errWireTest})
	case 4:
		r = iotest.HalfReader(r)
	}
	return r
}

const wireSourceKinds = 5

// wireRead reads up to three responses from in with read, one after the
// other on the same reader (as after a 1xx), and reports what it saw.
// closeFirst closes each body before reading it.
func wireRead(read func(*bufio.Reader, *http.Request) (*http.Response, error), in string, kind, size int, req *http.Request, closeFirst bool) []wireOutcome {
	br := bufio.NewReaderSize(wireSource(in, kind), size)
	var out []wireOutcome
	for range 3 {
		o := wireReadOne(read, br, req, closeFirst)
		out = append(out, o)
		ended := o.BodyErr == "EOF"
		if closeFirst {
			ended = o.CloseErr == ""
		}
		if o.Err != "" || !ended || o.Close {
			break
		}
	}
	rest, err := io.ReadAll(br)
	out[len(out)-1].Rest, out[len(out)-1].RestErr = string(rest), wireErrString(err)
	return out
}

// wireReadOne reads one response from br with read.
func wireReadOne(read func(*bufio.Reader, *http.Request) (*http.Response, error), br *bufio.Reader, req *http.Request, closeFirst bool) wireOutcome {
	res, err := read(br, req)
	var o wireOutcome
	if err != nil {
		o.Err = err.Error()
		if res != nil {
			o.Err += " (and a response)"
		}
		return o
	}
	o.Status, o.Proto = res.Status, res.Proto
	o.StatusCode, o.Major, o.Minor = res.StatusCode, res.ProtoMajor, res.ProtoMinor
	o.Header = res.Header
	o.ContentLength, o.TransferEncoding = res.ContentLength, res.TransferEncoding
	o.Close, o.Uncompressed = res.Close, res.Uncompressed
	o.SameRequest, o.NoBody = res.Request == req, res.Body == http.NoBody
	o.Trailer = res.Trailer.Clone()
	if closeFirst {
		o.CloseErr = wireErrString(res.Body.Close())
	}
	var body []byte
	p := make([]byte, 7)
	for range 1 << 20 {
		n, err := res.Body.Read(p)
		body = append(body, p[:n]...)
		if err != nil {
			o.BodyErr = err.Error()
			break
		}
	}
	_, err = res.Body.Read(p)
	o.AfterErr = wireErrString(err)
	if !closeFirst {
		o.CloseErr = wireErrString(res.Body.Close())
	}
	o.Body = string(body)
	o.TrailerAfterBody = res.Trailer
	return o
}

// wireCompare reads in with http.ReadResponse and readResponseHead in
// every way and reports the first difference.
func wireCompare(in string) error {
	for _, method := range []string{"GET", "HEAD", ""} {
		var req *http.Request
		if method != "" {
			req = &http.Request{Method: method}
		}
		for kind := range wireSourceKinds {
			for _, size := range []int{upstreamBufferSize, 64, 16} {
				for _, closeFirst := range []bool{false, true} {
					want := wireRead(http.ReadResponse, in, kind, size, req, closeFirst)
					got := wireRead(readResponseHead, in, kind, size, req, closeFirst)
					if !reflect.DeepEqual(got, want) {
						return fmt.Errorf("method %q, source %d, buffer %d, close first %v:\n got %+v\nwant %+v",
							method, kind, size, closeFirst, got, want)
					}
				}
			}
		}
	}
	return nil
}

func TestReadResponseHeadMatchesNetHTTP(t *testing.T) {
	for _, tc := range wireResponses {
		t.Run(tc.name, func(t *testing.T) {
			if err := wireCompare(tc.in); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestReadResponseHeadFastPath checks which responses readResponseHead
// parses itself rather than handing them to http.ReadResponse.
func TestReadResponseHeadFastPath(t *testing.T) {
	for _, tc := range wireResponses {
		t.Run(tc.name, func(t *testing.T) {
			buf := []byte(tc.in)
			if len(buf) > upstreamBufferSize {
				buf = buf[:upstreamBufferSize]
			}
			var sc wireHeadScan
			end := sc.scan(buf)
			fast := false
			if end > 0 {
				br := bufio.NewReader(strings.NewReader(tc.in))
				_, fast = wireParseHead(buf[:end], sc.lines, &http.Request{Method: "GET"}, br)
			}
			if fast != tc.fast {
				t.Fatalf("parsed by readResponseHead: %v, want %v", fast, tc.fast)
			}
		})
	}
}

// TestReadResponseHeadValues checks what the differential test cannot:
// the values slices are separate, and common names and values interned.
func TestReadResponseHeadValues(t *testing.T) {
	in := "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nX-A: 1\r\nX-B: 2\r\nX-A: 3\r\nContent-Length: 0\r\n\r\n"
	res, err := readResponseHead(bufio.NewReader(strings.NewReader(in)), nil)
	if err != nil {
		t.Fatal(err)
	}
	b := res.Header["X-B"]
	if cap(b) != len(b) {
		t.Fatalf("X-B has cap %d, len %d", cap(b), len(b))
	}
	res.Header["X-B"] = append(b, "appended")
	if got := fmt.Sprint(res.Header["X-A"], res.Header["Content-Length"]); got != "[1 3] [0]" {
		t.Fatalf("appending to X-B changed its neighbours: %s", got)
	}
	if ct := res.Header["Content-Type"][0]; ct != "application/json" || !sameString(ct, "application/json") {
		t.Fatalf("Content-Type %q not interned", ct)
	}
	if res.Status != "200 OK" || !sameString(res.Status, wireStatusText(200)) {
		t.Fatalf("status %q not interned", res.Status)
	}
}

// sameString reports whether a and b share their bytes.
func sameString(a, b string) bool {
	return len(a) == len(b) && unsafe.StringData(a) == unsafe.StringData(b)
}

// TestReadResponseHeadAllocs bounds the allocations of the typical case.
func TestReadResponseHeadAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation count")
	}
	in := wireBenchResponse
	rd := strings.NewReader(in)
	br := bufio.NewReaderSize(rd, upstreamBufferSize)
	req := &http.Request{Method: "GET"}
	p := make([]byte, 512)
	allocs := testing.AllocsPerRun(100, func() {
		rd.Reset(in)
		br.Reset(rd)
		res, err := readResponseHead(br, req)
		if err != nil {
			t.Fatal(err)
		}
		for {
			if _, err := res.Body.Read(p); err != nil {
				break
			}
		}
	})
	if allocs > 4 {
		t.Fatalf("%v allocations, want at most 4", allocs)
	}
}

// wireRequests are the requests the differential tests and the fuzz seeds
// write.
func wireRequests() []struct {
	name string
	req  func() *http.Request
} {
	// mk returns a constructor: a request with a body can be written once.
	mk := func(method, rawURL string, h http.Header, mod func(*http.Request)) func() *http.Request {
		return func() *http.Request {
			u, err := url.Parse(rawURL)
			if err != nil {
				panic(err)
			}
			r := &http.Request{Method: method, URL: u, Header: h}
			if mod != nil {
				mod(r)
			}
			return r
		}
	}
	typical := func() http.Header {
		return http.Header{
			"User-Agent":        {"exgate-test/1.0"},
			"Accept":            {"application/json"},
			"X-Forwarded-For":   {"203.0.113.7"},
			"X-Forwarded-Host":  {"api.example.com"},
			"X-Forwarded-Proto": {"https"},
			"X-Real-Ip":         {"203.0.113.7"},
			"X-Request-Id":      {"4f6c2a9e"},
		}
	}
	var traced []string
	return []struct {
		name string
		req  func() *http.Request
	}{
		{"typical", mk("GET", "http://backend:9000/api/v1/mkt/markets/", typical(), nil)},
		{"empty method", mk("", "http://backend:9000/x", typical(), nil)},
		{"HEAD", mk("HEAD", "http://backend:9000/x", typical(), nil)},
		{"OPTIONS", mk("OPTIONS", "http://backend:9000/x", typical(), nil)},
		{"OPTIONS NoBody", mk("OPTIONS", "http://backend:9000/x", nil, func(r *http.Request) { r.Body = http.NoBody })},
		{"GET NoBody", mk("GET", "http://backend:9000/x", nil, func(r *http.Request) { r.Body = http.NoBody })},
		{"nil header", mk("GET", "http://backend:9000/x", nil, nil)},
		{"query", mk("GET", "http://backend:9000/a/b?page=2&x=%20y", nil, nil)},
		{"force query", mk("GET", "http://backend:9000/a?", nil, nil)},
		{"escaped path", mk("GET", "http://backend:9000/a%2Fb/c%20d", nil, nil)},
		{"path to escape", mk("GET", "http://backend:9000/", nil, func(r *http.Request) { r.URL.Path = "/a b/\x01ü" })},
		{"raw path", mk("GET", "http://backend:9000/", nil, func(r *http.Request) { r.URL.Path, r.URL.RawPath = "/a/b", "/a%2Fb" })},
		{"star", mk("OPTIONS", "http://backend:9000/", nil, func(r *http.Request) { r.URL.Path = "*" })},
		{"empty path", mk("GET", "http://backend:9000", nil, nil)},
		{"empty path query", mk("GET", "http://backend:9000?q=1", nil, nil)},
		{"opaque", mk("GET", "http://backend:9000/", nil, func(r *http.Request) { r.URL.Opaque = "/opaque/x"; r.URL.RawQuery = "q" })},
		{"opaque slashes", mk("GET", "http://backend:9000/", nil, func(r *http.Request) { r.URL.Opaque = "//h/x" })},
		{"CTL in query", mk("GET", "http://backend:9000/", nil, func(r *http.Request) { r.URL.RawQuery = "a=\x7f" })},
		{"CTL in opaque", mk("GET", "http://backend:9000/", nil, func(r *http.Request) { r.URL.Opaque = "/a\nb" })},
		{"request host", mk("GET", "http://backend:9000/", nil, func(r *http.Request) { r.Host = "api.example.com" })},
		{"invalid host", mk("GET", "http://backend:9000/", nil, func(r *http.Request) { r.Host = "a b\r\nX: y" })},
		{"host with slash", mk("GET", "http://backend:9000/", nil, func(r *http.Request) { r.Host = "a/b" })},
		{"IPv6 zone", mk("GET", "http://backend:9000/", nil, func(r *http.Request) { r.Host = "[fe80::1%25en0]:8080" })},
		{"IPv6 zone raw", mk("GET", "http://backend:9000/", nil, func(r *http.Request) { r.Host = "[fe80::1%en0]:8080" })},
		{"IPv6 bracket only", mk("GET", "http://backend:9000/", nil, func(r *http.Request) { r.Host = "[fe80::1%en0" })},
		{"unicode host", mk("GET", "http://backend:9000/", nil, func(r *http.Request) { r.Host = "bücher.example:80" })},
		{"bad unicode host", mk("GET", "http://backend:9000/", nil, func(r *http.Request) { r.Host = "\xff\xfe" })},
		{"empty user agent", mk("GET", "http://backend:9000/", http.Header{"User-Agent": {""}, "X": {"1"}}, nil)},
		{"nil user agent", mk("GET", "http://backend:9000/", http.Header{"User-Agent": nil}, nil)},
		{"user agent CRLF", mk("GET", "http://backend:9000/", http.Header{"User-Agent": {" a\r\nb\n "}}, nil)},
		{"user agent blank", mk("GET", "http://backend:9000/", http.Header{"User-Agent": {" \r\n"}}, nil)},
		{"user agents", mk("GET", "http://backend:9000/", http.Header{"User-Agent": {"one", "two"}}, nil)},
		{"close", mk("GET", "http://backend:9000/", nil, func(r *http.Request) { r.Close = true })},
		{"close already", mk("GET", "http://backend:9000/", http.Header{"Connection": {"Keep-Alive, CLOSE"}}, func(r *http.Request) { r.Close = true })},
		{"close in second value", mk("GET", "http://backend:9000/", http.Header{"Connection": {"keep-alive", "close"}}, func(r *http.Request) { r.Close = true })},
		{"closed token", mk("GET", "http://backend:9000/", http.Header{"Connection": {"closed"}}, func(r *http.Request) { r.Close = true })},
		{"values to clean", mk("GET", "http://backend:9000/", http.Header{
			"X-A": {"  padded \t"}, "X-B": {"a\r\nb"}, "X-C": {"\r\n"}, "X-D": {""}, "X-E": {"one", "two", "three"},
			"X-F": {}, "X-G": nil, "X-H": {"\ttab\tinside\t"}, "X-I": {"\x00nul"},
		}, nil)},
		{"names", mk("GET", "http://backend:9000/", http.Header{
			"x-lower": {"1"}, "Bad Name": {"2"}, "": {"3"}, "Bad\r\nName": {"4"}, "X-Ü": {"5"}, "Weird!#$%&'*+-.^_`|~": {"6"},
		}, nil)},
		{"excluded", mk("GET", "http://backend:9000/", http.Header{
			"Host": {"evil"}, "Content-Length": {"5"}, "Transfer-Encoding": {"chunked"}, "Trailer": {"X"}, "host": {"kept"},
		}, nil)},
		{"trailer map", mk("GET", "http://backend:9000/", nil, func(r *http.Request) { r.Trailer = http.Header{"X": nil} })},
		{"transfer encoding", mk("GET", "http://backend:9000/", nil, func(r *http.Request) {
			r.Body, r.TransferEncoding = http.NoBody, []string{"chunked"}
		})},
		{"POST body", mk("POST", "http://backend:9000/orders", http.Header{"Content-Type": {"application/json"}}, func(r *http.Request) {
			r.Body, r.ContentLength = io.NopCloser(strings.NewReader(`{"a":1}`)), 7
		})},
		{"DELETE", mk("DELETE", "http://backend:9000/x", nil, nil)},
		{"nil URL with host", func() *http.Request { return &http.Request{Method: "GET", Host: "x"} }},
		{"traced", mk("GET", "http://backend:9000/", http.Header{"X": {"1"}}, func(r *http.Request) {
			*r = *r.WithContext(httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
				WroteHeaderField: func(k string, _ []string) { traced = append(traced, k) },
			}))
		})},
		{"traced 1xx only", mk("GET", "http://backend:9000/", http.Header{"X": {"1"}}, func(r *http.Request) {
			*r = *r.WithContext(httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
				Got1xxResponse: nil,
			}))
		})},
	}
}

// wireWrite writes req with write, recovering a panic as an error.
func wireWrite(write func(*bufio.Writer, *http.Request) error, req *http.Request) (out string, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	var buf bytes.Buffer
	bw := bufio.NewWriterSize(&buf, upstreamBufferSize)
	err = write(bw, req)
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	return buf.String(), err
}

// wireSortedHead returns a written request with its header lines sorted.
func wireSortedHead(s string) string {
	head, body, _ := strings.Cut(s, "\r\n\r\n")
	lines := strings.Split(head, "\r\n")
	slices.Sort(lines[1:])
	return strings.Join(lines, "\r\n") + "\r\n\r\n" + body
}

// wireCompareWrite writes a request made by mk with (*http.Request).Write
// and another with writeRequestHead and reports the first difference.
func wireCompareWrite(mk func() *http.Request) error {
	want, wantErr := wireWrite(func(bw *bufio.Writer, r *http.Request) error { return r.Write(bw) }, mk())
	got, gotErr := wireWrite(writeRequestHead, mk())
	if wireErrString(gotErr) != wireErrString(wantErr) {
		return fmt.Errorf("error %v, want %v", gotErr, wantErr)
	}
	if wireSortedHead(got) != wireSortedHead(want) {
		return fmt.Errorf("wrote (sorted)\n%q\nwant\n%q", wireSortedHead(got), wireSortedHead(want))
	}
	if g, w, _ := strings.Cut(got, "\r\n"); g != strings.SplitN(want, "\r\n", 2)[0] {
		return fmt.Errorf("request line %q, want %q", g, w)
	}
	if wantErr != nil {
		return nil
	}
	gr, gerr := http.ReadRequest(bufio.NewReader(strings.NewReader(got)))
	wr, werr := http.ReadRequest(bufio.NewReader(strings.NewReader(want)))
	if (gerr == nil) != (werr == nil) {
		return fmt.Errorf("reading it back: %v, want %v", gerr, werr)
	}
	if gerr == nil {
		if gr.Method != wr.Method || gr.RequestURI != wr.RequestURI || gr.Host != wr.Host ||
			!reflect.DeepEqual(gr.Header, wr.Header) || gr.Close != wr.Close {
			return fmt.Errorf("read back %s %s host %q %v close %v, want %s %s host %q %v close %v",
				gr.Method, gr.RequestURI, gr.Host, gr.Header, gr.Close, wr.Method, wr.RequestURI, wr.Host, wr.Header, wr.Close)
		}
	}
	return nil
}

func TestWriteRequestHeadMatchesNetHTTP(t *testing.T) {
	for _, tc := range wireRequests() {
		t.Run(tc.name, func(t *testing.T) {
			if err := wireCompareWrite(tc.req); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestWriteRequestHeadTrace(t *testing.T) {
	var fields []string
	wrote := false
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		WroteHeaderField: func(k string, _ []string) { fields = append(fields, k) },
		WroteRequest:     func(httptrace.WroteRequestInfo) { wrote = true },
	})
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://backend:9000/x", nil)
	req.Header.Set("X-A", "1")
	if _, err := wireWrite(writeRequestHead, req); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(fields) != "[Host User-Agent X-A]" || !wrote {
		t.Fatalf("trace saw fields %v, wrote %v", fields, wrote)
	}
}

func TestWriteRequestHeadAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation count")
	}
	query := wireBenchRequest()
	query.URL.RawQuery = "page=2&symbol=BTC_USDT"
	query.Close = true
	query.Header["X-Multi"] = []string{" padded ", "a\r\nb"}
	for name, req := range map[string]*http.Request{"typical": wireBenchRequest(), "query": query} {
		t.Run(name, func(t *testing.T) {
			bw := bufio.NewWriterSize(io.Discard, upstreamBufferSize)
			allocs := testing.AllocsPerRun(100, func() {
				if err := writeRequestHead(bw, req); err != nil {
					t.Fatal(err)
				}
				_ = bw.Flush()
			})
			if allocs != 0 {
				t.Fatalf("%v allocations, want none", allocs)
			}
		})
	}
}

// TestWriteRequestHeadError checks that a failing writer fails the write.
func TestWriteRequestHeadError(t *testing.T) {
	boom := errors.New("boom")
	bw := bufio.NewWriterSize(wireFailWriter{boom}, 16)
	if err := writeRequestHead(bw, wireBenchRequest()); !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
}

type wireFailWriter struct{ err error }

func (w wireFailWriter) Write([]byte) (int, error) { return 0, w.err }

func FuzzReadResponseHead(f *testing.F) {
	for _, tc := range wireResponses {
		if len(tc.in) < 4096 {
			f.Add([]byte(tc.in))
		}
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if err := wireCompare(string(in)); err != nil {
			t.Fatal(err)
		}
	})
}

func FuzzWriteRequestHead(f *testing.F) {
	f.Add(uint8(0), "backend:9000", "", "/api/v1/mkt/markets/", "", "", "X-Request-Id", "abc", "Accept", "application/json", "exgate", uint8(0))
	f.Add(uint8(1), "backend:9000", "api.example.com", "/a b", "", "q=1", "x-lower", " a\r\nb ", "Bad Name", "v", "", uint8(5))
	f.Add(uint8(2), "[fe80::1%en0]:80", "", "", "", "", "Connection", "keep-alive, close", "User-Agent", "ua", "", uint8(3))
	f.Add(uint8(3), "backend", "bücher.example", "/p", "/%70", "\x01", "Host", "h", "Content-Length", "1", "x", uint8(8))
	f.Fuzz(func(t *testing.T, method uint8, urlHost, host, path, rawPath, query, k1, v1, k2, v2, ua string, flags uint8) {
		mk := func() *http.Request {
			req := &http.Request{
				Method: []string{"GET", "HEAD", "OPTIONS", ""}[method%4],
				URL:    &url.URL{Scheme: "http", Host: urlHost, Path: path, RawPath: rawPath, RawQuery: query},
				Host:   host,
				Header: http.Header{k1: {v1}},
				Close:  flags&1 != 0,
			}
			req.Header[k2] = append(req.Header[k2], v2)
			if flags&2 != 0 {
				req.Header["User-Agent"] = []string{ua}
			}
			if flags&4 != 0 {
				req.URL.ForceQuery = true
			}
			if flags&8 != 0 {
				req.URL.Opaque = path
			}
			return req
		}
		if err := wireCompareWrite(mk); err != nil {
			t.Fatal(err)
		}
	})
}

// wireBenchResponse is a typical backend answer.
var wireBenchResponse = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nDate: Mon, 02 Jun 2025 10:00:00 GMT\r\nContent-Length: 187\r\nX-Request-Id: 01JX3M7Q8Z4K2N5P6R7S8T9V0W\r\n\r\n" +
	`[{"symbol":"BTC_USDT","base":"BTC","quote":"USDT","tradable":true,"price_precision":2},{"symbol":"ETH_USDT","base":"ETH","quote":"USDT","tradable":true,"price_precision":2,"x":"xxxxxxx"}]`

// wireBenchRequest is a typical request as ReverseProxy forwards it.
func wireBenchRequest() *http.Request {
	u, _ := url.Parse("http://backend:9000/api/v1/mkt/markets/")
	return &http.Request{Method: "GET", URL: u, Host: "backend:9000", Header: http.Header{
		"User-Agent":        {"Mozilla/5.0 (X11; Linux x86_64) exgate-bench"},
		"Accept":            {"application/json"},
		"X-Forwarded-For":   {"203.0.113.7"},
		"X-Forwarded-Host":  {"api.example.com"},
		"X-Forwarded-Proto": {"https"},
		"X-Real-Ip":         {"203.0.113.7"},
		"X-Request-Id":      {"01JX3M7Q8Z4K2N5P6R7S8T9V0W"},
	}}
}

func BenchmarkReadResponseHead(b *testing.B) {
	if len(wireBenchResponse)-strings.Index(wireBenchResponse, "\r\n\r\n")-4 != 187 {
		b.Fatal("the body is not 187 bytes")
	}
	for _, bc := range []struct {
		name string
		read func(*bufio.Reader, *http.Request) (*http.Response, error)
	}{{"nethttp", http.ReadResponse}, {"lean", readResponseHead}} {
		b.Run(bc.name, func(b *testing.B) {
			rd := strings.NewReader(wireBenchResponse)
			br := bufio.NewReaderSize(rd, upstreamBufferSize)
			req := wireBenchRequest()
			p := make([]byte, 512)
			b.ReportAllocs()
			for b.Loop() {
				rd.Reset(wireBenchResponse)
				br.Reset(rd)
				res, err := bc.read(br, req)
				if err != nil {
					b.Fatal(err)
				}
				for {
					if _, err := res.Body.Read(p); err != nil {
						break
					}
				}
				_ = res.Body.Close()
			}
		})
	}
}

func BenchmarkWriteRequestHead(b *testing.B) {
	for _, bc := range []struct {
		name  string
		write func(*bufio.Writer, *http.Request) error
	}{
		{"nethttp", func(bw *bufio.Writer, r *http.Request) error { return r.Write(bw) }},
		{"lean", writeRequestHead},
	} {
		b.Run(bc.name, func(b *testing.B) {
			req := wireBenchRequest()
			bw := bufio.NewWriterSize(io.Discard, upstreamBufferSize)
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.write(bw, req); err != nil {
					b.Fatal(err)
				}
				_ = bw.Flush()
			}
		})
	}
}
