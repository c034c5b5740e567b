package proxy

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/exgate/exgate/idempotency"
)

// gzipBackend answers an order 201 with placedAnswer, gzipped as Django's
// GZipMiddleware or an NGINX with gzip on would: when the request
// accepts gzip, or always when always is set.
func gzipBackend(always bool, answer string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if !always && !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, answer)
			return
		}
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		_, _ = io.WriteString(zw, answer)
		_ = zw.Close()
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Vary", "Accept-Encoding")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(b.Bytes())
	}
}

// readDecoded reads res's body as its Content-Encoding says (the client
// set Accept-Encoding itself, so net/http decodes nothing).
func readDecoded(t *testing.T, res *http.Response) string {
	t.Helper()
	defer res.Body.Close()
	var r io.Reader = res.Body
	if res.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(res.Body)
		if err != nil {
			return "not gzip: " + err.Error()
		}
		r = zr
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return "unreadable: " + err.Error()
	}
	return string(b)
}

// TestReplayedOrderAnswerIsReadable: the answer recorded for an order's
// identifier is replayed as a body its client can read, whatever the
// encodings the order and its retry accept. The Accept-Encoding of an
// order with an identifier does not reach the backend: a backend that
// compresses by it would have its gzipped body recorded and replayed
// without its Content-Encoding (a Record keeps the status, the
// Content-Type and the body), to a retry that may not even accept gzip.
// A backend that compresses whatever the request accepts leaves the
// order's outcome unknown (409 outcome_unknown to a retry), never a
// replay its client cannot read.
func TestReplayedOrderAnswerIsReadable(t *testing.T) {
	const answer = `{"id":7,"state":"active"}`
	cases := []struct {
		name          string
		always        bool   // the backend compresses whatever the request accepts
		first, retry  string // the Accept-Encoding of the order and of its retry
		bulk          bool
		wantReplay    bool
		wantRetryCode string
	}{
		{name: "gzip, retried with gzip", first: "gzip", retry: "gzip", wantReplay: true},
		{name: "gzip, retried without", first: "gzip, deflate, br", retry: "", wantReplay: true},
		{name: "net/http's own gzip, retried with gzip", first: "", retry: "gzip", wantReplay: true},
		{name: "bulk, gzip, retried without", first: "gzip", retry: "identity", bulk: true, wantReplay: true},
		{name: "backend always compresses", always: true, first: "", retry: "", wantRetryCode: "outcome_unknown"},
		{name: "bulk, backend always compresses", always: true, first: "gzip", retry: "gzip", bulk: true, wantRetryCode: "outcome_unknown"},
	}
	for _, m := range claimModes(t) {
		for i, tc := range cases {
			t.Run(m.name+"/"+tc.name, func(t *testing.T) {
				var placements atomic.Int64
				be := gzipBackend(tc.always, answer)
				e := startOrdersWith(t, func(w http.ResponseWriter, r *http.Request) {
					placements.Add(1)
					be(w, r)
				}, nil, m.lim, nil, m.idem)
				id := m.name + strconv.Itoa(i) // one Redis serves every case
				send := func(enc string) *http.Response {
					h := []string{"Accept-Encoding", enc}
					if enc == "" { // net/http's client asks for gzip itself, and decodes it
						h = nil
					}
					if tc.bulk {
						return postBulk(t, e, "["+bulkOrder(0, id)+"]", h...)
					}
					return postOrder(t, e, bulkOrder(0, id), h...)
				}
				res := send(tc.first)
				if got := readDecoded(t, res); res.StatusCode != http.StatusCreated || got != answer {
					t.Fatalf("order: %d %q, want 201 %s", res.StatusCode, got, answer)
				}
				res = send(tc.retry)
				replayed := res.Header.Get(idempotency.ReplayedHeader) == "true"
				got := readDecoded(t, res)
				switch {
				case tc.wantReplay && (res.StatusCode != http.StatusCreated || !replayed || got != answer):
					t.Errorf("retry: %d replayed %v, Content-Encoding %q, body %q; want the recorded 201 %s",
						res.StatusCode, replayed, res.Header.Get("Content-Encoding"), got, answer)
				case !tc.wantReplay && (res.StatusCode != http.StatusConflict || !strings.Contains(got, `"code":"`+tc.wantRetryCode+`"`)):
					t.Errorf("retry: %d %q, want 409 %s", res.StatusCode, got, tc.wantRetryCode)
				}
				if n := placements.Load(); n != 1 {
					t.Errorf("backend placed %d orders, want 1", n)
				}
			})
		}
	}
}
