package validate

import (
	"encoding/json"
	"strings"
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

// BenchmarkAppendCanonical measures the re-encoding of a validated order
// into what the backend receives (budget: 1 µs, at most 1 allocation;
// with a reused buffer it allocates nothing).
func BenchmarkAppendCanonical(b *testing.B) {
	v := newValidator(b, nil)
	o, p := v.Check(jsonCT, []byte(typicalLimitOrder))
	if p != nil {
		b.Fatal(p)
	}
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		buf = o.AppendCanonical(buf[:0])
	}
	b.SetBytes(int64(len(buf)))
}

// BenchmarkValidateAndCanonical is the whole per-order cost on the proxy:
// Check, then AppendCanonical into a reused buffer.
func BenchmarkValidateAndCanonical(b *testing.B) {
	v := newValidator(b, nil)
	body := []byte(typicalLimitOrder)
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		o, p := v.Check(jsonCT, body)
		if p != nil {
			b.Fatal(p)
		}
		buf = o.AppendCanonical(buf[:0])
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

// BenchmarkValidateBulk measures a bulk placement of ten typical orders:
// checked, and re-encoded for the backend.
func BenchmarkValidateBulk(b *testing.B) {
	v := newValidator(b, nil)
	var parts []string
	for range 10 {
		parts = append(parts, `{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"65000.00","base_amount":"0.0015","quote_amount":"97.50"}`)
	}
	body := []byte("[" + strings.Join(parts, ",") + "]")
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		bulk, p := v.CheckBulk(jsonCT, body)
		if p != nil {
			b.Fatal(p)
		}
		buf = bulk.AppendCanonical(buf[:0])
	}
}
