package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestBodyDescribingHeadersPerRequest: whether an order's head has a
// header describing the client's bytes is each request's own (3ebb53c's
// head scan): on one kept-alive connection, orders with one such header
// in any letter case, sent between orders with none, each reach the
// backend with none of them.
func TestBodyDescribingHeadersPerRequest(t *testing.T) {
	e := startOrders(t, placed)
	conn, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(conn)
	body := `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.5"}`
	send := func(extra string) {
		t.Helper()
		fmt.Fprintf(conn, "POST /api/v1/odr/orders/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n%s",
			extra, len(body), body)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusCreated {
			t.Fatalf("order with %q: %d", extra, res.StatusCode)
		}
	}
	for _, k := range bodyDescribing {
		for _, spelled := range []string{k, strings.ToLower(k), strings.ToUpper(k)} {
			send("")
			send(spelled + ": identity\r\n")
			got := e.backend.last(t)
			for _, d := range bodyDescribing {
				if v := got.Header[d]; v != nil {
					t.Errorf("order sent with %s reached the backend with %s %q", spelled, d, v)
				}
			}
		}
	}
}
