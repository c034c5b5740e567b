package proxy

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// TestOrderRedirectOutcomeUnknown: a backend that answers an order with a
// redirect may have placed it — 303 See Other is how HTTP answers a POST
// that created something found elsewhere (RFC 9110 §15.4.4), and what a
// Post/Redirect/Get backend sends — so a 3xx, like a 5xx, leaves the
// order's outcome unknown: a retry with its identifier is answered 409
// outcome_unknown and never reaches the backend. Only a 4xx, a refusal,
// frees the identifier; a 2xx is replayed.
func TestOrderRedirectOutcomeUnknown(t *testing.T) {
	e := startOrders(t, func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(r.Header.Get("X-Answer"))
		w.Header().Set("Content-Type", "application/json")
		if code/100 == 3 {
			w.Header().Set("Location", "/api/v1/odr/orders/1/")
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, `{"id":1}`)
	})
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	t.Cleanup(noRedirect.CloseIdleConnections)
	send := func(t *testing.T, path, body string, code int) *http.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, e.url+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer tok")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Answer", strconv.Itoa(code))
		res, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for _, tc := range []struct {
		name      string
		bulk      bool
		code      int
		wantRetry string // the retry's answer: "unknown", "replayed" or "forwarded"
	}{
		{name: "303 See Other", code: http.StatusSeeOther, wantRetry: "unknown"},
		{name: "302 Found", code: http.StatusFound, wantRetry: "unknown"},
		{name: "301 Moved Permanently", code: http.StatusMovedPermanently, wantRetry: "unknown"},
		{name: "307 Temporary Redirect", code: http.StatusTemporaryRedirect, wantRetry: "unknown"},
		{name: "308 Permanent Redirect", code: http.StatusPermanentRedirect, wantRetry: "unknown"},
		{name: "bulk, 303 See Other", bulk: true, code: http.StatusSeeOther, wantRetry: "unknown"},
		{name: "201 Created", code: http.StatusCreated, wantRetry: "replayed"},
		{name: "400 Bad Request", code: http.StatusBadRequest, wantRetry: "forwarded"},
		{name: "bulk, 400 Bad Request", bulk: true, code: http.StatusBadRequest, wantRetry: "forwarded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "redir-" + strconv.Itoa(tc.code)
			path, body := "/api/v1/odr/orders/", bulkOrder(0, id)
			if tc.bulk {
				path, body = "/api/v1/odr/orders/bulk/", bulkOf(2, id+"-bulk")
			}
			res := send(t, path, body, tc.code)
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != tc.code {
				t.Fatalf("first: %d, want the backend's %d", res.StatusCode, tc.code)
			}
			before := e.backend.count()
			res = send(t, path, body, tc.code)
			got, _ := io.ReadAll(res.Body)
			res.Body.Close()
			forwarded := e.backend.count() - before
			switch tc.wantRetry {
			case "unknown":
				if res.StatusCode != http.StatusConflict || !strings.Contains(string(got), `"code":"outcome_unknown"`) || forwarded != 0 {
					t.Errorf("retry after a %d: %d %s, sent to the backend %d times; want 409 outcome_unknown, not sent",
						tc.code, res.StatusCode, got, forwarded)
				}
			case "replayed":
				if res.StatusCode != tc.code || res.Header.Get("Idempotent-Replayed") != "true" || forwarded != 0 {
					t.Errorf("retry after a %d: %d %s (replayed %q), sent %d times; want the answer replayed",
						tc.code, res.StatusCode, got, res.Header.Get("Idempotent-Replayed"), forwarded)
				}
			case "forwarded":
				if res.StatusCode != tc.code || forwarded != 1 {
					t.Errorf("retry after a %d: %d %s, sent %d times; want it sent again", tc.code, res.StatusCode, got, forwarded)
				}
			}
		})
	}
}
