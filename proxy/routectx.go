package proxy

import (
	"context"
	"io"
	"net/http"
	"time"
)

// routeContext is the context of a request forwarded through
// UpstreamTransport: its parent's values and cancellation (the client
// going away), and the route's deadline, which Deadline reports but which
// does not end the context: UpstreamTransport enforces it itself, as the
// deadline of the connection (dial, request, response and body) and of
// any wait for a connection. It spares each such request the timer, the
// cancel context and its registration in the parent that
// context.WithTimeout costs (about 1 µs and 5 allocations per request on
// the load harness). It lives in the pooled exchange and must not be used
// once the request has been answered.
type routeContext struct {
	context.Context
	deadline time.Time
}

// routeContextKey is the key under which a routeContext answers Value with
// itself, so that UpstreamTransport can tell it from a context that ends
// at its deadline.
type routeContextKey struct{}

// Deadline returns the route's deadline.
func (c *routeContext) Deadline() (time.Time, bool) { return c.deadline, true }

// Value returns c for routeContextKey and the parent's values otherwise.
func (c *routeContext) Value(key any) any {
	if key == (routeContextKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// String names the context, as the standard contexts do.
func (c *routeContext) String() string { return "proxy.routeContext" }

// roundTripFallback hands req to the fallback transport. A request under a
// routeContext (which does not end at its deadline) gets a context that
// does, cancelled when the response body is closed or the request fails.
func (t *UpstreamTransport) roundTripFallback(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	rc, ok := ctx.Value(routeContextKey{}).(*routeContext)
	if !ok {
		return t.fallback.RoundTrip(req)
	}
	ctx, cancel := context.WithDeadline(ctx, rc.deadline)
	res, err := t.fallback.RoundTrip(req.WithContext(ctx))
	if err != nil {
		cancel()
		if ctx.Err() == context.DeadlineExceeded {
			return nil, context.DeadlineExceeded
		}
		return nil, err
	}
	res.Body = &cancelBody{ReadCloser: res.Body, cancel: cancel}
	return res, nil
}

// cancelBody cancels its request's context when it is closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}
