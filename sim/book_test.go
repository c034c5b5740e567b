package sim

import (
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/shopspring/decimal"
)

// step is one order placed in a matching scenario and the fields its
// response must have.
type step struct {
	order map[string]any
	want  map[string]any
}

// lim and mkt build order bodies on BTC_USDT.
func lim(side, amount, price string) map[string]any {
	return map[string]any{"symbol": "BTC_USDT", "type": "limit", "side": side, "base_amount": amount, "price": price}
}

func mkt(side, amount string) map[string]any {
	return map[string]any{"symbol": "BTC_USDT", "type": "market", "side": side, "base_amount": amount}
}

// restingResponse is the response of an order that rested without filling.
var restingResponse = map[string]any{"state": "active", "dealed_base_amount": "0", "closed_at": nil}

// matchingCase is a sequence of orders placed on an empty BTC_USDT book, the
// trades they make and the book they leave.
type matchingCase struct {
	name    string
	steps   []step
	matches []match // newest first
	bids    []string
	asks    []string // remaining "amount@price", best first
}

// matchingCases is TestMatching's table.
var matchingCases = []matchingCase{
	{
		name: "crossing limit trades at the maker price",
		steps: []step{
			{lim("sell", "0.5", "65000"), restingResponse},
			{lim("buy", "0.2", "65100"), map[string]any{
				"state": "closed", "dealed_base_amount": "0.200000", "dealed_quote_amount": "13000.00",
				"commission": "13.00", "quote_amount": "13020.00", "price": "65100.00",
			}},
		},
		matches: []match{{"1_2", "65000.00", "0.200000", "13000.00", "buy"}},
		asks:    []string{"0.3@65000"},
	},
	{
		name: "partial fill rests the remainder",
		steps: []step{
			{lim("sell", "0.3", "65000"), restingResponse},
			{lim("buy", "0.8", "65100"), map[string]any{
				"state": "active", "closed_at": nil, "dealed_base_amount": "0.300000", "dealed_quote_amount": "19500.00",
			}},
			{mkt("sell", "0.5"), map[string]any{
				"state": "closed", "dealed_base_amount": "0.500000", "dealed_quote_amount": "32550.00",
			}},
		},
		matches: []match{{"2_3", "65100.00", "0.500000", "32550.00", "sell"}, {"1_2", "65000.00", "0.300000", "19500.00", "buy"}},
		asks:    nil,
		bids:    nil,
	},
	{
		name: "non-crossing limits rest",
		steps: []step{
			{lim("sell", "1", "65000"), restingResponse},
			{lim("buy", "1", "64999.99"), restingResponse},
		},
		bids: []string{"1@64999.99"},
		asks: []string{"1@65000"},
	},
	{
		name:  "market on empty book is cancelled",
		steps: []step{{mkt("buy", "1"), map[string]any{"state": "canceled", "dealed_base_amount": "0", "commission": "0"}}},
	},
	{
		name: "market larger than the book fills partly and cancels the rest",
		steps: []step{
			{lim("buy", "0.1", "64000"), restingResponse},
			{mkt("sell", "0.4"), map[string]any{"state": "canceled", "dealed_base_amount": "0.100000", "dealed_quote_amount": "6400.00", "commission": "6.40"}},
		},
		matches: []match{{"1_2", "64000.00", "0.100000", "6400.00", "sell"}},
	},
	{
		name: "asks: lowest price first, FIFO within a price",
		steps: []step{
			{lim("sell", "0.1", "65010"), restingResponse},
			{lim("sell", "0.1", "65000"), restingResponse},
			{lim("sell", "0.2", "65000"), restingResponse},
			{mkt("buy", "0.15"), map[string]any{"state": "closed", "dealed_quote_amount": "9750.00"}},
			{lim("buy", "0.2", "65020"), map[string]any{"state": "closed", "dealed_quote_amount": "13000.50"}},
		},
		matches: []match{
			{"4_5", "65010.00", "0.050000", "3250.50", "buy"},
			{"3_5", "65000.00", "0.150000", "9750.00", "buy"},
			{"2_4", "65000.00", "0.050000", "3250.00", "buy"},
			{"1_4", "65000.00", "0.100000", "6500.00", "buy"},
		},
		asks: []string{"0.05@65010"},
	},
	{
		name: "bids: highest price first, FIFO within a price",
		steps: []step{
			{lim("buy", "0.1", "63990"), restingResponse},
			{lim("buy", "0.1", "64000"), restingResponse},
			{lim("buy", "0.2", "64000"), restingResponse},
			{lim("sell", "0.35", "63990"), map[string]any{"state": "closed", "dealed_quote_amount": "22399.50"}},
		},
		matches: []match{
			{"3_4", "63990.00", "0.050000", "3199.50", "sell"},
			{"2_4", "64000.00", "0.200000", "12800.00", "sell"},
			{"1_4", "64000.00", "0.100000", "6400.00", "sell"},
		},
		bids: []string{"0.05@63990"},
	},
}

func TestMatching(t *testing.T) {
	for _, tt := range matchingCases {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Options{}, false)
			for i, s := range tt.steps {
				got := h.place(t, s.order)
				for k, v := range s.want {
					if got[k] != v {
						t.Errorf("step %d: %s = %#v, want %#v", i+1, k, got[k], v)
					}
				}
			}
			r := h.do(t, http.MethodGet, "/api/v1/mth/matches/BTC_USDT/", "", nil)
			var got []match
			for _, m := range r.array(t) {
				got = append(got, match{m["id"].(string), m["price"].(string), m["base_amount"].(string), m["quote_amount"].(string), m["side"].(string)})
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.matches) {
				t.Errorf("matches\n got %v\nwant %v", got, tt.matches)
			}
			b := h.sim.books["BTC_USDT"]
			if got := depth(b, b.bids); fmt.Sprint(got) != fmt.Sprint(tt.bids) {
				t.Errorf("bids %v, want %v", got, tt.bids)
			}
			if got := depth(b, b.asks); fmt.Sprint(got) != fmt.Sprint(tt.asks) {
				t.Errorf("asks %v, want %v", got, tt.asks)
			}
		})
	}
}

// depth lists the remaining amount and price of every resting order of one
// side, in priority order.
func depth(b *book, side []*level) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, l := range side {
		for _, o := range l.orders {
			out = append(out, o.remaining().String()+"@"+l.price.String())
		}
	}
	return out
}

func TestMatchesBounded(t *testing.T) {
	h := newHarness(t, Options{MaxMatches: 3}, false)
	h.place(t, lim("sell", "5", "65000"))
	for range 5 {
		h.place(t, mkt("buy", "0.1"))
	}
	r := h.do(t, http.MethodGet, "/api/v1/mth/matches/BTC_USDT/", "", nil)
	var ids []string
	for _, m := range r.array(t) {
		ids = append(ids, m["id"].(string))
	}
	if want := []string{"5_6", "4_5", "3_4"}; fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Errorf("ids %v, want %v", ids, want)
	}
}

func TestSeededBookDemo(t *testing.T) {
	h := newHarness(t, Options{}, true)
	tests := []struct {
		name  string
		order map[string]any
		price string
	}{
		{"market buy hits the best ask", mkt("buy", "0.001"), "65000.00"},
		{"market sell hits the best bid", mkt("sell", "0.001"), "64000.00"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := h.place(t, tt.order)
			if o["state"] != "closed" || o["dealed_base_amount"] != "0.001000" {
				t.Errorf("order %v", o)
			}
			r := h.do(t, http.MethodGet, "/api/v1/mth/matches/BTC_USDT/", "", nil)
			if m := r.array(t); len(m) == 0 || m[0]["price"] != tt.price {
				t.Errorf("matches %s", r.raw)
			}
		})
	}
	for _, m := range h.sim.Markets() {
		b := h.sim.books[m.Symbol]
		if n := len(depth(b, b.bids)) + len(depth(b, b.asks)); m.Tradable && n == 0 {
			t.Errorf("%s: seeded book is empty", m.Symbol)
		}
	}
}

func TestConcurrentMatching(t *testing.T) {
	const (
		workers   = 16 // half buy, half sell
		perWorker = 25
		amount    = "0.001"
	)
	h := newHarness(t, Options{MaxMatches: workers * perWorker * 2}, false)
	var (
		mu     sync.Mutex
		dealed = map[string]decimal.Decimal{} // taker-dealed base by side
		wg     sync.WaitGroup
	)
	for w := range workers {
		side := []string{"buy", "sell"}[w%2]
		wg.Go(func() {
			for i := range perWorker {
				body := lim(side, amount, "65000")
				if i%5 == 4 {
					body["price"] = map[string]string{"buy": "65100", "sell": "64900"}[side] // crosses more
				}
				r := h.do(t, http.MethodPost, "/api/v1/odr/orders/", h.access, body)
				if r.status != http.StatusCreated {
					t.Errorf("status %d: %s", r.status, r.raw)
					return
				}
				d := decimal.RequireFromString(r.object(t)["dealed_base_amount"].(string))
				mu.Lock()
				dealed[side] = dealed[side].Add(d)
				mu.Unlock()
				if i%10 == 0 {
					h.do(t, http.MethodGet, "/api/v1/mth/matches/BTC_USDT/", "", nil)
				}
			}
		})
	}
	wg.Wait()

	perSide := decimal.RequireFromString(amount).Mul(decimal.NewFromInt(workers / 2 * perWorker))
	matched := map[string]decimal.Decimal{}
	r := h.do(t, http.MethodGet, "/api/v1/mth/matches/BTC_USDT/", "", nil)
	for _, m := range r.array(t) {
		s := m["side"].(string)
		matched[s] = matched[s].Add(decimal.RequireFromString(m["base_amount"].(string)))
	}
	total := matched["buy"].Add(matched["sell"])
	if !total.Equal(perSide) {
		t.Errorf("matched %s in total, want %s (every order filled on both sides)", total, perSide)
	}
	for _, side := range []string{"buy", "sell"} {
		if !matched[side].Equal(dealed[side]) {
			t.Errorf("%s takers: matches sum to %s, responses dealed %s", side, matched[side], dealed[side])
		}
	}
	b := h.sim.books["BTC_USDT"]
	if bids, asks := depth(b, b.bids), depth(b, b.asks); len(bids)+len(asks) != 0 {
		t.Errorf("book not empty: bids %v asks %v", bids, asks)
	}
}
