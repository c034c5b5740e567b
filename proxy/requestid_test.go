package proxy

import (
	"strconv"
	"strings"
	"testing"
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
			if back := e.backend.last(t).Header.Get("X-Request-Id"); back != id {
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
