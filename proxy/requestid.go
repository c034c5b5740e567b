package proxy

import (
	"crypto/rand"
	"encoding/hex"
	randv2 "math/rand/v2"
	"sync/atomic"
	"unsafe"
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

// genIDLen is the longest id requestIDs makes: the prefix with its dash,
// the counter, a dash and the random part, each number at most 13 digits
// in base 36.
const genIDLen = 17 + 13 + 1 + 13

// next returns a new id.
func (g *requestIDs) next() string {
	var buf [genIDLen]byte
	return string(g.appendNext(buf[:0]))
}

// appendNext appends a new id to b.
func (g *requestIDs) appendNext(b []byte) []byte {
	b = append(b, g.prefix...)
	b = appendBase36(b, g.n.Add(1))
	b = append(b, '-')
	return appendBase36(b, randv2.Uint64())
}

// appendBase36 appends u in base 36, as strconv.AppendUint(b, u, 36)
// does, dividing by the constant 36 (a multiplication) where strconv
// divides by its base argument: the random part of an id is 13 digits.
func appendBase36(b []byte, u uint64) []byte {
	const digits = "0123456789abcdefghijklmnopqrstuvwxyz"
	var buf [13]byte // 36^13 > 2^64
	i := len(buf)
	for u >= 36 {
		q := u / 36
		i--
		buf[i] = digits[u-q*36]
		u = q
	}
	i--
	buf[i] = digits[u]
	return append(b, buf[i:]...)
}

// idValue is an id exgate sends the backend in its X-Request-ID, made
// with the one-element header value that carries it in one allocation
// (headerValue). The value goes into the outbound request's header and,
// when the backend answers without an id, into the client's answer, so
// it is never pooled, and never modified once made. The same allocation
// holds the context the request is forwarded with (ctx, filled by
// forward), which is never pooled either: one allocation for the two.
type idValue struct {
	v   [1]string
	buf [genIDLen]byte
	ctx stateContext
}

// nextValue returns a new id as an X-Request-ID value (idValue), and the
// forwarded context made with it, zero until forward fills it.
func (g *requestIDs) nextValue() ([]string, *stateContext) {
	p := new(idValue)
	return headerValue(&p.v, g.appendNext(p.buf[:0])), &p.ctx
}

// upstreamIDValue is idValue for an id upstreamValue makes.
type upstreamIDValue struct {
	v   [1]string
	buf [maxRequestIDLen + 1 + genIDLen]byte
}

// headerValue makes v's one value the text of b, without copying it, and
// returns v as a header value: b's bytes are written once, before, and
// never again.
func headerValue(v *[1]string, b []byte) []string {
	v[0] = unsafe.String(unsafe.SliceData(b), len(b))
	return v[:]
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

// upstreamValue returns the X-Request-ID sent to the backend for a
// request whose client sent id, as a header value (idValue): id, a dot
// and a new id of this gateway's. Backend answers are matched to their
// request by id (checkResponseID), which holds only while no two requests
// in flight share one; clients choose their ids (two that count from 1
// meet at once), so the id a backend sees ends in a part no client
// chooses. New ids have no dot, so two upstream ids are equal only when
// their new parts are. The client's id stays in front, for finding the
// backend's log lines of a request.
func (g *requestIDs) upstreamValue(id string) []string {
	p := new(upstreamIDValue)
	b := append(append(p.buf[:0], id...), '.')
	return headerValue(&p.v, g.appendNext(b))
}

// clientsID gives the answer back the client's own X-Request-ID where the
// backend echoed the one exgate sent (upstreamValue): the client sees the id
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
