package sim

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/shopspring/decimal"
)

// orderKinds are the JSON kinds of every Order field; "id" is absent from
// limit-order responses.
func orderKinds(withID bool, nulls ...string) map[string]string {
	k := map[string]string{
		"symbol": "string", "type": "string", "side": "string",
		"price": "string", "stop_price": "string", "oco_target_price": "string",
		"base_amount": "string", "quote_amount": "string", "identifier": "string",
		"state": "string", "created_at": "string", "closed_at": "string",
		"dealed_base_amount": "string", "dealed_quote_amount": "string",
		"req_to_cancel": "bool", "commission": "string",
	}
	if withID {
		k["id"] = "number"
	}
	for _, n := range nulls {
		k[n] = "null"
	}
	return k
}

// placeOrderCase is one order placed on an empty book and the response it
// gets: the kind of every field and the exact value of some.
type placeOrderCase struct {
	name  string
	body  string // JSON
	kinds map[string]string
	want  map[string]any // exact values of some fields
}

// placeOrderCases is TestPlaceOrderResponse's table.
var placeOrderCases = []placeOrderCase{
	{
		name:  "limit with string decimals",
		body:  `{"symbol":"BTC_USDT","type":"limit","side":"buy","base_amount":"0.001","price":"65000.5"}`,
		kinds: orderKinds(false, "stop_price", "oco_target_price", "identifier", "closed_at"),
		want: map[string]any{
			"symbol": "BTC_USDT", "type": "limit", "side": "buy", "price": "65000.50",
			"base_amount": "0.001000", "quote_amount": "65.0005", "state": "active",
			"dealed_base_amount": "0", "dealed_quote_amount": "0", "commission": "0",
			"req_to_cancel": false, "created_at": "2026-11-22T10:04:05.123456+00:00",
		},
	},
	{
		name:  "limit with number decimals and identifier",
		body:  `{"symbol":"ETH_BTC","type":"limit","side":"sell","base_amount":1.2345,"price":0.052345,"identifier":"abc-1","stop_price":null}`,
		kinds: orderKinds(false, "stop_price", "oco_target_price", "closed_at"),
		want: map[string]any{
			"price": "0.052345", "base_amount": "1.2345", "quote_amount": "0.0646199025",
			"identifier": "abc-1", "state": "active",
		},
	},
	{
		name:  "limit whose quote needs more than the quote precision",
		body:  `{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"1000.50","base_amount":0.002}`,
		kinds: orderKinds(false, "stop_price", "oco_target_price", "identifier", "closed_at"),
		want:  map[string]any{"price": "1000.50", "base_amount": "0.002000", "quote_amount": "2.001"},
	},
	{
		name:  "limit in a zero-decimal market",
		body:  `{"symbol":"BTC_IRT","type":"limit","side":"buy","base_amount":"0.00012345","price":"5000000000"}`,
		kinds: orderKinds(false, "stop_price", "oco_target_price", "identifier", "closed_at"),
		want:  map[string]any{"price": "5000000000", "base_amount": "0.00012345", "quote_amount": "617250"},
	},
	{
		name:  "market on empty book",
		body:  `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.5"}`,
		kinds: orderKinds(true, "price", "stop_price", "oco_target_price", "identifier"),
		want: map[string]any{
			"state": "canceled", "dealed_base_amount": "0", "dealed_quote_amount": "0",
			"quote_amount": "0", "commission": "0", "closed_at": "2026-11-22T10:04:05.123456+00:00",
		},
	},
	{
		name:  "market echoes a quote_amount sent",
		body:  `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.5","quote_amount":100,"price":"1"}`,
		kinds: orderKinds(true, "price", "stop_price", "oco_target_price", "identifier"),
		want:  map[string]any{"quote_amount": "100.00", "state": "canceled"},
	},
	{
		name:  "stop_limit rests untriggered",
		body:  `{"symbol":"ETH_USDT","type":"stop_limit","side":"sell","base_amount":"2","price":"3000","stop_price":"3010.5","quote_amount":"1"}`,
		kinds: orderKinds(true, "oco_target_price", "identifier", "closed_at"),
		want: map[string]any{
			"price": "3000.00", "stop_price": "3010.50", "base_amount": "2.0000",
			"quote_amount": "6000.00", "state": "active",
		},
	},
	{
		name:  "oco",
		body:  `{"symbol":"USDT_IRT","type":"oco","side":"buy","base_amount":"10.5","price":"90000","stop_price":"95000","oco_target_price":"89000"}`,
		kinds: orderKinds(true, "identifier", "closed_at"),
		want: map[string]any{
			"price": "90000", "stop_price": "95000", "oco_target_price": "89000",
			"quote_amount": "945000", "state": "active",
		},
	},
}

func TestPlaceOrderResponse(t *testing.T) {
	for _, tt := range placeOrderCases {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Options{}, false)
			r := h.do(t, http.MethodPost, "/api/v1/odr/orders/", h.access, tt.body)
			if r.status != http.StatusCreated {
				t.Fatalf("status %d: %s", r.status, r.raw)
			}
			obj := r.object(t)
			checkFields(t, obj, tt.kinds)
			for k, v := range tt.want {
				if obj[k] != v {
					t.Errorf("%s = %#v, want %#v", k, obj[k], v)
				}
			}
			if s, _ := obj["created_at"].(string); !createdAtRE.MatchString(s) {
				t.Errorf("created_at %q", s)
			}
			if s, ok := obj["closed_at"].(string); ok && !createdAtRE.MatchString(s) {
				t.Errorf("closed_at %q", s)
			}
			if p, ok := obj["price"].(string); ok {
				price, base := decimal.RequireFromString(p), decimal.RequireFromString(obj["base_amount"].(string))
				if quote := decimal.RequireFromString(obj["quote_amount"].(string)); !price.Mul(base).Equal(quote) {
					t.Errorf("quote_amount %s != price %s × base_amount %s", quote, price, base)
				}
			}
			if id, ok := obj["id"].(json.Number); ok && id != "1" {
				t.Errorf("id %s, want 1", id)
			}
		})
	}
}

func TestPlaceOrderIDsIncrease(t *testing.T) {
	h := newHarness(t, Options{}, true)
	for want := 1; want <= 3; want++ {
		o := h.place(t, map[string]any{"symbol": "BTC_USDT", "type": "market", "side": "sell", "base_amount": "0.001"})
		if got := o["id"]; got != json.Number(strconv.Itoa(want)) {
			t.Errorf("order %d: id %v", want, got)
		}
	}
}

func TestPlaceOrderFieldErrors(t *testing.T) {
	const (
		required = "This field is required."
		notNull  = "This field may not be null."
		number   = "A valid number is required."
		positive = "Ensure this value is greater than 0."
	)
	// limit returns a valid limit order body with the given changes; a
	// nil value deletes the field, a JSON-null value is written json.RawMessage("null").
	limit := func(changes map[string]any) map[string]any {
		b := map[string]any{"symbol": "BTC_USDT", "type": "limit", "side": "buy", "base_amount": "0.01", "price": "60000"}
		for k, v := range changes {
			if v == nil {
				delete(b, k)
			} else {
				b[k] = v
			}
		}
		return b
	}
	null := json.RawMessage("null")
	tests := []struct {
		name string
		body any
		want map[string][]string
	}{
		{"empty object", map[string]any{}, map[string][]string{
			"symbol": {required}, "type": {required}, "side": {required}, "base_amount": {required}}},
		{"empty body", nil, map[string][]string{
			"symbol": {required}, "type": {required}, "side": {required}, "base_amount": {required}}},
		{"not an object", `"limit"`, map[string][]string{"non_field_errors": {"Invalid data. Expected a dictionary, but got str."}}},
		{"limit without price", limit(map[string]any{"price": nil}), map[string][]string{"price": {required}}},
		{"limit with null price", limit(map[string]any{"price": null}), map[string][]string{"price": {notNull}}},
		{"wrong types", limit(map[string]any{"symbol": 5, "type": true, "side": []int{}, "identifier": 7}), map[string][]string{
			"symbol": {"Not a valid string."}, "type": {"Not a valid string."}, "side": {"Not a valid string."}, "identifier": {"Not a valid string."}}},
		{"decimal as bool", limit(map[string]any{"base_amount": true, "price": map[string]any{}}), map[string][]string{
			"base_amount": {number}, "price": {number}}},
		{"bad choices", limit(map[string]any{"type": "ioc", "side": "BUY"}), map[string][]string{
			"type": {`"ioc" is not a valid choice.`}, "side": {`"BUY" is not a valid choice.`}}},
		{"blank symbol", limit(map[string]any{"symbol": ""}), map[string][]string{"symbol": {"This field may not be blank."}}},
		{"abc", limit(map[string]any{"base_amount": "abc"}), map[string][]string{"base_amount": {number}}},
		{"negative", limit(map[string]any{"base_amount": "-1"}), map[string][]string{"base_amount": {positive}}},
		{"negative number", limit(map[string]any{"price": json.Number("-60000")}), map[string][]string{"price": {positive}}},
		{"zero", limit(map[string]any{"base_amount": "0"}), map[string][]string{"base_amount": {positive}}},
		{"zero number", limit(map[string]any{"base_amount": json.Number("0.0")}), map[string][]string{"base_amount": {positive}}},
		{"NaN", limit(map[string]any{"base_amount": "NaN"}), map[string][]string{"base_amount": {number}}},
		{"spaces", limit(map[string]any{"base_amount": " 1"}), map[string][]string{"base_amount": {number}}},
		{"huge", limit(map[string]any{"base_amount": "1e25"}), map[string][]string{"base_amount": {"Ensure that there are no more than 20 digits before the decimal point."}}},
		{"too many base decimals", limit(map[string]any{"base_amount": "0.0000001"}), map[string][]string{
			"base_amount": {"Ensure that there are no more than 6 decimal places."}}},
		{"too many base decimals as number", limit(map[string]any{"base_amount": json.Number("1e-7")}), map[string][]string{
			"base_amount": {"Ensure that there are no more than 6 decimal places."}}},
		{"too many quote decimals", limit(map[string]any{"quote_amount": "1.001"}), map[string][]string{
			"quote_amount": {"Ensure that there are no more than 2 decimal places."}}},
		{"price not a multiple of 0.01", limit(map[string]any{"price": "60000.005"}), map[string][]string{
			"price": {"Ensure this value is a multiple of 0.01."}}},
		{"price not a multiple of 1", limit(map[string]any{"symbol": "USDT_IRT", "price": "92000.5"}), map[string][]string{
			"price": {"Ensure this value is a multiple of 1."}}},
		{"unknown symbol", limit(map[string]any{"symbol": "DOGE_USDT"}), map[string][]string{"symbol": {`Market "DOGE_USDT" does not exist.`}}},
		{"non-tradable market", limit(map[string]any{"symbol": "LUNC_USDT", "price": "0.0001"}), map[string][]string{"symbol": {`Market "LUNC_USDT" is not tradable.`}}},
		{"stop_limit without stop_price", limit(map[string]any{"type": "stop_limit"}), map[string][]string{"stop_price": {required}}},
		{"stop_limit without prices", limit(map[string]any{"type": "stop_limit", "price": nil, "stop_price": null}), map[string][]string{
			"price": {required}, "stop_price": {notNull}}},
		{"oco missing prices", limit(map[string]any{"type": "oco", "price": nil}), map[string][]string{
			"price": {required}, "stop_price": {required}, "oco_target_price": {required}}},
		{"oco missing target", limit(map[string]any{"type": "oco", "stop_price": "61000", "oco_target_price": null}), map[string][]string{
			"oco_target_price": {notNull}}},
		{"oco target off increment", limit(map[string]any{"type": "oco", "stop_price": "61000", "oco_target_price": "59000.001"}), map[string][]string{
			"oco_target_price": {"Ensure this value is a multiple of 0.01."}}},
		{"market without base_amount", limit(map[string]any{"type": "market", "price": nil, "base_amount": nil, "quote_amount": "100"}), map[string][]string{
			"base_amount": {required}}},
	}
	h := newHarness(t, Options{}, false)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h.do(t, http.MethodPost, "/api/v1/odr/orders/", h.access, tt.body)
			wantFieldErrors(t, r, tt.want)
		})
	}

	t.Run("accepted variants", func(t *testing.T) {
		for _, body := range []map[string]any{
			limit(map[string]any{"base_amount": "0.010000000"}),       // trailing zeros beyond the precision
			limit(map[string]any{"base_amount": json.Number("1e-2")}), // exponent form
			limit(map[string]any{"type": "market", "price": null}),
			limit(map[string]any{"identifier": "dup"}),
			limit(map[string]any{"identifier": "dup"}), // duplicates are the gateway's business
			limit(map[string]any{"unknown_field": strings.Repeat("x", 10)}),
		} {
			h.place(t, body)
		}
	})
}
