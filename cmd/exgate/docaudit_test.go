package main

import (
	"encoding/json"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/exgate/exgate/internal/doctext"
)

// The docs audit: beside the documented examples (TestDocumentedExamples),
// what the docs state in prose and tables — which fields an order
// requires, defaults, alert windows — is checked against what exgate and
// the reference backend do.

// docText returns the text of one of the docs (README.md, api.md…).
func docText(t *testing.T, name string) string {
	t.Helper()
	for _, d := range doctext.Docs(t, "../..") {
		if d.Name == name {
			return d.Text
		}
	}
	t.Fatalf("no doc %s", name)
	return ""
}

// orderParamRow is a row of api.md's table of order parameters:
// "| `price` | decimal | `limit`, `stop_limit` and `oco` | rule |".
var orderParamRow = regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| [^|]+ \\| ([^|]+) \\| [^|]+ \\|$")

// orderTypes are the order types of the API.
var orderTypes = []string{"limit", "market", "stop_limit", "oco"}

// requiredFor reads a required column ("yes", "no", "`limit` and `oco`")
// as the order types that require the parameter.
func requiredFor(col string) []string {
	switch col = strings.TrimSpace(col); col {
	case "yes":
		return orderTypes
	case "no":
		return nil
	}
	var out []string
	for _, m := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(col, -1) {
		out = append(out, m[1])
	}
	return out
}

// completeOrder is an order of type typ with every parameter it uses.
func completeOrder(typ string) map[string]any {
	o := map[string]any{"symbol": "BTC_USDT", "type": typ, "side": "buy", "base_amount": "0.001"}
	switch typ {
	case "limit":
		o["price"] = "60000"
	case "stop_limit":
		o["price"], o["stop_price"] = "60000", "61000"
	case "oco":
		o["price"], o["stop_price"], o["oco_target_price"] = "60000", "59000", "62000"
	}
	return o
}

// TestDocsOrderParametersAreRequiredAsStated holds api.md's table of
// order parameters to exgate and to the reference backend: for each
// order type, a parameter the table says that type requires is refused
// when missing, by exgate (400 invalid_order naming it) and by the
// backend (400 naming it) alike, and one it does not require is not
// asked for by either.
func TestDocsOrderParametersAreRequiredAsStated(t *testing.T) {
	doc := docText(t, "api.md")
	i := strings.Index(doc, "| parameter | type | required | rule |")
	if i < 0 {
		t.Fatal("api.md has no table of order parameters")
	}
	table := doc[i:]
	table = table[:strings.Index(table, "\n\n")]
	required := map[string][]string{}
	for _, m := range orderParamRow.FindAllStringSubmatch(table, -1) {
		required[m[1]] = requiredFor(m[2])
	}
	for _, p := range []string{"symbol", "type", "side", "base_amount", "price", "stop_price", "oco_target_price", "identifier"} {
		if _, ok := required[p]; !ok {
			t.Fatalf("api.md's table has no row for %s: %v", p, slices.Sorted(maps.Keys(required)))
		}
	}

	s := startStack(t, nil)
	token := authenticate(t, s.url)
	// asks reports whether the answer to an order without param names
	// param among its field errors.
	asks := func(base, typ, param string) bool {
		o := completeOrder(typ)
		delete(o, param)
		body, _ := json.Marshal(o)
		code, _, b := call(t, "POST", base+"/api/v1/odr/orders/", string(body),
			"Content-Type", "application/json", "Authorization", "Bearer "+token)
		if code != http.StatusBadRequest {
			return false
		}
		var e map[string]any
		_ = json.Unmarshal(b, &e)
		if f, ok := e["fields"].(map[string]any); ok { // exgate's answer
			e = f
		}
		return e[param] != nil
	}
	for param, types := range required {
		if param == "type" {
			continue // an order without a type has no type to require it for
		}
		for _, typ := range orderTypes {
			want := slices.Contains(types, typ)
			if got := asks(s.url, typ, param); got != want {
				t.Errorf("api.md: %s required for a %s order: %v; exgate asks for it: %v", param, typ, want, got)
			}
			if got := asks(s.bs.URL, typ, param); got != want {
				t.Errorf("api.md: %s required for a %s order: %v; the reference backend asks for it: %v", param, typ, want, got)
			}
		}
	}
}
