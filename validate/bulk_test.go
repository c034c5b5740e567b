package validate

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/exgate/exgate/config"
)

func TestCheckBulk(t *testing.T) {
	v := newValidator(t, func(c *config.Validation) { c.Bulk.MaxOrders = 3 })
	good := limit()
	withID := func(id string) string { return limit("identifier", `"`+id+`"`) }
	tests := []struct {
		name      string
		body      string
		status    int
		code      string
		fields    []string // sorted keys of fields, for invalid_order
		orders    int      // accepted placement size
		ids       []string // accepted cancel ids
		canonical string   // accepted: the canonical encoding, when checked
	}{
		{"one order", "[" + good + "]", 200, "", nil, 1, nil, ""},
		{"three orders with white space", " [\n" + good + " , " + market() + ",\t" + withID("a") + " ]\n", 200, "", nil, 3, nil, ""},
		{"canonical placement", `[{"side":"buy","symbol":"BTC_USDT","type":"limit","price":65000.00,"base_amount":"1.5e-3"}]`, 200, "", nil, 1, nil,
			`[{"symbol":"BTC_USDT","type":"limit","side":"buy","base_amount":"0.0015","price":"65000"}]`},
		{"cancel ids as numbers and strings", `[17, "18", 9223372036854775807]`, 200, "", nil, 0, []string{"17", "18", "9223372036854775807"}, `[17,18,9223372036854775807]`},
		{"one bad element", "[" + good + "," + limit("price", `"65000.005"`) + "]", 400, "invalid_order", []string{"orders[1].price"}, 0, nil, ""},
		{"every bad element named", "[" + limit("side", `"up"`) + "," + good + "," + limit("symbol", "-") + "]", 400, "invalid_order",
			[]string{"orders[0].side", "orders[2].symbol"}, 0, nil, ""},
		{"repeated identifier", "[" + withID("x1") + "," + withID("x1") + "]", 400, "invalid_order", []string{"orders[1].identifier"}, 0, nil, ""},
		{"an id among orders", "[" + good + ",5]", 400, "invalid_order", []string{"orders[1].non_field_errors"}, 0, nil, ""},
		{"an order among ids", "[5," + good + "]", 400, "invalid_order", []string{"ids[1]"}, 0, nil, ""},
		{"bad ids", `[0, -1, 1.5, 1e3, "07", "", "x", 99999999999999999999, true, null]`, 400, "invalid_order", nil, 0, nil, ""},
		{"repeated id", `[4, "4"]`, 400, "invalid_order", []string{"ids[1]"}, 0, nil, ""},
		{"empty array", `[]`, 400, "invalid_order", []string{"non_field_errors"}, 0, nil, ""},
		{"too many", "[" + strings.Repeat(good+",", 3) + good + "]", 400, "invalid_order", []string{"non_field_errors"}, 0, nil, ""},
		{"too many ids", `[1,2,3,4]`, 400, "invalid_order", []string{"non_field_errors"}, 0, nil, ""},
		{"an object, not an array", good, 400, "invalid_order", []string{"non_field_errors"}, 0, nil, ""},
		{"trailing data", "[" + good + "] x", 400, "parse_error", nil, 0, nil, ""},
		{"unterminated", "[" + good, 400, "parse_error", nil, 0, nil, ""},
		{"empty body", "", 400, "parse_error", nil, 0, nil, ""},
		{"repeated key inside an order", `[{"symbol":"BTC_USDT","symbol":"ETH_BTC","type":"market","side":"buy","base_amount":"1"}]`, 400, "invalid_order",
			[]string{"orders[0].symbol"}, 0, nil, ""},
		{"too deep", "[" + strings.Repeat("[", 40) + strings.Repeat("]", 40) + "]", 400, "parse_error", nil, 0, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, p := v.CheckBulk(jsonCT, []byte(tt.body))
			if tt.status == 200 {
				if p != nil {
					t.Fatalf("refused: %s %v", p.Detail, p.Fields)
				}
				if b.Cancel() != (tt.ids != nil) || len(b.Orders) != tt.orders || (tt.ids != nil && !slices.Equal(b.IDs, tt.ids)) {
					t.Fatalf("bulk = %+v", b)
				}
				if b.Len() != max(tt.orders, len(tt.ids)) {
					t.Fatalf("Len = %d", b.Len())
				}
				enc := b.AppendCanonical(nil)
				if !json.Valid(enc) {
					t.Fatalf("canonical encoding is not JSON: %s", enc)
				}
				if tt.canonical != "" && string(enc) != tt.canonical {
					t.Fatalf("canonical = %s, want %s", enc, tt.canonical)
				}
				return
			}
			if p == nil {
				t.Fatalf("accepted: %+v", b)
			}
			if p.Status != tt.status || p.Code != tt.code {
				t.Fatalf("got %d %s (%s), want %d %s", p.Status, p.Code, p.Detail, tt.status, tt.code)
			}
			if p.Code != CodeInvalidOrder {
				return
			}
			if !strings.HasPrefix(p.Detail, bulkLead+": ") {
				t.Errorf("detail %q", p.Detail)
			}
			var names []string
			for n := range p.Fields {
				names = append(names, n)
				if !strings.Contains(p.Detail, strings.TrimSuffix(n, "."+NonFieldErrors)) && n != NonFieldErrors && len(p.Fields) <= maxDetailProblems {
					t.Errorf("detail %q does not name %s", p.Detail, n)
				}
			}
			slices.Sort(names)
			if tt.fields != nil && !slices.Equal(names, tt.fields) {
				t.Errorf("fields %v (%v), want %v", names, p.Fields, tt.fields)
			}
		})
	}
}

func TestCheckBulkTransport(t *testing.T) {
	v := newValidator(t, func(c *config.Validation) { c.Bulk.MaxBodyBytes = 100 })
	if _, p := v.CheckBulk([]string{"text/plain"}, []byte("[1]")); p == nil || p.Status != 415 {
		t.Fatalf("text/plain: %+v", p)
	}
	if _, p := v.CheckBulk(jsonCT, []byte("["+strings.Repeat("1,", 60)+"1]")); p == nil || p.Status != 413 {
		t.Fatalf("over the bulk body limit: %+v", p)
	}
	if p := v.PreCheckBulk(jsonCT, 101); p == nil || p.Status != 413 {
		t.Fatalf("declared length over the limit: %+v", p)
	}
	before := newValidator(t, nil)
	before.cat = unloadedCatalogue(t)
	if _, p := before.CheckBulk(jsonCT, []byte("[1]")); p == nil || p.Code != CodeCatalogueUnavailable {
		t.Fatalf("before the catalogue: %+v", p)
	}
}

// FuzzCheckBulk: CheckBulk never panics; what it accepts re-encodes to
// JSON that it accepts again as the same bulk, and what it refuses is a
// Problem of the one shape.
func FuzzCheckBulk(f *testing.F) {
	for _, b := range []string{
		"[" + limit() + "]",
		"[" + limit() + "," + market("quote_amount", `"4.99"`) + "," + limit("identifier", `"a-1"`) + "]",
		`[1,2,"3"]`, `[]`, `[[]]`, `[{}]`, `[1,{}]`, `[{"a":1},2]`, `["1\u0032"]`, ` [ 1 ] `, `[1]x`, `{"a":[1]}`,
	} {
		f.Add([]byte(b))
	}
	v := newValidator(f, func(c *config.Validation) { c.Bulk.MaxOrders = 5 })
	f.Fuzz(func(t *testing.T, body []byte) {
		b, p := v.CheckBulk(jsonCT, body)
		if p != nil {
			if p.Status < 400 || p.Code == "" || p.Detail == "" {
				t.Fatalf("problem %+v", p)
			}
			if p.Code == CodeInvalidOrder && len(p.Fields) == 0 {
				t.Fatalf("invalid_order without fields: %+v", p)
			}
			return
		}
		if b.Len() == 0 || b.Len() > 5 {
			t.Fatalf("accepted %d elements", b.Len())
		}
		enc := b.AppendCanonical(nil)
		b2, p2 := v.CheckBulk(jsonCT, enc)
		if p2 != nil {
			t.Fatalf("canonical %s refused: %s", enc, p2.Detail)
		}
		if enc2 := b2.AppendCanonical(nil); string(enc2) != string(enc) {
			t.Fatalf("canonical form not stable: %s then %s", enc, enc2)
		}
	})
}
