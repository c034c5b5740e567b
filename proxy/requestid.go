package proxy

import (
	"crypto/rand"
	"encoding/hex"
	randv2 "math/rand/v2"
	"net/http"
	"strconv"
	"sync/atomic"
)

// requestIDs makes request ids: a random per-process prefix, a counter
// and a random part, such as "9f2c1a7e3b4d5f60-1a-3kq0v8c2x1m9z". The
// prefix and counter make ids unique across replicas and restarts; the
// random part makes the next id unguessable from the last one. Backend
// answers are matched to their request by id (checkResponseID), and a
// client that could name the id of someone else's next request could put
// it in a request of its own smuggled to a backend that is out of step
// with its connections. The random part comes from math/rand/v2's
// runtime generator (ChaCha8, seeded by the operating system): a few
// nanoseconds, no system call per request.
type requestIDs struct {
	prefix string
	n      atomic.Uint64
}

func newRequestIDs() *requestIDs {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails on supported platforms
	return &requestIDs{prefix: hex.EncodeToString(b[:]) + "-"}
}

// next returns a new id.
func (g *requestIDs) next() string {
	var buf [17 + 13 + 1 + 13]byte
	b := append(buf[:0], g.prefix...)
	b = strconv.AppendUint(b, g.n.Add(1), 36)
	b = append(b, '-')
	b = strconv.AppendUint(b, randv2.Uint64(), 36)
	return string(b)
}

// maxRequestIDLen bounds an X-Request-ID accepted from a client.
const maxRequestIDLen = 128

// validRequestID reports whether a client-sent X-Request-ID is safe to
// reuse in logs and headers: 1 to 128 characters of letters, digits and
// "-", "_", ".", ":", "=", "+", "/".
func validRequestID(s string) bool {
	if s == "" || len(s) > maxRequestIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '-', c == '_', c == '.', c == ':', c == '=', c == '+', c == '/':
		default:
			return false
		}
	}
	return true
}

// upstreamID returns the X-Request-ID sent to the backend for a request
// whose client sent id: id, a dot and fresh, a new id of this gateway's.
// Backend answers are matched to their request by id (checkResponseID),
// which holds only while no two requests in flight share one; clients
// choose their ids (two that count from 1 meet at once), so the id a
// backend sees ends in a part no client chooses. Fresh ids have no dot, so
// two upstream ids are equal only when their fresh parts are. The client's
// id stays in front, for finding the backend's log lines of a request.
func upstreamID(id, fresh string) string { return id + "." + fresh }

// setIDHeader sets the X-Request-ID r carries to the backend to id, in
// st's own slice: the reverse proxy sends a copy of r's header, and the
// slice goes back to the pool with st, when nothing reads r any more.
func (st *requestState) setIDHeader(r *http.Request, id string) {
	st.idHeader[0] = id
	r.Header["X-Request-Id"] = st.idHeader[:]
}

// clientsID gives the answer back the client's own X-Request-ID where the
// backend echoed the one exgate sent (upstreamID): the client sees the id
// it sent.
func (st *requestState) clientsID() {
	if st.upID == "" {
		return
	}
	h := st.rw.ResponseWriter.Header()
	if v := h["X-Request-Id"]; len(v) == 1 && v[0] == st.upID {
		h["X-Request-Id"] = []string{st.id}
	}
}
