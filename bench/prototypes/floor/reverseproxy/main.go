//go:build ignore

// Command reverseproxy is the floor of a proxy built on
// httputil.ReverseProxy, as exgate is: net/http's server, a ReverseProxy
// whose Rewrite only sets the backend's URL, net/http's Transport tuned as
// exgate tunes it (upstream.NewTransport) and a pool of copy buffers — no
// routing, limits, metrics, request ids, timeouts or error shape. Beside
// the net/http floor (../nethttp) it shows what ReverseProxy itself costs;
// beside exgate with limits off, what exgate's own request path costs.
//
//	go build -o /tmp/floor-rp bench/prototypes/floor/reverseproxy/main.go
//	GOGC=400 /tmp/floor-rp 127.0.0.1:39998 http://BACKEND
package main

import (
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"sync"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/upstream"
)

// buffers is the ReverseProxy's pool of 32 KiB copy buffers (without one
// it allocates a buffer per response).
type buffers struct{ p sync.Pool }

func (b *buffers) Get() []byte {
	if buf, ok := b.p.Get().(*[]byte); ok {
		return *buf
	}
	return make([]byte, 32<<10)
}

func (b *buffers) Put(buf []byte) { b.p.Put(&buf) }

func main() {
	be, err := url.Parse(os.Args[2])
	if err != nil {
		panic(err)
	}
	rp := &httputil.ReverseProxy{
		Rewrite:    func(pr *httputil.ProxyRequest) { pr.SetURL(be); pr.Out.Host = "" },
		Transport:  upstream.NewTransport(config.Default().Upstream),
		BufferPool: &buffers{},
	}
	panic(http.ListenAndServe(os.Args[1], rp))
}
