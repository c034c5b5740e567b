package validate

import (
	"mime"
	"strings"
	"testing"
)

// FuzzContentType holds jsonContentType to mime.ParseMediaType: whatever
// it accepts, the standard library reads as application/json with at most
// a utf-8 charset (so a Django or Go backend reading the header agrees
// with exgate), and it never accepts an RFC 2231 parameter name, whatever
// the spelling.
func FuzzContentType(f *testing.F) {
	for _, s := range []string{
		"application/json", "application/json; charset=utf-8", `application/json; charset="UTF-8"`,
		"application/json;", "application/json ;\tcharset=utf-8 ;", "application/json; charset*=idna",
		"application/json; charset*0=utf; charset*1=-8", "application/json; version=2",
		"application/json; charset=utf-8; charset=utf-8", "text/plain", "application/json; charset = utf-8",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !jsonContentType([]string{s}) {
			return
		}
		mt, params, err := mime.ParseMediaType(s)
		if err != nil {
			t.Fatalf("accepted %q, which mime.ParseMediaType refuses: %v", s, err)
		}
		if mt != "application/json" {
			t.Fatalf("accepted %q, read by mime.ParseMediaType as %q", s, mt)
		}
		for k, v := range params {
			if k != "charset" || !strings.EqualFold(v, "utf-8") {
				t.Fatalf("accepted %q, which carries parameter %q=%q", s, k, v)
			}
		}
		if strings.Contains(s, "*") {
			t.Fatalf("accepted %q, which has an RFC 2231 parameter name", s)
		}
	})
}
