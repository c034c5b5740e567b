package validate

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestAppendCanonical(t *testing.T) {
	v := newValidator(t, nil)
	const head = `{"symbol":"BTC_USDT","type":"limit","side":"buy",`
	tests := []struct {
		name, body, want string
	}{
		{"typical", typicalLimitOrder,
			head + `"base_amount":"0.0015","quote_amount":"97.5","price":"65000","identifier":"ord-2024-000123"}`},
		{"numbers become strings", limit("price", `65000`, "base_amount", `0.0015`),
			head + `"base_amount":"0.0015","price":"65000"}`},
		{"exponents written out", limit("price", `6.5E+4`, "base_amount", `"1.5e-3"`),
			head + `"base_amount":"0.0015","price":"65000"}`},
		{"trailing zeros dropped", limit("base_amount", `"0.00150000000"`, "price", `"65000.000000"`),
			head + `"base_amount":"0.0015","price":"65000"}`},
		{"40-digit one", limit("base_amount", `"1.000000000000000000000000000000000000000"`, "price", `"65000.00"`),
			`{"symbol":"BTC_USDT","type":"limit","side":"buy","base_amount":"1","price":"65000"}`},
		{"20-digit amount (the big path)",
			edit(limitBase, "symbol", `"USDT_IRT"`, "price", `"1"`, "base_amount", `99999999999999999999`),
			`{"symbol":"USDT_IRT","type":"limit","side":"buy","base_amount":"99999999999999999999","price":"1"}`},
		{"escaped keys and values decoded", limit("price", "-", `pr\u0069ce`, `"65000.00"`, "symbol", `"BTC\u005fUSDT"`, "identifier", `"\u0061b-1"`),
			head + `"base_amount":"0.0015","price":"65000","identifier":"ab-1"}`},
		{"nulls left out", market("price", `null`, "stop_price", `null`, "oco_target_price", `null`, "identifier", `null`),
			`{"symbol":"BTC_USDT","type":"market","side":"sell","base_amount":"0.5"}`},
		{"oco in fixed order", edit(ocoBase),
			`{"symbol":"BTC_USDT","type":"oco","side":"sell","base_amount":"0.01","price":"66000","stop_price":"64000","oco_target_price":"63900"}`},
		{"small amounts", edit(limitBase, "symbol", `"BTC_IRT"`, "price", `6e9`, "base_amount", `1e-7`),
			`{"symbol":"BTC_IRT","type":"limit","side":"buy","base_amount":"0.0000001","price":"6000000000"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, p := v.Check(jsonCT, []byte(tt.body))
			if p != nil {
				t.Fatalf("refused: %v", p.Fields)
			}
			if got := string(o.AppendCanonical([]byte("prefix"))); got != "prefix"+tt.want {
				t.Errorf("AppendCanonical =\n%s\nwant\n%s", strings.TrimPrefix(got, "prefix"), tt.want)
			}
		})
	}
}

// TestCanonicalOfEveryAcceptedCase: for every accepted body of the edge
// case table, the canonical encoding reads (to encoding/json and to the
// validator) as the same order, and encodes to itself.
func TestCanonicalOfEveryAcceptedCase(t *testing.T) {
	v := newValidator(t, nil)
	n := 0
	for _, c := range fixCases(edgeCases()) {
		if c.status != ok200 {
			continue
		}
		n++
		t.Run(c.name, func(t *testing.T) {
			o, p := v.Check(jsonCT, []byte(c.body))
			if p != nil {
				t.Fatalf("refused: %v", p.Fields)
			}
			checkCanonical(t, v, []byte(c.body), &o)
		})
	}
	if n < 20 {
		t.Fatalf("only %d accepted cases", n)
	}
}

// checkCanonical asserts that o's canonical encoding is one JSON object
// holding the known fields of body with the same values (decimals equal
// as exact decimals, absent and null alike), that the validator accepts
// it, and that re-encoding it changes nothing.
func checkCanonical(t *testing.T, v *Validator, body []byte, o *Order) {
	t.Helper()
	canon := o.AppendCanonical(nil)
	var got map[string]string
	d := json.NewDecoder(bytes.NewReader(canon))
	if err := d.Decode(&got); err != nil {
		t.Fatalf("canonical %s is not an object of strings: %v", canon, err)
	}
	var sent map[string]any
	d = json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	if err := d.Decode(&sent); err != nil {
		t.Fatalf("body: %v", err)
	}
	for _, k := range []string{"symbol", "type", "side", "identifier", "base_amount", "quote_amount", "price", "stop_price", "oco_target_price"} {
		want, ok := sent[k]
		g, has := got[k]
		if !ok || want == nil {
			if has {
				t.Errorf("canonical %s has %s, which the body does not carry", canon, k)
			}
			continue
		}
		if !has {
			t.Errorf("canonical %s lacks %s (body %q)", canon, k, body)
			continue
		}
		switch w := want.(type) {
		case string:
			if strings.Contains(k, "amount") || strings.Contains(k, "price") {
				wd, _ := refDecimal(w)
				gd, ok := refDecimal(g)
				if !ok || !gd.Equal(wd) {
					t.Errorf("%s: canonical %q, body %q", k, g, w)
				}
			} else if g != w {
				t.Errorf("%s: canonical %q, body %q", k, g, w)
			}
		case json.Number:
			wd, _ := refDecimal(string(w))
			gd, ok := refDecimal(g)
			if !ok || !gd.Equal(wd) {
				t.Errorf("%s: canonical %q, body %s", k, g, w)
			}
		default:
			t.Errorf("%s: accepted a %T", k, w)
		}
	}
	for k := range got {
		if fieldID([]byte(k)) < 0 {
			t.Errorf("canonical %s carries unknown field %s", canon, k)
		}
	}
	o2, p := v.Check(jsonCT, canon)
	if p != nil {
		t.Fatalf("canonical %s refused: %v", canon, p.Fields)
	}
	if again := o2.AppendCanonical(nil); !bytes.Equal(again, canon) {
		t.Errorf("re-encoding changed %s into %s", canon, again)
	}
}

var update = flag.Bool("update", false, "rewrite testdata/orders.jsonl from the edge-case table")

// corpusLine is one line of testdata/orders.jsonl: an order body of the
// edge-case table and the answer the default configuration gives it.
type corpusLine struct {
	Name   string `json:"name"`
	Body   string `json:"body"`
	Status int    `json:"status"`
	Code   string `json:"code,omitempty"`
}

// TestCorpusFile keeps testdata/orders.jsonl, the validation corpus that
// tests outside this package (the Django REST framework differential
// test) send, equal to the edge-case table. Run with -update to rewrite.
func TestCorpusFile(t *testing.T) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for _, c := range fixCases(edgeCases()) {
		if err := enc.Encode(corpusLine{Name: c.name, Body: c.body, Status: c.status, Code: c.code}); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join("testdata", "orders.jsonl")
	if *update {
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	have, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(have, buf.Bytes()) {
		t.Fatalf("%s is out of date with edgeCases (%v): go test ./validate -run TestCorpusFile -update", path, err)
	}
}

// appendJSONString appends s as a JSON string, as AppendCanonical writes
// each string field: appendEscaped between quotes.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	dst = appendEscaped(dst, s)
	return append(dst, '"')
}

// FuzzAppendJSONString checks that appendEscaped writes, between quotes,
// a JSON string that encoding/json reads back as the string given, with
// no byte below 0x20, nor 0x7f, left unescaped; its table gives the exact
// escapes.
func FuzzAppendJSONString(f *testing.F) {
	for _, tt := range []struct{ in, want string }{
		{"BTC_USDT", `"BTC_USDT"`},
		{"", `""`},
		{`a"b\c`, `"a\"b\\c"`},
		{"\x00tab\there\x1f\x7f", `"\u0000tab\u0009here\u001f\u007f"`},
		{"é", `"é"`},
		{`"`, `"\""`},
	} {
		if got := string(appendJSONString([]byte("x"), tt.in)); got != "x"+tt.want {
			f.Errorf("appendJSONString(%q) = %s, want %s", tt.in, got[1:], tt.want)
		}
		f.Add(tt.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := appendJSONString(nil, s)
		for _, c := range out {
			if c < 0x20 || c == 0x7f {
				t.Fatalf("appendJSONString(%q) = %q: byte %#x unescaped", s, out, c)
			}
		}
		if !utf8.ValidString(s) {
			return // encoding/json reads invalid UTF-8 as U+FFFD
		}
		var back string
		if err := json.Unmarshal(out, &back); err != nil || back != s {
			t.Fatalf("appendJSONString(%q) = %s, read back as %q (%v)", s, out, back, err)
		}
	})
}
