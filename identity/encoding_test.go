package identity

import (
	"encoding/base64"
	"strings"
	"testing"
)

func TestCanonicalJWS(t *testing.T) {
	tests := []struct {
		token     string
		jws, want bool
	}{
		{"opaque-token", false, false},
		{"one.dot", false, false},
		{"abc.abc.abc", true, true},
		{"eyJhbGciOiJIUzI1NiJ9.eyJ4IjoxfQ.c2lnbmF0dXJl", true, true},
		{"eyJhbGciOiJIUzI1NiJ9.eyJ4IjoxfQ.AA", true, true},
		{"eyJhbGciOiJIUzI1NiJ9.eyJ4IjoxfQ.AB", true, false},    // 4 unused bits, one set
		{"eyJhbGciOiJIUzI1NiJ9.eyJ4IjoxfQ.AAA", true, true},    // 2 unused bits, clear
		{"eyJhbGciOiJIUzI1NiJ9.eyJ4IjoxfQ.AAB", true, false},   // 2 unused bits, one set
		{"eyJhbGciOiJIUzI1NiJ9.eyJ4IjoxfQ.AAC", true, false},   // the other one
		{"eyJhbGciOiJIUzI1NiJ9.eyJ4IjoxfQ.AA==", true, false},  // padding
		{"eyJhbGciOiJIUzI1NiJ9=.eyJ4IjoxfQ.AA", true, false},   // padding inside
		{"eyJhbGciOiJIUzI1NiJ9.eyJ4IjoxfQ.A+/A", true, false},  // standard alphabet
		{"eyJhbGciOiJIUzI1NiJ9.eyJ4IjoxfQ.A", true, false},     // impossible length
		{"eyJhbGciOiJIUzI1NiJ9.eyJ4IjoxfQ.", true, false},      // no signature
		{".eyJ4IjoxfQ.AA", true, false},                        // no header
		{"eyJhbGciOiJIUzI1NiJ9..AA", true, false},              // no payload
		{"eyJhbGciOiJIUzI1NiJ9.eyJ4IjoxfQ.AA.AA", true, false}, // four segments
		{"eyJhbGciOiJIUzI1NiJ9.eyJ4Ijo~fQ.AA", true, false},    // a byte decoders skip
		{"..", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.token, func(t *testing.T) {
			if got := IsJWS(tt.token); got != tt.jws {
				t.Errorf("IsJWS = %v, want %v", got, tt.jws)
			}
			if got := CanonicalJWS(tt.token); got != tt.want {
				t.Errorf("CanonicalJWS = %v, want %v", got, tt.want)
			}
		})
	}
}

// FuzzCanonicalBase64URL checks the segment rule against the standard
// library's strict decoder: a segment is canonical exactly when it is
// non-empty and decodes strictly (and so re-encodes to itself).
func FuzzCanonicalBase64URL(f *testing.F) {
	for _, s := range []string{"", "A", "AA", "AB", "AAA", "AAB", "AAAA", "eyJ4IjoxfQ", "a-_b", "AA==", "+/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := base64.RawURLEncoding.Strict().DecodeString(s)
		// The decoder skips CR and LF even when strict; a token holds neither.
		want := err == nil && s != "" && !strings.ContainsAny(s, "\r\n")
		if got := canonicalBase64URL(s); got != want {
			t.Fatalf("canonicalBase64URL(%q) = %v, strict decoder says %v (%v)", s, got, want, err)
		}
		if want && base64.RawURLEncoding.EncodeToString(b) != s {
			t.Fatalf("%q does not re-encode to itself", s)
		}
	})
}
