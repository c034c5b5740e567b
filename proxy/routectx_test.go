package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestRouteContextFallback: a request under a routeContext that
// UpstreamTransport hands to its fallback (here a POST) still ends at the
// route's deadline, and its context ends when the response body is closed.
func TestRouteContextFallback(t *testing.T) {
	release := make(chan struct{})
	ended := make(chan error, 1)
	bs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	defer bs.Close()
	defer close(release) // before Close, which waits for the handler
	tr, fb := newUpstream(t, nil)

	t.Run("deadline", func(t *testing.T) {
		ctx := &routeContext{Context: context.Background(), deadline: time.Now().Add(150 * time.Millisecond)}
		req, _ := http.NewRequestWithContext(ctx, "POST", bs.URL+"/slow", strings.NewReader("{}"))
		start := time.Now()
		_, err := tr.RoundTrip(req)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want context.DeadlineExceeded", err)
		}
		if d := time.Since(start); d < 150*time.Millisecond || d > 2*time.Second {
			t.Fatalf("failed after %v, want about 150ms", d)
		}
	})
	t.Run("body close ends the context", func(t *testing.T) {
		ctx := &routeContext{Context: context.Background(), deadline: time.Now().Add(time.Minute)}
		before := fb.n.Load()
		req, _ := http.NewRequestWithContext(ctx, "POST", bs.URL+"/fast", strings.NewReader("{}"))
		res, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		if fb.n.Load() != before+1 {
			t.Fatal("the POST did not go to the fallback")
		}
		body, _ := io.ReadAll(res.Body)
		if string(body) != "ok" {
			t.Fatalf("body %q", body)
		}
		fctx := fb.last.Load().(context.Context)
		if fctx.Err() != nil {
			t.Fatal("context ended before the body was closed")
		}
		res.Body.Close()
		go func() { <-fctx.Done(); ended <- fctx.Err() }()
		select {
		case err := <-ended:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("context ended with %v", err)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("closing the body did not end the fallback's context")
		}
	})
}
