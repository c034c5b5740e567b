package proxy

import "net/http"

// Request trailers. A chunked HTTP/1.1 body, or an HTTP/2 request, may end
// with trailer fields; net/http's server reads them into Request.Trailer,
// and its Transport sends whatever Request.Trailer of the outbound request
// holds after the body. exgate reads and checks headers, never trailers,
// and a backend or intermediate that merges trailers into the header
// block (as some servers do with the fields a Trailer header announces)
// would read an Authorization, X-Forwarded-For, X-Request-ID, Content-Type
// or Idempotency-Key exgate never saw. Trailers mean nothing in this API,
// so exgate reads them with the body and forwards none: neither their
// values nor the Trailer header announcing them, on every route and over
// HTTP/1.1 and HTTP/2 alike, as NGINX and Envoy do by default.

// dropRequestTrailers keeps the outbound request from carrying trailers.
// The Transport writes a "Trailer" header naming the keys of
// Request.Trailer and, after a chunked body, their values; with a nil map
// it writes neither.
func dropRequestTrailers(out *http.Request) {
	out.Trailer = nil
}
