package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestSurgeWaitsForTheBackendToDrain checks that the surge's peak is
// counted only once the capacity run's requests have left the backend:
// drained waits while the backend holds requests, and says so when they
// never leave.
func TestSurgeWaitsForTheBackendToDrain(t *testing.T) {
	for _, tc := range []struct {
		name     string
		held     []int64 // what the backend reports, in turn; the last repeats
		timeout  time.Duration
		wantErr  string
		minPolls int64
	}{
		// A drain is given a minute, which only a hang reaches, so that a
		// slow machine cannot fail it; the backend that never drains, a
		// short wait, polled at least once whatever the machine's speed.
		{"empty at once", []int64{0}, time.Minute, "", 1},
		{"drains", []int64{64, 30, 2, 0}, time.Minute, "", 4},
		{"never drains", []int64{5}, 200 * time.Millisecond, "still held 5 requests", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var polls atomic.Int64
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				n := polls.Add(1) - 1
				_ = json.NewEncoder(w).Encode(poolStats{InFlight: tc.held[min(n, int64(len(tc.held)-1))]})
			}))
			defer ts.Close()
			s := &surgeStack{backendURL: ts.URL}
			err := s.drained(context.Background(), tc.timeout)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("drained: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("drained: %v, want an error saying %q", err, tc.wantErr)
			}
			if polls.Load() < tc.minPolls {
				t.Errorf("%d polls, want at least %d", polls.Load(), tc.minPolls)
			}
		})
	}
}
