package validate

import "testing"

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
