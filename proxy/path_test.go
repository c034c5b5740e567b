package proxy

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

func TestCanonicalPath(t *testing.T) {
	tests := []struct {
		in   string
		want string
		err  error
	}{
		{"/", "/", nil},
		{"/api/v1/odr/orders/", "/api/v1/odr/orders/", nil},
		{"/api/v1/odr/orders", "/api/v1/odr/orders", nil},
		{"//api//v1///odr/orders//", "/api/v1/odr/orders/", nil},
		{"/api/./v1/odr/./orders/", "/api/v1/odr/orders/", nil},
		{"/api/v1/mkt/../odr/orders/", "/api/v1/odr/orders/", nil},
		{"/api/v1/odr/orders/.", "/api/v1/odr/orders/", nil},
		{"/api/v1/odr/orders/x/..", "/api/v1/odr/orders/", nil},
		{"/api/v1/odr/%6frders/", "/api/v1/odr/orders/", nil},
		{"/api/v1/odr/%2e%2e/odr/orders/", "/api/v1/odr/orders/", nil},
		{"/api/v1/odr/%2E/orders/", "/api/v1/odr/orders/", nil},
		{"/api/v1/mth/matches/BTC_USDT/", "/api/v1/mth/matches/BTC_USDT/", nil},
		{"/a/...", "/a/...", nil},
		{"/a/..b/c.", "/a/..b/c.", nil},
		{"/.", "/", nil},
		{"/a/b/../..", "/", nil},
		{"/~user/x", "/~user/x", nil},
		{"/a:b@c!$&'()*+,=", "/a:b@c!$&'()*+,=", nil},
		{"/api/v1/odr/orders/%7B1,2%7D/", "/api/v1/odr/orders/{1,2}/", nil},
		{"/api/v1/odr/orders/{1,2}/", "/api/v1/odr/orders/{1,2}/", nil},
		{"", "", errPathNotAbsolute},
		{"*", "", errPathNotAbsolute},
		{"api/v1", "", errPathNotAbsolute},
		{"/..", "", errPathAboveRoot},
		{"/a/../..", "", errPathAboveRoot},
		{"/%2e%2e/etc", "", errPathAboveRoot},
		{"/api/v1/odr%2forders/", "", errPathEncodedSep},
		{"/api/v1/odr%2Forders/", "", errPathEncodedSep},
		{"/api/v1/odr%5corders/", "", errPathEncodedSep},
		{"/api/v1/odr/orders%25/", "", errPathEncodedSep},
		{"/api/v1/odr/%252e%252e/", "", errPathEncodedSep},
		{"/api/v1/odr/orders/%00", "", errPathBadChar},
		{"/api/v1/odr/orders/%20", "", errPathBadChar},
		{"/api/v1/odr/orders/%0a", "", errPathBadChar},
		{"/api/v1/odr/orders/%c3%a9", "", errPathBadChar},
		{"/api/v1/odr/orders;x=1/", "", errPathBadChar},
		{"/api/v1/odr/orders%3b/", "", errPathBadChar},
		{"/api\\v1/odr/orders/", "", errPathBadChar},
		{"/api/v1/odr/orders/%", "", errPathBadEscape},
		{"/api/v1/odr/orders/%2", "", errPathBadEscape},
		{"/api/v1/odr/orders/%zz", "", errPathBadEscape},
		{"/" + strings.Repeat("a/", maxSegments+1), "", errPathTooManySlash},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := canonicalPath(tt.in)
			if err != tt.err { //nolint:errorlint // sentinel values
				t.Fatalf("canonicalPath(%q) error = %v, want %v", tt.in, err, tt.err)
			}
			if got != tt.want {
				t.Fatalf("canonicalPath(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestCanonicalPathCleanDoesNotAllocate(t *testing.T) {
	p := "/api/v1/mth/matches/BTC_USDT/"
	if n := testing.AllocsPerRun(100, func() { _, _ = canonicalPath(p) }); n != 0 {
		t.Fatalf("canonicalPath of a clean path allocates %v times", n)
	}
}

// FuzzCanonicalPath checks that canonicalisation never panics, that its
// result is canonical (idempotent) and made only of path characters, and
// that it never climbs above the root.
func FuzzCanonicalPath(f *testing.F) {
	for _, s := range []string{
		"/", "/api/v1/odr/orders/", "//a/./b/../c/", "/%2e%2E/x", "/a%2fb", "/a/%zz",
		"/api/v1/odr/%6frders", "/a;b", "/a/b/..", "/./.././", "/%41%42",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		got, err := canonicalPath(p)
		if err != nil {
			if _, ok := err.(pathError); !ok {
				t.Fatalf("error %v is not a pathError", err)
			}
			if pathErrors[err.(pathError)] == nil {
				t.Fatalf("no 400 answer for %v", err)
			}
			return
		}
		if !isClean(got) {
			t.Fatalf("canonicalPath(%q) = %q, which is not clean", p, got)
		}
		again, err := canonicalPath(got)
		if err != nil || again != got {
			t.Fatalf("canonicalPath not idempotent: %q -> %q -> %q, %v", p, got, again, err)
		}
		if strings.Contains(got, "%") || strings.Contains(got, "//") {
			t.Fatalf("canonicalPath(%q) = %q keeps an escape or an empty segment", p, got)
		}
	})
}

func TestInvalidPath(t *testing.T) {
	e := startEnv(t, nil)
	for _, p := range []string{"/a%2fb", "/a/%zz", "/..", "/a;b", "/a%00"} {
		t.Run(p, func(t *testing.T) {
			res := rawRequest(t, e.addr, "GET "+p+" HTTP/1.1\r\nHost: x\r\n\r\n")
			if res.StatusCode == http.StatusBadRequest && res.Header.Get("Content-Type") != "application/json" {
				res.Body.Close()
				return // refused by net/http's request-line parser
			}
			assertError(t, res, http.StatusBadRequest, "invalid_path")
		})
	}
	if e.backend.count() != 0 {
		t.Fatal("an invalid path reached the backend")
	}
}

// TestRequestPathIsCanonicalPath checks that requestPath answers what
// canonicalPath answers for the escaped path, result and refusal: for
// request targets as net/url parses them, and for a path with each byte
// in a segment, as sent and as a URL with RawPath.
func TestRequestPathIsCanonicalPath(t *testing.T) {
	var urls []*url.URL
	for _, target := range []string{
		"/api/v1/mkt/markets/", "/api/v1/odr/orders/3,2/", "/a/./b", "/a/../b", "/../a", "/a//b", "//a",
		"/a%2Fb", "/a%41b", "/a%7Bb%7D", "/a%25", "/a!b", "/a{b}", "/a(b)*", "/a;b", "/a/b.json",
		"/a%20b", "/a~b-c_d.e$f&g+h,i:j=k@l", "/a/%2e%2e/b", "*", "/",
	} {
		u, err := url.ParseRequestURI(target)
		if err != nil {
			t.Fatalf("ParseRequestURI(%q): %v", target, err)
		}
		urls = append(urls, u)
	}
	for c := range 256 {
		seg := "a" + string([]byte{byte(c)}) + "b"
		urls = append(urls, &url.URL{Path: "/x/" + seg + "/"}, &url.URL{Path: "/x/" + seg, RawPath: "/x/" + url.PathEscape(seg)})
	}
	for _, u := range urls {
		t.Run(u.String(), func(t *testing.T) {
			want, wantErr := canonicalPath(u.EscapedPath())
			got, err := requestPath(u)
			if got != want || err != wantErr {
				t.Fatalf("requestPath(%q, raw %q) = %q, %v; canonicalPath(EscapedPath) = %q, %v", u.Path, u.RawPath, got, err, want, wantErr)
			}
		})
	}
}
