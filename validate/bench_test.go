package validate

import (
	"encoding/json"
	"testing"
)

// typicalLimitOrder is what a trading client sends most often.
const typicalLimitOrder = `{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"65000.00","base_amount":"0.0015","quote_amount":"97.50","identifier":"ord-2024-000123"}`

func BenchmarkValidateLimitOrder(b *testing.B) {
	v := newValidator(b, nil)
	body := []byte(typicalLimitOrder)
	if _, p := v.Check(jsonCT, body); p != nil {
		b.Fatalf("typical order refused: %+v", p)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, p := v.Check(jsonCT, body); p != nil {
			b.Fatal(p)
		}
	}
}

// BenchmarkEncodingJSONBaseline is the yardstick the budget was set
// against: decoding the same order into a map with encoding/json.
func BenchmarkEncodingJSONBaseline(b *testing.B) {
	body := []byte(typicalLimitOrder)
	b.ReportAllocs()
	for b.Loop() {
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkValidateRejectedOrder measures a refusal with three field
// problems (the report allocates).
func BenchmarkValidateRejectedOrder(b *testing.B) {
	v := newValidator(b, nil)
	body := []byte(`{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"65000.001","base_amount":"0","quote_amount":"1"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, p := v.Check(jsonCT, body); p == nil {
			b.Fatal("accepted")
		}
	}
}
