package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/exgate/exgate/idempotency"
	"github.com/exgate/exgate/validate"
)

// bulkRead is one bulk request or status read the DRF views accepted, as
// they read it.
type bulkRead struct {
	Kind      string               `json:"kind"` // place, cancel, status, cancel_path (DELETE of ids in the path), or a write no route checks (drf_writes_test.go)
	Method    string               `json:"method"`
	Query     string               `json:"query"` // the query string the view could read
	RequestID string               `json:"request_id"`
	Body      string               `json:"body"`
	IDs       []string             `json:"ids"`
	Orders    []map[string]*string `json:"orders"`
}

func (b *drfBackend) bulkReads(t *testing.T) map[string]bulkRead {
	t.Helper()
	var rs []bulkRead
	b.read(t, "/test/bulk/", &rs)
	out := map[string]bulkRead{}
	for _, r := range rs {
		id := clientRequestID(r.RequestID)
		if _, dup := out[id]; dup {
			t.Errorf("request %s reached DRF twice", id)
		}
		out[id] = r
	}
	return out
}

// checkDRFReadsDirect checks that DRF itself, sent to directly, reads
// bodies and lists otherwise than their text says (else the test proves
// nothing).
func checkDRFReadsDirect(t *testing.T, drf *drfBackend) {
	t.Helper()
	bearer := []string{"Authorization", "Bearer " + drf.tokens[0], "Content-Type", "application/json"}
	for i, c := range []struct{ method, path, body, read string }{
		{"POST", "/api/v1/odr/orders/bulk/", `{"ids": [1], "ids": [2]}`, `["2"]`},
		{"DELETE", "/api/v1/odr/orders/bulk/", `[7.0]`, `["7"]`},
		{"GET", "/api/v1/odr/orders/03/", "", `["3"]`},
	} {
		id := fmt.Sprintf("direct-%d", i)
		if code, _, b := call(t, c.method, drf.url+c.path, c.body, append(bearer, "X-Request-Id", id)...); code >= 300 {
			t.Fatalf("DRF itself refuses %s %s %s: %d %s", c.method, c.path, c.body, code, b)
		}
		if got, _ := json.Marshal(drf.bulkReads(t)[id].IDs); string(got) != c.read {
			t.Fatalf("DRF itself read %s %s %s as %s, want %s", c.method, c.path, c.body, got, c.read)
		}
	}
	if code, _, _ := call(t, "GET", drf.url+"/api/v1/odr/orders/3,,2/", "", bearer...); code != 500 {
		t.Fatalf("DRF itself answers 3,,2 with %d, want 500", code)
	}
}

// drfBulkSent is a bulk request TestDRFBulkShapes sent through exgate.
type drfBulkSent struct {
	method, body string
	want         *validate.Bulk // what exgate's Validator accepts, or nil
	status       int
	answer       []byte
}

// checkDRFBulkReads checks what DRF read of the bulk requests byID and the
// status lists (request id → the ids exgate accepts) sent through exgate:
// exactly what exgate's Validator accepted, in its canonical form, and
// nothing it refused. direct is how many requests DRF read before, sent to
// it directly.
func checkDRFBulkReads(t *testing.T, drf *drfBackend, byID map[string]*drfBulkSent, lists map[string][]string, direct int) {
	t.Helper()
	reads := drf.bulkReads(t)
	accepted := 0
	for id, s := range byID {
		r, arrived := reads[id]
		name := s.method + " " + s.body
		switch {
		case s.want == nil && arrived:
			t.Errorf("%s: exgate's Validator refuses it, yet DRF read %+v", name, r)
		case s.want == nil:
			if s.status < 400 || s.status >= 500 {
				t.Errorf("%s: refused with %d %s", name, s.status, s.answer)
			}
		case !arrived:
			t.Errorf("%s: exgate's Validator accepts it, yet it never reached DRF: %d %s", name, s.status, s.answer)
		default:
			accepted++
			if canon := string(s.want.AppendCanonical(nil)); r.Body != canon || r.Method != s.method {
				t.Errorf("%s: DRF received %s %q, want %s of the canonical %q", name, r.Method, r.Body, s.method, canon)
			}
			if s.want.Cancel() != (r.Kind == "cancel") || !slices.Equal(r.IDs, s.want.IDs) {
				t.Errorf("%s: DRF read %s of %q, exgate checked ids %q", name, r.Kind, r.IDs, s.want.IDs)
			}
			for i := range r.Orders {
				sameOrder(t, name, string(s.want.Orders[i].AppendCanonical(nil)), r.Orders[i])
			}
		}
	}
	for id, want := range lists {
		if r, ok := reads[id]; !ok || !slices.Equal(r.IDs, want) {
			t.Errorf("status of %q: DRF read %q", want, r.IDs)
		}
	}
	for id, r := range reads {
		if strings.HasPrefix(id, "direct-") {
			continue
		}
		if _, ok := byID[id]; !ok && r.Kind != "status" {
			t.Errorf("DRF read a request the test did not send: %+v", r)
		}
		if _, ok := lists[id]; !ok && r.Kind == "status" {
			t.Errorf("DRF read the status of %q, a list exgate refuses", r.IDs)
		}
	}
	if len(reads) != direct+accepted+len(lists) {
		t.Errorf("DRF read %d requests through exgate, want %d", len(reads)-direct, accepted+len(lists))
	}
	t.Logf("%d bulk requests, %d read by DRF", len(byID), accepted)
	if accepted < 15 {
		t.Errorf("only %d bulk requests reached DRF: the corpus did not run", accepted)
	}
}

// TestDRFBulkShapes puts exgate in front of a Django REST framework bulk
// view (an OrderSerializer(many=True) placement; ids read by a
// ListField(child=IntegerField()), as an array or {"ids": [...]}, POSTed
// or DELETEd) and a status view that reads ids joined by commas with
// int(), and sends bodies and lists that such parsers read differently
// from a strict one: big ids, ids as numbers and strings, exponents and
// fractions, escaped, repeated and unknown keys, empty elements, leading
// zeros. Every request DRF served must carry exactly the ids (or orders)
// exgate's own Validator accepted, in their canonical form; every request
// exgate refused must never arrive; and a bulk placement's answer,
// {"orders": [...]}, is replayed byte for byte for the same bulk.
func TestDRFBulkShapes(t *testing.T) {
	drf := startDRF(t)
	checkDRFReadsDirect(t, drf)
	direct := len(drf.bulkReads(t))
	gw, cfg := drfGateway(t, drf, nil)
	ref := drfReference(t, cfg)
	order := func(i int, extra string) string {
		return fmt.Sprintf(`{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"%d.5","base_amount":1e-3%s}`, 60000+i, extra)
	}
	bodies := []string{
		`[1, 2]`, `["3", 4]`, `{"ids": ["5"]}`, `{"\u0069ds": [6]}`, ` { "ids" : [ 7 ] } `,
		`{"ids": [9223372036854775807]}`, `["9007199254740993"]`, `[9007199254740993]`,
		`[1e2]`, `[7.0]`, `["7.0"]`, `["07"]`, `[-1]`, `[0]`, `["1 "]`, `["\u0031"]`, `[true]`, `[null]`,
		`["9223372036854775808"]`, `[1, 1]`, `[1, "1"]`, `{"ids": [1], "ids": [2]}`, `{"IDS": [3]}`, `{"Ids": [3]}`,
		`{"ids": [8], "identifiers": ["a"]}`, `{"ids": "1,2"}`, `{"ids": []}`, `[]`, `{}`, `{"ids": [[1]]}`,
		"[" + order(0, "") + "," + order(1, "") + "]",
		"[" + order(2, `,"identifier":"drf-bulk-1"`) + "]",
		"[" + order(3, `,"price":"1"`) + "]",
		"[" + order(4, "") + ", 5]",
	}
	byID := map[string]*drfBulkSent{}
	n := 0
	send := func(method, path, body string) (int, http.Header, []byte, string) {
		n++
		id := fmt.Sprintf("drf-bulk-%d", n)
		req, err := http.NewRequest(method, gw+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header["Content-Type"] = []string{"application/json"}
		req.Header["X-Request-Id"] = []string{id}
		req.Header["Authorization"] = []string{"Bearer " + drf.tokens[0]}
		res, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatalf("%s %s %s: %v", method, path, body, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header, b, id
	}
	for _, method := range []string{"POST", "DELETE"} {
		for _, body := range bodies {
			s := &drfBulkSent{method: method, body: body}
			check := ref.CheckBulk
			if method == "DELETE" {
				check = ref.CheckBulkCancel
			}
			if b, p := check([]string{"application/json"}, []byte(body)); p == nil {
				s.want = &b
			}
			var id string
			s.status, _, s.answer, id = send(method, "/api/v1/odr/orders/bulk/", body)
			byID[id] = s
		}
	}
	lists := map[string][]string{} // request id → the ids exgate accepts, or nil
	for _, list := range []string{"3", "3,2", "9223372036854775807,1", "03", "3,,2", "3,", "3,3", "+3", "3.0,2", "1,2,3,4,5,6,7,8,9,10,11"} {
		code, _, b, id := send("GET", "/api/v1/odr/orders/"+list+"/", "")
		if _, p := validate.CheckIDList(list, cfg.Validation.Bulk.MaxOrders); p == nil {
			lists[id] = strings.Split(list, ",")
			if code != 200 {
				t.Errorf("status of %s: %d %s", list, code, b)
			}
		} else if code != 400 {
			t.Errorf("status of %s, which exgate refuses: %d %s", list, code, b)
		}
	}

	checkDRFBulkReads(t, drf, byID, lists, direct)
	// A placement's answer is recorded as DRF wrote it and replayed.
	placement := "[" + order(5, `,"identifier":"drf-replay"`) + "]"
	code, _, first, _ := send("POST", "/api/v1/odr/orders/bulk/", placement)
	before := len(drf.bulkReads(t))
	code2, hdr, again, _ := send("POST", "/api/v1/odr/orders/bulk/", placement)
	if code != 201 || code2 != 201 || string(again) != string(first) || !strings.HasPrefix(string(first), `{"orders":[`) ||
		hdr.Get(idempotency.ReplayedHeader) != "true" {
		t.Fatalf("placement %d %s, again %d (replayed %q) %s", code, first, code2, hdr.Get(idempotency.ReplayedHeader), again)
	}
	if after := len(drf.bulkReads(t)); after != before {
		t.Fatalf("the same bulk reached DRF again (%d reads, then %d)", before, after)
	}
}
