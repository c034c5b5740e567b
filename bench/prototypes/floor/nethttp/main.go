//go:build ignore

// Command nethttp is the floor of a proxy built on net/http's server: the
// least a handler can do to forward a request with net/http's Transport,
// tuned as exgate tunes it (upstream.NewTransport) — no routing, limits,
// metrics, request ids or error shape. Measured next to exgate and NGINX in
// docs/performance-history.md ("The floor of net/http").
//
//	go build -o /tmp/floor-nethttp bench/prototypes/floor/nethttp/main.go
//	GOGC=400 /tmp/floor-nethttp 127.0.0.1:39999 http://BACKEND
package main

import (
	"io"
	"net/http"
	"net/url"
	"os"
	"sync"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/upstream"
)

// writerOnly is an io.Writer and nothing more.
type writerOnly struct{ io.Writer }

func main() {
	be, err := url.Parse(os.Args[2])
	if err != nil {
		panic(err)
	}
	tr := upstream.NewTransport(config.Default().Upstream)
	bufs := sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out := r.Clone(r.Context())
		out.URL.Scheme, out.URL.Host, out.Host, out.RequestURI = "http", be.Host, "", ""
		res, err := tr.RoundTrip(out)
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		for k, v := range res.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(res.StatusCode)
		b := bufs.Get().(*[]byte)
		// writerOnly hides the ResponseWriter's ReadFrom: io.CopyBuffer
		// would call it, and http.response.ReadFrom sends the head in one
		// write and the body in another. Through Write, head and body
		// leave in one write, as exgate's (httputil.ReverseProxy's) do.
		_, _ = io.CopyBuffer(writerOnly{w}, res.Body, *b)
		bufs.Put(b)
		res.Body.Close()
	})
	panic(http.ListenAndServe(os.Args[1], h))
}
