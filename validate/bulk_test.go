package validate

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/exgate/exgate/config"
)

// bulkCase is one bulk body and what CheckBulk answers it.
type bulkCase struct {
	name      string
	body      string
	status    int
	code      string
	fields    []string // sorted keys of fields, for invalid_order
	orders    int      // accepted placement size
	ids       []string // accepted cancel ids
	canonical string   // accepted: the canonical encoding, when checked
}

// bulkCases is TestCheckBulk's table, for a route that takes at most three
// orders.
func bulkCases() []bulkCase {
	good := limit()
	withID := func(id string) string { return limit("identifier", `"`+id+`"`) }
	return []bulkCase{
		{"one order", "[" + good + "]", 200, "", nil, 1, nil, ""},
		{"three orders with white space", " [\n" + good + " , " + market() + ",\t" + withID("a") + " ]\n", 200, "", nil, 3, nil, ""},
		{"canonical placement", `[{"side":"buy","symbol":"BTC_USDT","type":"limit","price":65000.00,"base_amount":"1.5e-3"}]`, 200, "", nil, 1, nil,
			`[{"symbol":"BTC_USDT","type":"limit","side":"buy","base_amount":"0.0015","price":"65000"}]`},
		{"cancel ids as numbers and strings", `[17, "18", 9223372036854775807]`, 200, "", nil, 0, []string{"17", "18", "9223372036854775807"}, `["17","18","9223372036854775807"]`},
		{"cancel as {ids}", ` { "ids" : [ "2", 3 ] } `, 200, "", nil, 0, []string{"2", "3"}, `{"ids":["2","3"]}`},
		{"cancel as {ids}, key escaped", `{"\u0069ds":[5]}`, 200, "", nil, 0, []string{"5"}, `{"ids":["5"]}`},
		{"{ids} with a bad id", `{"ids":["2","x",2]}`, 400, "invalid_order", []string{"ids[1]", "ids[2]"}, 0, nil, ""},
		{"{ids} with an order", `{"ids":[` + good + `]}`, 400, "invalid_order", []string{"ids[0]"}, 0, nil, ""},
		{"{ids} empty", `{"ids":[]}`, 400, "invalid_order", []string{"non_field_errors"}, 0, nil, ""},
		{"{ids} too many", `{"ids":[1,2,3,4]}`, 400, "invalid_order", []string{"non_field_errors"}, 0, nil, ""},
		{"{ids} not an array", `{"ids":"2,3"}`, 400, "invalid_order", []string{"ids"}, 0, nil, ""},
		{"{ids} null", `{"ids":null}`, 400, "invalid_order", []string{"ids"}, 0, nil, ""},
		{"{ids} repeated", `{"ids":[1],"ids":[2]}`, 400, "invalid_order", []string{"ids"}, 0, nil, ""},
		{"{ids} repeated, escaped", `{"ids":[1],"\u0069ds":[2]}`, 400, "invalid_order", []string{"ids"}, 0, nil, ""},
		{"{ids} beside another member", `{"ids":[1],"identifiers":["a"]}`, 400, "invalid_order", []string{"identifiers"}, 0, nil, ""},
		{"{ids} beside an unshown member", `{"ids":[1],"a b":2}`, 400, "invalid_order", []string{"non_field_errors"}, 0, nil, ""},
		{"object without ids", `{"identifiers":["a"]}`, 400, "invalid_order", []string{"non_field_errors"}, 0, nil, ""},
		{"{ids} trailing data", `{"ids":[1]} x`, 400, "parse_error", nil, 0, nil, ""},
		{"{ids} unterminated", `{"ids":[1]`, 400, "parse_error", nil, 0, nil, ""},
		{"a string", `"1,2"`, 400, "invalid_order", []string{"non_field_errors"}, 0, nil, ""},
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
}

func TestCheckBulk(t *testing.T) {
	v := newValidator(t, func(c *config.Validation) { c.Bulk.MaxOrders = 3 })
	for _, tt := range bulkCases() {
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

// TestCheckBulkCancel: a route that only cancels takes both shapes of
// ids and refuses an array of orders whole, before checking its orders.
func TestCheckBulkCancel(t *testing.T) {
	v := newValidator(t, nil)
	for _, body := range []string{`[1,"2"]`, `{"ids":["1",2]}`} {
		if b, p := v.CheckBulkCancel(jsonCT, []byte(body)); p != nil || b.Len() != 2 {
			t.Fatalf("%s: %+v %+v", body, b, p)
		}
	}
	_, p := v.CheckBulkCancel(jsonCT, []byte("["+limit("price", `"1.001"`)+"]"))
	if p == nil || p.Code != CodeInvalidOrder || len(p.Fields) != 1 || p.Fields[NonFieldErrors][0] != errCancelOnly {
		t.Fatalf("orders on a cancel route: %+v", p)
	}
	if _, p := v.CheckBulkCancel(jsonCT, []byte(`[1,"x"]`)); p == nil || p.Fields["ids[1]"] == nil {
		t.Fatalf("a bad id: %+v", p)
	}
}

// TestCancelAnswersAlike: a problem of a bulk cancel's ids is answered
// alike whether the ids came as an array or as {"ids": [...]}, and as a
// path's id list answers it (but for the detail's lead).
func TestCancelAnswersAlike(t *testing.T) {
	v := newValidator(t, func(c *config.Validation) { c.Bulk.MaxOrders = 3 })
	for _, tt := range []struct{ ids, path string }{
		{`1,"07"`, "1,07"},
		{`1,1`, "1,1"},
		{`1,2,3,4`, "1,2,3,4"},
		{`"9223372036854775808"`, "9223372036854775808"},
	} {
		_, arr := v.CheckBulk(jsonCT, []byte("["+tt.ids+"]"))
		_, obj := v.CheckBulk(jsonCT, []byte(`{"ids":[`+tt.ids+"]}"))
		_, list := CheckIDList(tt.path, 3)
		if arr == nil || obj == nil || list == nil {
			t.Fatalf("%s accepted: %v %v %v", tt.ids, arr, obj, list)
		}
		if arr.Detail != obj.Detail || !reflect.DeepEqual(arr.Fields, obj.Fields) {
			t.Errorf("%s: array %q %v, object %q %v", tt.ids, arr.Detail, arr.Fields, obj.Detail, obj.Fields)
		}
		if strings.TrimPrefix(arr.Detail, bulkLead) != strings.TrimPrefix(list.Detail, idListLead) && !strings.Contains(arr.Detail, "carries") {
			t.Errorf("%s: bulk %q, path list %q", tt.ids, arr.Detail, list.Detail)
		}
		if arr.Status != list.Status || arr.Code != list.Code || len(arr.Fields) != len(list.Fields) {
			t.Errorf("%s: bulk %+v, path list %+v", tt.ids, arr, list)
		}
	}
}

func TestCheckIDList(t *testing.T) {
	tests := []struct {
		list   string
		n      int
		fields []string // of a refusal, sorted
	}{
		{"3", 1, nil},
		{"3,2", 2, nil},
		{"9223372036854775807,1,2,3,4,5,6,7,8,9", 10, nil},
		{"", 0, []string{"ids[0]"}},
		{",", 0, []string{"ids[0]", "ids[1]"}},
		{"3,,2", 0, []string{"ids[1]"}},
		{"3,", 0, []string{"ids[1]"}},
		{"03", 0, []string{"ids[0]"}},
		{"0", 0, []string{"ids[0]"}},
		{"-3", 0, []string{"ids[0]"}},
		{"+3", 0, []string{"ids[0]"}},
		{"3.0", 0, []string{"ids[0]"}},
		{"bulk", 0, []string{"ids[0]"}},
		{"{3,2}", 0, []string{"ids[0]", "ids[1]"}},
		{"9223372036854775808", 0, []string{"ids[0]"}},
		{"99999999999999999999", 0, []string{"ids[0]"}},
		{"3,2,3", 0, []string{"ids[2]"}},
		{"1,2,3,4,5,6,7,8,9,10,11", 0, []string{"non_field_errors"}},
	}
	for _, tt := range tests {
		t.Run(tt.list, func(t *testing.T) {
			n, p := CheckIDList(tt.list, 10)
			if tt.fields == nil {
				if p != nil || n != tt.n {
					t.Fatalf("= %d, %+v; want %d", n, p, tt.n)
				}
				if a := testing.AllocsPerRun(100, func() { _, _ = CheckIDList(tt.list, 10) }); a != 0 {
					t.Errorf("%v allocations", a)
				}
				return
			}
			if p == nil || p.Status != 400 || p.Code != CodeInvalidOrder || !strings.HasPrefix(p.Detail, idListLead+": ") {
				t.Fatalf("= %d, %+v", n, p)
			}
			var names []string
			for f := range p.Fields {
				names = append(names, f)
			}
			slices.Sort(names)
			if !slices.Equal(names, tt.fields) {
				t.Errorf("fields %v, want %v", p.Fields, tt.fields)
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
		`{"ids":[1,"2"]}`, `{"ids":[]}`, `{"ids":[1],"ids":[2]}`, `{"\u0069ds":["3"]}`, `{"ids":[{}]}`, `{"ids":1}`, `{}`, `"1"`,
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
		if b.Cancel() {
			if got := idsAsRead(t, body); !slices.Equal(got, b.IDs) {
				t.Fatalf("encoding/json reads the ids of %s as %q, exgate as %q", body, got, b.IDs)
			}
			if got := idsAsRead(t, enc); !slices.Equal(got, b.IDs) {
				t.Fatalf("encoding/json reads the ids of the canonical %s as %q, exgate as %q", enc, got, b.IDs)
			}
		}
	})
}

// idsAsRead decodes an accepted bulk cancel with encoding/json, as a
// backend would, and returns the text of its ids.
func idsAsRead(t *testing.T, body []byte) []string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("encoding/json refuses %s: %v", body, err)
	}
	if obj, ok := v.(map[string]any); ok {
		v = obj["ids"]
	}
	var ids []string
	for _, e := range v.([]any) {
		ids = append(ids, fmt.Sprint(e))
	}
	return ids
}

// FuzzCheckIDList: CheckIDList never panics, and what it accepts is a
// comma-joined list of distinct ids that strconv reads back as the same
// digits.
func FuzzCheckIDList(f *testing.F) {
	for _, s := range []string{"3", "3,2", "", ",", "3,,2", "03", "{3,2}", "9223372036854775808", "1,2,1", "bulk"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, list string) {
		n, p := CheckIDList(list, 5)
		if p != nil {
			if p.Status != 400 || p.Code != CodeInvalidOrder || len(p.Fields) == 0 || p.Detail == "" {
				t.Fatalf("problem %+v", p)
			}
			return
		}
		parts := strings.Split(list, ",")
		if n != len(parts) || n < 1 || n > 5 {
			t.Fatalf("%q: n = %d", list, n)
		}
		seen := map[int64]bool{}
		for _, s := range parts {
			id, err := strconv.ParseInt(s, 10, 64)
			if err != nil || id <= 0 || strconv.FormatInt(id, 10) != s || seen[id] {
				t.Fatalf("%q accepted: element %q", list, s)
			}
			seen[id] = true
		}
	})
}

// TestCheckBulkAllocations gates the allocations of a bulk's check: its
// elements' spans are on the stack up to 32 elements, and a placement
// without identifiers makes no set of them; what is left is the bulk's
// orders, or its ids (their slice, each id's string, the set of them).
func TestCheckBulkAllocations(t *testing.T) {
	v := newValidator(t, nil)
	order := `{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"65000.00","base_amount":"0.0015"}`
	orders := "[" + strings.TrimSuffix(strings.Repeat(order+",", 10), ",") + "]"
	for _, tt := range []struct {
		name, body string
		max        float64
	}{
		{"ten orders", orders, 1},
		{"ten ids", `[1,2,3,4,5,6,7,8,9,10]`, 15},
	} {
		body := []byte(tt.body)
		if _, p := v.CheckBulk(jsonCT, body); p != nil {
			t.Fatalf("%s: %v", tt.name, p.Fields)
		}
		if n := testing.AllocsPerRun(100, func() { _, _ = v.CheckBulk(jsonCT, body) }); n > tt.max {
			t.Errorf("%s: %v allocations per CheckBulk, want at most %v", tt.name, n, tt.max)
		}
	}
}
