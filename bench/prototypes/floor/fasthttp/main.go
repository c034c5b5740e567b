// Command fasthttp is the floor of a proxy without net/http: fasthttp's
// server and HostClient forwarding every request to one backend, setting
// X-Forwarded-For and a fixed X-Request-Id. Measured next to exgate and
// NGINX in docs/performance-history.md ("The floor of net/http"). It is its own
// module so that exgate does not depend on fasthttp:
//
//	cd bench/prototypes/floor/fasthttp && go build -o /tmp/floor-fasthttp .
//	/tmp/floor-fasthttp 127.0.0.1:39998 BACKEND_HOST:PORT
package main

import (
	"os"

	"github.com/valyala/fasthttp"
)

func main() {
	c := &fasthttp.HostClient{Addr: os.Args[2], MaxConns: 512}
	h := func(ctx *fasthttp.RequestCtx) {
		req := &ctx.Request
		req.Header.Set("X-Forwarded-For", ctx.RemoteIP().String())
		req.Header.Set("X-Request-Id", "0123456789abcdef-1")
		if err := c.Do(req, &ctx.Response); err != nil {
			ctx.SetStatusCode(fasthttp.StatusBadGateway)
		}
	}
	s := &fasthttp.Server{Handler: h}
	panic(s.ListenAndServe(os.Args[1]))
}
