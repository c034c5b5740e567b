package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/exgate/exgate/config"
)

// Sizes and defaults of UpstreamTransport.
const (
	// upstreamBufferSize is the size of the pooled read and write buffers,
	// as NewTransport's ReadBufferSize and WriteBufferSize.
	upstreamBufferSize = 16 << 10
	// maxResponseHeaderBytes caps the status lines and headers of one
	// response, informational (1xx) responses included, as NewTransport's
	// MaxResponseHeaderBytes.
	maxResponseHeaderBytes = 1 << 20
	// defaultMaxIdleConns is the idle connections kept per host when
	// config.Upstream.MaxIdleConns is zero (config.Default's value).
	defaultMaxIdleConns = 512
	// defaultIdleConnTimeout is how long a connection may stay idle when
	// config.Upstream.IdleConnTimeout is zero (config.Default's value).
	defaultIdleConnTimeout = 90 * time.Second
)

// Errors of UpstreamTransport besides those of the network.
var (
	errUpstreamHeaderTooLarge = fmt.Errorf("exgate upstream: response headers over %d bytes", maxResponseHeaderBytes)
	errUpstreamSwitching      = errors.New("exgate upstream: 101 Switching Protocols to a request that asked for no upgrade")
	errUpstreamIdle408        = errors.New("exgate upstream: 408 Request Timeout on a reused connection (the backend gave up on it while idle)")
	errUpstreamBodyClosed     = errors.New("exgate upstream: read on closed response body")
)

// aLongTimeAgo is a deadline in the past: setting it makes every pending
// and future read and write on a connection fail at once.
var aLongTimeAgo = time.Unix(1, 0)

// Buffers are taken for one exchange only, so that idle connections hold
// none: the writer while the request is written, the reader until the
// response body ends.
var (
	upstreamReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, upstreamBufferSize) }}
	upstreamWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, upstreamBufferSize) }}
)

// UpstreamTransport is the http.RoundTripper exgate uses to reach the
// backend: an HTTP/1.1 client in which the goroutine serving a request
// writes it and reads the answer on a pooled keep-alive connection itself.
// http.Transport runs a read and a write goroutine per connection and
// passes every request and response between them and the caller over
// channels; this one starts no goroutine per connection or request and
// hands nothing over.
//
// It serves itself only the requests it may send twice and whose exchange
// is plain: scheme http, method GET, HEAD or OPTIONS, no body (nil or
// http.NoBody, ContentLength 0, no Transfer-Encoding, no trailers), no
// Upgrade, no Connection: upgrade, no Expect. Everything else goes to the
// fallback, above all POST orders: http.Transport sends a request again
// only when it is replayable (no body or a rewindable one, and GET, HEAD,
// OPTIONS, TRACE or an Idempotency-Key header) or when nothing of it was
// written and it has no body to resend, so an order as ReverseProxy
// forwards it (a body, no GetBody) is never sent twice, and duplicate
// protection keeps the only say on orders.
//
// A connection goes back to the pool when its response body was read to
// the end (or had none: HEAD, 204, 304, Content-Length 0), neither the
// request nor the response asked to close (Connection: close, an HTTP/1.0
// response without keep-alive, a body delimited by the end of the
// connection), nothing is left in its read buffer, and the request's
// context was not cancelled meanwhile. A body closed before its end keeps
// the connection only when the rest of it (a Content-Length body) is
// already in the read buffer, so Close never waits for the backend;
// otherwise the connection is closed.
//
// The request's context deadline is the connection's deadline from the
// moment the request is written until the response body ends, so it also
// bounds the caller's reads of the body (it stays on the connection while
// it is idle, where nothing reads, and is replaced by the next request's); cancelling the context expires
// the connection at once. Errors caused by either are the context's error
// (context.DeadlineExceeded or context.Canceled). Dial errors are the
// *net.OpError of the dial (Op "dial"), which idempotency.NotSent
// recognises, also when the deadline cut the dial short (it then reports
// Timeout). Response headers, 1xx responses included, are capped at 1 MiB;
// 1xx responses go to the Got1xxResponse hook of the context's
// httptrace.ClientTrace, as http.Transport does (ReverseProxy forwards
// them), and a 101 is an error.
//
// A pooled connection the backend closed while it was idle is detected
// when the request fails on it before any byte of a response arrived (end
// of file or reset, writing or reading) or when the backend's first answer
// on it is a 408 Request Timeout; the request is then sent once more on a
// new connection, unless its context is done, and idle connections older
// than the stale one are dropped. A request is never sent a third time,
// nor again after any other response bytes arrived.
//
// Build one with NewUpstreamTransport; the zero value is not usable. It is
// safe for concurrent use.
type UpstreamTransport struct {
	fallback    http.RoundTripper
	dialer      net.Dialer
	maxIdle     int
	maxConns    int
	idleTimeout time.Duration

	mu    sync.Mutex
	hosts map[string]*hostPool
}

// NewUpstreamTransport returns the RoundTripper exgate uses to reach the
// backend described by u. DialTimeout bounds each dial (zero: only the
// request's deadline does), with TCP keep-alive probes every 30s.
// MaxIdleConns bounds the idle connections kept per host (zero: 512).
// MaxConnsPerHost caps the connections per host, idle, busy and being
// dialled (zero: no cap); a request waits for one to free up or for its
// context to end. IdleConnTimeout closes a connection idle that long
// (zero: 90s). Requests it does not serve itself (see UpstreamTransport)
// go to fallback; nil means NewTransport(u). The cap applies to this
// transport's own connections: the fallback keeps its own.
func NewUpstreamTransport(u config.Upstream, fallback http.RoundTripper) *UpstreamTransport {
	if fallback == nil {
		fallback = NewTransport(u)
	}
	t := &UpstreamTransport{
		fallback:    fallback,
		dialer:      net.Dialer{Timeout: u.DialTimeout, KeepAlive: 30 * time.Second},
		maxIdle:     u.MaxIdleConns,
		maxConns:    u.MaxConnsPerHost,
		idleTimeout: u.IdleConnTimeout,
		hosts:       make(map[string]*hostPool),
	}
	if t.maxIdle <= 0 {
		t.maxIdle = defaultMaxIdleConns
	}
	if t.idleTimeout <= 0 {
		t.idleTimeout = defaultIdleConnTimeout
	}
	return t
}

// hostPool is the connections to one host:port. Its fields are guarded by
// the transport's mutex.
type hostPool struct {
	key     string
	idle    []*upConn     // oldest first: taken from the end (LIFO), expired from the front
	conns   int           // open or being dialled, idle included
	waiters []*connWaiter // requests waiting for a free slot, first come first served
	sweep   *time.Timer   // closes expired idle connections
	armed   bool          // sweep will fire
}

// connWaiter is a request waiting, under MaxConnsPerHost, for a connection
// to free up. It receives one value: an idle connection, or nil for a
// slot to dial a new one into.
type connWaiter struct{ ch chan *upConn }

// upConn is one connection to the backend.
type upConn struct {
	t         *UpstreamTransport
	hp        *hostPool
	nc        net.Conn
	expire    func()    // sets a past deadline on nc: cancels the exchange under way
	idleSince time.Time // when it last went idle; guarded by t.mu

	// The exchange under way, owned by the goroutine that runs it and then
	// by the response body.
	br       *bufio.Reader // pooled; reads through Read
	limit    int64         // bytes Read may still take from nc
	stop     func() bool   // unregisters expire from the request's context, or nil
	deadline bool          // nc carries the request's deadline
}

// Read reads from the connection, at most limit bytes: the cap on
// response headers while they are read, none afterwards.
func (pc *upConn) Read(p []byte) (int, error) {
	if pc.limit <= 0 {
		return 0, errUpstreamHeaderTooLarge
	}
	if int64(len(p)) > pc.limit {
		p = p[:pc.limit]
	}
	n, err := pc.nc.Read(p)
	pc.limit -= int64(n)
	return n, err
}

// begin prepares pc for an exchange under ctx.
func (pc *upConn) begin(ctx context.Context) {
	pc.limit = maxResponseHeaderBytes
	if dl, ok := ctx.Deadline(); ok {
		_ = pc.nc.SetDeadline(dl) // on a closed connection the write fails next
		pc.deadline = true
	} else if pc.deadline {
		// The last exchange's deadline is still on the connection (it
		// is left there when the connection goes idle: nothing reads an
		// idle connection, and replacing it here costs one call instead
		// of two per request).
		_ = pc.nc.SetDeadline(time.Time{})
		pc.deadline = false
	}
	if ctx.Done() != nil {
		pc.stop = context.AfterFunc(ctx, pc.expire)
	}
	pc.br = upstreamReaders.Get().(*bufio.Reader)
	pc.br.Reset(pc)
}

// abort ends a failed exchange: the connection is closed; its slot stays
// taken for the caller to release or dial into.
func (pc *upConn) abort() {
	if pc.stop != nil {
		pc.stop()
		pc.stop = nil
	}
	_ = pc.nc.Close()
	pc.putReader()
}

func (pc *upConn) putReader() {
	if pc.br != nil {
		pc.br.Reset(nil)
		upstreamReaders.Put(pc.br)
		pc.br = nil
	}
}

// RoundTrip sends req to the backend and returns its response; see
// UpstreamTransport for what it serves itself.
func (t *UpstreamTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !servesItself(req) {
		return t.roundTripFallback(req)
	}
	ctx := req.Context()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	pc, reused, err := t.acquire(ctx, hostKey(req.URL))
	if err != nil {
		return nil, err
	}
	res, stale, err := t.exchange(ctx, pc, req, reused)
	if err == nil {
		return res, nil
	}
	hp := pc.hp
	if !stale || !reused || ctx.Err() != nil {
		t.releaseSlot(hp)
		return nil, err
	}
	// The backend closed the connection while it was idle: so it did, or
	// will, every connection idle longer. Send the request once more, on
	// a new connection dialled into the same slot.
	t.dropIdleSince(hp, pc.idleSince)
	pc, err2 := t.dial(ctx, hp)
	if err2 != nil {
		if cerr := ctx.Err(); cerr != nil {
			return nil, cerr
		}
		// The first attempt may have reached the backend: report its
		// error, so that the failure does not read as "never sent".
		return nil, fmt.Errorf("%w (sending it again: %v)", err, err2)
	}
	res, _, err = t.exchange(ctx, pc, req, false)
	if err != nil {
		t.releaseSlot(hp)
		return nil, err
	}
	return res, nil
}

// servesItself reports whether req is one UpstreamTransport sends itself.
func servesItself(req *http.Request) bool {
	if req.URL == nil || req.URL.Scheme != "http" || req.URL.Host == "" {
		return false
	}
	return fastExchange(req)
}

// fastExchange reports whether req, forwarded to an http backend, is one
// UpstreamTransport sends itself: a GET, HEAD or OPTIONS with no body, no
// upgrade and no Expect. ReverseProxy keeps each of these properties
// from the inbound request to the outbound one.
func fastExchange(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, "":
	default:
		return false
	}
	if (req.Body != nil && req.Body != http.NoBody) || req.ContentLength != 0 ||
		len(req.TransferEncoding) > 0 || len(req.Trailer) > 0 {
		return false
	}
	h := req.Header
	return len(h["Upgrade"]) == 0 && len(h["Expect"]) == 0 && !hasToken(h["Connection"], "upgrade")
}

// hostKey is the pool key and dial address of u: host:port.
func hostKey(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

// hasToken reports whether a comma-separated header has token, in any case.
func hasToken(values []string, token string) bool {
	for _, v := range values {
		for part := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(part), token) {
				return true
			}
		}
	}
	return false
}

// exchange writes req on pc and reads the response up to its body. On
// failure the connection is closed, its slot kept for the caller, and
// stale reports that the failure looks like a connection the backend had
// closed: the end of the connection or a reset before any byte of a
// response, or (on a reused connection) a 408.
func (t *UpstreamTransport) exchange(ctx context.Context, pc *upConn, req *http.Request, reused bool) (res *http.Response, stale bool, err error) {
	pc.begin(ctx)
	bw := upstreamWriters.Get().(*bufio.Writer)
	bw.Reset(pc.nc)
	err = writeRequestHead(bw, req)
	if err == nil {
		err = bw.Flush()
	}
	bw.Reset(nil)
	upstreamWriters.Put(bw)
	if err != nil {
		pc.abort()
		return nil, isConnLoss(err), upstreamErr(ctx, fmt.Errorf("exgate upstream: writing the request: %w", err))
	}
	for {
		res, err = readResponseHead(pc.br, req)
		if err != nil {
			received := pc.limit < maxResponseHeaderBytes
			if pc.limit <= 0 {
				err = errUpstreamHeaderTooLarge
			} else {
				err = fmt.Errorf("exgate upstream: reading the response: %w", err)
			}
			pc.abort()
			return nil, !received && isConnLoss(err), upstreamErr(ctx, err)
		}
		code := res.StatusCode
		if code >= 200 {
			break
		}
		switch {
		case code < 100:
			err = fmt.Errorf("exgate upstream: malformed status code %03d", code)
		case code == http.StatusSwitchingProtocols:
			err = errUpstreamSwitching
		default:
			// 100 Continue, 103 Early Hints…: passed to the request's
			// trace (ReverseProxy forwards them to the client), then the
			// next response. All of them share the header cap.
			if trace := httptrace.ContextClientTrace(ctx); trace != nil && trace.Got1xxResponse != nil {
				err = trace.Got1xxResponse(code, textproto.MIMEHeader(res.Header))
			}
		}
		if err != nil {
			pc.abort()
			return nil, false, upstreamErr(ctx, err)
		}
	}
	if reused && res.StatusCode == http.StatusRequestTimeout {
		// Servers that time out idle connections with a 408 (as
		// http.Transport recognises) sent it before our request arrived.
		pc.abort()
		return nil, true, upstreamErr(ctx, errUpstreamIdle408)
	}
	pc.limit = math.MaxInt64
	keep := !res.Close && !req.Close && !hasToken(req.Header["Connection"], "close")
	if res.Body == http.NoBody {
		t.release(pc, keep)
		return res, false, nil
	}
	res.Body = &upBody{pc: pc, ctx: ctx, rc: res.Body, nc: pc.nc, keep: keep, size: res.ContentLength}
	return res, false, nil
}

// upstreamErr is the error of a failed exchange: the context's error when
// it is done or when the connection deadline (the context's) passed.
func upstreamErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return err
}

// isConnLoss reports whether err is the connection ending or being reset.
func isConnLoss(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNABORTED)
}

// release ends an exchange whose response is complete: pc goes back to
// the pool when keep allows and the connection is clean, else it is
// closed.
func (t *UpstreamTransport) release(pc *upConn, keep bool) {
	if pc.stop != nil && !pc.stop() {
		keep = false // the context ended: expire ran or is running
	}
	pc.stop = nil
	if keep && pc.br.Buffered() > 0 {
		keep = false // bytes the backend should not have sent
	}
	pc.putReader()
	if keep {
		t.put(pc)
		return
	}
	_ = pc.nc.Close()
	t.releaseSlot(pc.hp)
}

// acquire returns a connection to key: the most recently idle one, else a
// new one, waiting under MaxConnsPerHost for a slot. reused reports a
// connection that served an earlier request.
func (t *UpstreamTransport) acquire(ctx context.Context, key string) (pc *upConn, reused bool, err error) {
	var expired []*upConn
	t.mu.Lock()
	hp := t.hosts[key]
	if hp == nil {
		hp = &hostPool{key: key}
		t.hosts[key] = hp
	}
	if n := len(hp.idle); n > 0 {
		pc = hp.idle[n-1]
		if time.Since(pc.idleSince) < t.idleTimeout {
			hp.idle[n-1] = nil
			hp.idle = hp.idle[:n-1]
			t.mu.Unlock()
			return pc, true, nil
		}
		// The newest idle connection expired, so did all the older ones.
		expired = t.dropLocked(hp, n)
	}
	var w *connWaiter
	if t.maxConns <= 0 || hp.conns < t.maxConns {
		hp.conns++
	} else {
		w = &connWaiter{ch: make(chan *upConn, 1)}
		hp.waiters = append(hp.waiters, w)
	}
	t.mu.Unlock()
	closeConns(expired)
	if w != nil {
		if dl, ok := ctx.Deadline(); ok {
			// A routeContext reports its deadline but does not end
			// at it: wait no longer than that.
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, dl)
			defer cancel()
		}
		select {
		case pc = <-w.ch:
			if pc != nil {
				return pc, true, nil
			}
			// A slot: dial into it.
		case <-ctx.Done():
			t.mu.Lock()
			if i := slices.Index(hp.waiters, w); i >= 0 {
				hp.waiters = slices.Delete(hp.waiters, i, i+1)
				t.mu.Unlock()
				return nil, false, ctx.Err()
			}
			t.mu.Unlock()
			// Served meanwhile: give it back.
			if pc = <-w.ch; pc != nil {
				t.put(pc)
			} else {
				t.releaseSlot(hp)
			}
			return nil, false, ctx.Err()
		}
	}
	pc, err = t.dial(ctx, hp)
	return pc, false, err
}

// dial opens a connection in a slot of hp already counted; on failure the
// slot is released.
func (t *UpstreamTransport) dial(ctx context.Context, hp *hostPool) (*upConn, error) {
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		// Past a routeContext's deadline (which does not end it).
		t.releaseSlot(hp)
		return nil, context.DeadlineExceeded
	}
	nc, err := t.dialer.DialContext(ctx, "tcp", hp.key)
	if err != nil {
		t.releaseSlot(hp)
		return nil, err
	}
	pc := &upConn{t: t, hp: hp, nc: nc}
	pc.expire = func() { _ = nc.SetDeadline(aLongTimeAgo) }
	return pc, nil
}

// put makes pc idle: handed to the first waiting request, else kept
// unless MaxIdleConns are already idle.
func (t *UpstreamTransport) put(pc *upConn) {
	t.mu.Lock()
	hp := pc.hp
	pc.idleSince = time.Now() // under the lock: idle stays sorted
	if len(hp.waiters) > 0 {
		t.handOffLocked(hp, pc)
		t.mu.Unlock()
		return
	}
	if len(hp.idle) >= t.maxIdle {
		hp.conns--
		t.mu.Unlock()
		_ = pc.nc.Close()
		return
	}
	hp.idle = append(hp.idle, pc)
	if !hp.armed {
		hp.armed = true
		if hp.sweep == nil {
			hp.sweep = time.AfterFunc(t.idleTimeout, func() { t.sweepIdle(hp) })
		} else {
			hp.sweep.Reset(t.idleTimeout)
		}
	}
	t.mu.Unlock()
}

// releaseSlot gives up a connection slot of hp whose connection is
// closed: to the first waiting request, else it is freed.
func (t *UpstreamTransport) releaseSlot(hp *hostPool) {
	t.mu.Lock()
	if len(hp.waiters) > 0 {
		t.handOffLocked(hp, nil)
	} else {
		hp.conns--
		t.forgetLocked(hp)
	}
	t.mu.Unlock()
}

// handOffLocked passes pc (nil: a slot) to hp's first waiter.
func (t *UpstreamTransport) handOffLocked(hp *hostPool, pc *upConn) {
	w := hp.waiters[0]
	hp.waiters = slices.Delete(hp.waiters, 0, 1)
	w.ch <- pc // buffered, and each waiter is sent one value
}

// dropLocked takes the n oldest idle connections out of hp, frees their
// slots and returns them for the caller to close outside the lock.
func (t *UpstreamTransport) dropLocked(hp *hostPool, n int) []*upConn {
	if n == 0 {
		return nil
	}
	dropped := slices.Clone(hp.idle[:n])
	hp.idle = slices.Delete(hp.idle, 0, n)
	for range n {
		if len(hp.waiters) > 0 {
			t.handOffLocked(hp, nil)
		} else {
			hp.conns--
		}
	}
	return dropped
}

// forgetLocked removes hp from the transport once it holds nothing.
func (t *UpstreamTransport) forgetLocked(hp *hostPool) {
	if hp.conns > 0 || len(hp.waiters) > 0 {
		return
	}
	if hp.sweep != nil {
		hp.sweep.Stop()
	}
	hp.armed = false
	if t.hosts[hp.key] == hp {
		delete(t.hosts, hp.key)
	}
}

// dropIdleSince closes hp's idle connections that went idle no later
// than since.
func (t *UpstreamTransport) dropIdleSince(hp *hostPool, since time.Time) {
	t.mu.Lock()
	n := 0
	for n < len(hp.idle) && !hp.idle[n].idleSince.After(since) {
		n++
	}
	dropped := t.dropLocked(hp, n)
	t.mu.Unlock()
	closeConns(dropped)
}

// sweepIdle closes hp's expired idle connections and sets the timer for
// the next expiry, at most 16 times per IdleConnTimeout.
func (t *UpstreamTransport) sweepIdle(hp *hostPool) {
	t.mu.Lock()
	hp.armed = false
	now := time.Now()
	n := 0
	for n < len(hp.idle) && now.Sub(hp.idle[n].idleSince) >= t.idleTimeout {
		n++
	}
	expired := t.dropLocked(hp, n)
	if len(hp.idle) > 0 {
		hp.armed = true
		hp.sweep.Reset(max(hp.idle[0].idleSince.Add(t.idleTimeout).Sub(now), t.idleTimeout/16))
	}
	t.forgetLocked(hp)
	t.mu.Unlock()
	closeConns(expired)
}

func closeConns(conns []*upConn) {
	for _, pc := range conns {
		_ = pc.nc.Close()
	}
}

// CloseIdleConnections closes the idle connections, this transport's and
// the fallback's. Connections in use are not interrupted; they become
// idle when their exchange ends.
func (t *UpstreamTransport) CloseIdleConnections() {
	var idle []*upConn
	t.mu.Lock()
	for _, hp := range t.hosts {
		idle = append(idle, t.dropLocked(hp, len(hp.idle))...)
		if hp.sweep != nil {
			hp.sweep.Stop()
		}
		hp.armed = false
		t.forgetLocked(hp)
	}
	t.mu.Unlock()
	closeConns(idle)
	if c, ok := t.fallback.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// States of an upBody, for a Close racing a Read.
const (
	bodyActive  uint32 = iota
	bodyDone           // ended by the goroutine holding mu
	bodyAborted        // Close closed the connection under a Read
)

// upBody is a response body on a pooled connection: it ends the exchange
// when the body ends (the connection may be reused) or is closed (it is
// closed, unless the rest of the body is already buffered).
type upBody struct {
	mu    sync.Mutex // held by Read and Close
	state atomic.Uint32
	pc    *upConn // nil once the exchange ended
	ctx   context.Context
	rc    io.ReadCloser // the body http.ReadResponse made
	nc    net.Conn      // pc.nc, for a Close racing a Read
	keep  bool          // the response allows reusing the connection
	size  int64         // Content-Length, or -1
	n     int64         // bytes read
	err   error         // what Read returns once the exchange ended
}

// Read reads the body. The end of the body ends the exchange.
func (b *upBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pc == nil {
		return 0, b.err
	}
	n, err := b.rc.Read(p)
	b.n += int64(n)
	switch {
	case err == io.EOF:
		b.err = io.EOF
		b.finish(true)
	case err != nil:
		err = upstreamErr(b.ctx, err)
		b.err = err
		b.finish(false)
	}
	return n, err
}

// Close ends the exchange if the body has not ended. It does not wait for
// the backend: a Read under way in another goroutine is made to return.
func (b *upBody) Close() error {
	if !b.mu.TryLock() {
		if b.state.CompareAndSwap(bodyActive, bodyAborted) {
			_ = b.nc.Close()
		}
		b.mu.Lock()
	}
	defer b.mu.Unlock()
	if b.pc != nil {
		b.finish(b.discardBuffered())
	}
	b.err = errUpstreamBodyClosed
	return nil
}

// discardBuffered reads the rest of a body known to be already in the
// read buffer, so that the connection can be kept; it never waits for the
// backend.
func (b *upBody) discardBuffered() bool {
	if !b.keep || b.size < 0 || b.size-b.n > int64(b.pc.br.Buffered()) {
		return false
	}
	_, err := io.Copy(io.Discard, b.rc)
	return err == nil
}

// finish ends the exchange; the connection is reused when done says the
// body ended and nothing else forbids it.
func (b *upBody) finish(done bool) {
	if !b.state.CompareAndSwap(bodyActive, bodyDone) {
		done = false // Close closed the connection
	}
	pc := b.pc
	b.pc = nil
	pc.t.release(pc, done && b.keep)
}
