package proxy

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/exgate/exgate/config"
)

func TestRequestID(t *testing.T) {
	e := startEnv(t, nil)
	tests := []struct {
		name, sent string
		kept       bool
	}{
		{"absent", "", false},
		{"valid", "abc-123_x.y:z", true},
		{"too long", strings.Repeat("a", 129), false},
		{"bad chars", "abc def", false},
		{"log injection", "a\"}{\"x", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h []string
			if tt.sent != "" {
				h = []string{"X-Request-Id", tt.sent}
			}
			res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil, h...)
			res.Body.Close()
			id := res.Header.Get("X-Request-Id")
			back := e.backend.last(t).Header.Get("X-Request-Id")
			if tt.kept {
				// The backend sees the client's id made unique (upstreamValue).
				if fresh, ok := strings.CutPrefix(back, id+"."); !ok || fresh == "" || strings.Contains(fresh, ".") {
					t.Fatalf("backend saw %q for the client's %q", back, id)
				}
			} else if back != id {
				t.Fatalf("backend saw %q, client %q", back, id)
			}
			if tt.kept != (id == tt.sent) || !validRequestID(id) {
				t.Fatalf("id = %q (sent %q)", id, tt.sent)
			}
		})
	}
}

// TestRequestIDsUnguessable: an id exgate made says nothing of the next
// one. With a counter alone, a client reading its own id in an answer
// could name the next requests' ids, put one in a request smuggled to a
// backend out of step with its connections, and have that request's
// answer pass checkResponseID as someone else's.
func TestRequestIDsUnguessable(t *testing.T) {
	g := newRequestIDs()
	seen := map[string]bool{}
	prev := g.next()
	for range 10000 {
		id := g.next()
		if seen[id] || !validRequestID(id) {
			t.Fatalf("id %q repeated or not valid", id)
		}
		seen[id] = true
		// prev with its counter (after the per-process prefix) plus one:
		// the id a client reading prev would name next.
		pfx, rest, _ := strings.Cut(prev, "-")
		counter, random, _ := strings.Cut(rest, "-")
		n, err := strconv.ParseUint(counter, 36, 64)
		if err != nil {
			t.Fatalf("id %q: %v", prev, err)
		}
		guess := pfx + "-" + strconv.FormatUint(n+1, 36)
		if random != "" {
			guess += "-" + random
		}
		if id == guess {
			t.Fatalf("id %q follows from %q", id, prev)
		}
		prev = id
	}
}

// BenchmarkRequestIDs measures making one id.
func BenchmarkRequestIDs(b *testing.B) {
	g := newRequestIDs()
	b.ReportAllocs()
	for b.Loop() {
		if g.next() == "" {
			b.Fatal("empty id")
		}
	}
}

// TestClientsSharingAnIDGetTheirOwnAnswers: two clients that send the
// same X-Request-ID at once (clients choose their ids; two counting from
// 1 meet at once) are told apart at the backend, so a backend out of step
// with its connections cannot hand one the other's answer: here a backend
// that answers each of two requests with the other's id and body. Each
// client gets a 502, never the other's answer; an in-step backend's
// answer carries the client's own id.
func TestClientsSharingAnIDGetTheirOwnAnswers(t *testing.T) {
	e := startEnv(t, nil)
	var mu sync.Mutex
	arrived := make(chan string, 2)
	ids := map[string]string{}
	both := make(chan struct{})
	e.backend.handler = func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		mu.Lock()
		ids[r.URL.Query().Get("who")] = id
		if len(ids) == 2 {
			close(both)
		}
		mu.Unlock()
		arrived <- id
		<-both
		mu.Lock()
		var other, otherWho string
		for who, v := range ids {
			if v != id {
				other, otherWho = v, who
			}
		}
		mu.Unlock()
		if other == "" { // the two ids were equal: answer with "the other's" anyway
			other, otherWho = id, "other"
		}
		w.Header().Set("X-Request-Id", other)
		_, _ = io.WriteString(w, `{"for":"`+otherWho+`"}`)
	}
	var wg sync.WaitGroup
	for _, who := range []string{"alice", "bob"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := do(t, "GET", e.url+"/api/v1/mkt/markets/?who="+who, nil, "X-Request-Id", "1")
			assertError(t, res, http.StatusBadGateway, "bad_gateway")
			if got := res.Header.Get("X-Request-Id"); got != "1" {
				t.Errorf("%s's refusal carries X-Request-Id %q, want its own 1", who, got)
			}
		}()
	}
	wg.Wait()
	if a, b := <-arrived, <-arrived; a == b {
		t.Fatalf("two requests with the client id 1 reached the backend with one id %q", a)
	}

	e.backend.handler = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", r.Header.Get("X-Request-Id")) // an echoing backend
		_, _ = io.WriteString(w, `{}`)
	}
	res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil, "X-Request-Id", "1")
	res.Body.Close()
	if res.StatusCode != http.StatusOK || res.Header.Get("X-Request-Id") != "1" {
		t.Fatalf("echoed answer: %d with X-Request-Id %q, want 200 with the client's 1", res.StatusCode, res.Header.Get("X-Request-Id"))
	}
}

// TestAnswerWithoutIDGetsTheRequests: a backend's answer without an
// X-Request-ID reaches the client with exactly one, the request's: the id
// exgate made, or the client's own (not the one made unique for the
// backend); so does one with an empty X-Request-ID while backend answers
// are not checked by id (checked, it names no request of exgate's: 502).
func TestAnswerWithoutIDGetsTheRequests(t *testing.T) {
	for _, check := range []bool{true, false} {
		e := startEnv(t, func(c *config.Config) { c.Upstream.CheckResponseID = check })
		for _, tc := range []struct {
			name    string
			backend []string // the backend's X-Request-Id values
			client  string   // the client's X-Request-Id, or ""
		}{
			{"none", nil, ""},
			{"empty", []string{""}, ""},
			{"empty then another", []string{"", "other"}, ""},
			{"none, the client's id", nil, "client-7"},
			{"empty, the client's id", []string{""}, "client-7"},
		} {
			t.Run(fmt.Sprintf("%s/checked=%v", tc.name, check), func(t *testing.T) {
				e.backend.handler = func(w http.ResponseWriter, r *http.Request) {
					if tc.backend != nil {
						w.Header()["X-Request-Id"] = tc.backend
					}
					_, _ = io.WriteString(w, `{}`)
				}
				var h []string
				if tc.client != "" {
					h = []string{"X-Request-Id", tc.client}
				}
				res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil, h...)
				res.Body.Close()
				got := res.Header.Values("X-Request-Id")
				want := e.backend.last(t).Header.Get("X-Request-Id")
				if tc.client != "" {
					want = tc.client
				}
				status := http.StatusOK
				if check && tc.backend != nil {
					status = http.StatusBadGateway
				}
				if res.StatusCode != status || len(got) != 1 || got[0] != want {
					t.Fatalf("answer %d with X-Request-Id %q, want %d with [%q]", res.StatusCode, got, status, want)
				}
			})
		}
	}
}

// TestAppendBase36: ids' numbers are written as strconv writes them in
// base 36, at the edges (0, 35, 36, each power of 36, the largest uint64)
// and at random.
func TestAppendBase36(t *testing.T) {
	us := []uint64{0, 1, 35, 36, 37, 1295, 1296, math.MaxUint64, math.MaxUint64 - 1}
	for p := uint64(36); p < math.MaxUint64/36; p *= 36 {
		us = append(us, p-1, p, p+1)
	}
	for range 10000 {
		us = append(us, rand.Uint64(), rand.Uint64N(1<<20))
	}
	for _, u := range us {
		if got, want := string(appendBase36([]byte("x-"), u)), "x-"+strconv.FormatUint(u, 36); got != want {
			t.Fatalf("appendBase36(%d) = %q, want %q", u, got, want)
		}
	}
}
