package sim

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"testing"
	"time"

	"github.com/exgate/exgate/internal/fakeclock"
)

var (
	createdAtRE = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}[+-]\d\d:\d\d$`)
	matchIDRE   = regexp.MustCompile(`^\d+_\d+$`)
	decimalRE   = regexp.MustCompile(`^\d+(\.\d+)?$`)
)

// newClock returns a time source for Options.Now that a test moves by
// hand.
func newClock() *fakeclock.Clock {
	return fakeclock.New(time.Date(2026, 11, 22, 10, 4, 5, 123456789, time.UTC))
}

// harness is a Server behind a real HTTP listener, with a fake clock and
// an access token for the account "dev".
type harness struct {
	sim    *Server
	url    string
	clock  *fakeclock.Clock
	access string
}

// newHarness starts a server. Unless opts sets them, the clock is fake and
// the books start empty; set seed to keep the seeded books.
func newHarness(t *testing.T, opts Options, seed bool) *harness {
	t.Helper()
	c := newClock()
	if opts.Now == nil {
		opts.Now = c.Now
	}
	opts.NoSeedBook = !seed
	s := New(opts)
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	h := &harness{sim: s, url: ts.URL, clock: c}
	if _, ok := s.users["dev"]; ok {
		access, _, err := s.IssueToken("dev")
		if err != nil {
			t.Fatal(err)
		}
		h.access = access
	}
	return h
}

// response is a decoded HTTP answer.
type response struct {
	status int
	header http.Header
	body   any // decoded JSON, numbers as json.Number
	raw    []byte
}

// do sends a request. body is sent as is when it is a string or []byte,
// else marshalled to JSON; a nil body sends none. A non-empty token is sent
// as a bearer token.
func (h *harness) do(t *testing.T, method, path, token string, body any) response {
	t.Helper()
	hdr := http.Header{}
	if token != "" {
		hdr.Set("Authorization", "Bearer "+token)
	}
	return h.request(t, method, path, hdr, body)
}

// request is do with explicit request headers; Content-Type defaults to
// application/json when there is a body.
func (h *harness) request(t *testing.T, method, path string, hdr http.Header, body any) response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		enc, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(enc)
	}
	req, err := http.NewRequest(method, h.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := response{status: res.StatusCode, header: res.Header, raw: raw}
	if len(raw) > 0 {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&r.body); err != nil {
			t.Fatalf("%s %s: body %q is not JSON: %v", method, path, raw, err)
		}
		if ct := res.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s %s: Content-Type %q, want application/json", method, path, ct)
		}
	}
	return r
}

// place posts an order with the harness's token and requires 201.
func (h *harness) place(t *testing.T, body map[string]any) map[string]any {
	t.Helper()
	r := h.do(t, http.MethodPost, "/api/v1/odr/orders/", h.access, body)
	if r.status != http.StatusCreated {
		t.Fatalf("place %v: status %d, body %s", body, r.status, r.raw)
	}
	return r.object(t)
}

func (r response) object(t *testing.T) map[string]any {
	t.Helper()
	m, ok := r.body.(map[string]any)
	if !ok {
		t.Fatalf("body %s is not a JSON object", r.raw)
	}
	return m
}

func (r response) array(t *testing.T) []map[string]any {
	t.Helper()
	a, ok := r.body.([]any)
	if !ok {
		t.Fatalf("body %s is not a JSON array", r.raw)
	}
	out := make([]map[string]any, len(a))
	for i, v := range a {
		if out[i], ok = v.(map[string]any); !ok {
			t.Fatalf("element %d of %s is not an object", i, r.raw)
		}
	}
	return out
}

// kind names the JSON type of a decoded value.
func kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "bool"
	case string:
		return "string"
	case json.Number:
		return "number"
	case []any:
		return "array"
	default:
		return "object"
	}
}

// checkFields requires obj to have exactly the given fields with the given
// JSON kinds.
func checkFields(t *testing.T, obj map[string]any, want map[string]string) {
	t.Helper()
	for k, v := range obj {
		w, ok := want[k]
		if !ok {
			t.Errorf("unexpected field %q = %v", k, v)
			continue
		}
		if got := kind(v); got != w {
			t.Errorf("field %q = %v is %s, want %s", k, v, got, w)
		}
	}
	for k := range want {
		if _, ok := obj[k]; !ok {
			t.Errorf("missing field %q", k)
		}
	}
}

// wantDetail requires a {"detail", "code"} error answer.
func wantDetail(t *testing.T, r response, status int, code string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.raw)
	}
	obj := r.object(t)
	if d, _ := obj["detail"].(string); d == "" {
		t.Errorf("no detail in %s", r.raw)
	}
	if got, _ := obj["code"].(string); got != code {
		t.Errorf("code %q, want %q; body %s", got, code, r.raw)
	}
}

// wantFieldErrors requires a 400 answer whose body is exactly the given
// field errors.
func wantFieldErrors(t *testing.T, r response, want map[string][]string) {
	t.Helper()
	if r.status != http.StatusBadRequest {
		t.Fatalf("status %d, want 400; body %s", r.status, r.raw)
	}
	got := make(map[string][]string)
	for k, v := range r.object(t) {
		list, ok := v.([]any)
		if !ok {
			t.Fatalf("field %q: %v is not a list; body %s", k, v, r.raw)
		}
		for _, m := range list {
			s, ok := m.(string)
			if !ok {
				t.Fatalf("field %q: message %v is not a string", k, m)
			}
			got[k] = append(got[k], s)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("field errors\n got %v\nwant %v", got, want)
	}
}
