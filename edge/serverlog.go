package edge

import (
	stdlog "log"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/exgate/exgate/ratelimit"
)

// The bound of net/http's own lines about client connections (serverLog):
// at most serverLogBurst at once, then serverLogRate a second, for the
// whole server; a summary every serverLogSummary while lines are held back.
const (
	serverLogRate    = 20
	serverLogBurst   = 200
	serverLogSummary = 10 * time.Second
)

// serverLog is the writer of the traffic server's ErrorLog: the lines
// net/http writes itself about client connections — a failed TLS
// handshake, an HTTP/2 connection error, a GOAWAY received — which no
// request, limit or share of exgate's bounds. One client could otherwise
// write as many as it likes: net/http logs every GOAWAY frame with an
// error code that a connection carries (tens of thousands from one
// connection before it closes, 17 bytes sent for each 150-byte line), and
// every failed handshake of a connection opened only to fail it; each
// line is written under the log's lock, into the 256 KiB buffer every
// access log line shares and past it into the sink, in every client's
// request, as the refusal lines were before their share (docs/pools.md).
//
// The lines go to the log as before (logger "http", warn) within a
// bucket of serverLogBurst lines, refilled at serverLogRate a second —
// the rate limiter's own GCRA (ratelimit.Memory), one key — shared by
// the whole server: these lines name a connection, not
// a client exgate knows (a GOAWAY's names none), and they report the
// connection's protocol, never a request's answer. Past it lines are
// counted, not written, and one line every serverLogSummary while that
// lasts — and one at shutdown (FlushServerLog) — says how many: nothing
// is lost silently. A client that floods them hides the other connections' lines
// of that time, never their requests, nor the access log.
type serverLog struct {
	log   *zap.Logger
	now   func() time.Time
	after func(time.Duration, func()) // time.AfterFunc, or a test's

	lines *ratelimit.Memory // the server's one bucket, key 0

	mu      sync.Mutex
	held    int64     // lines not written since the last summary
	first   time.Time // when the first of them came
	summary bool      // a summary is due (after armed)
}

// serverLogLimit is serverLog's bucket.
var serverLogLimit = ratelimit.Limit{Rate: serverLogRate, Period: time.Second, Burst: serverLogBurst}

// newServerLog returns the ErrorLog of a traffic server logging to log,
// on the clock now.
func newServerLog(log *zap.Logger, now func() time.Time, after func(time.Duration, func())) *stdlog.Logger {
	s := &serverLog{log: log.Named("http"), now: now, after: after,
		lines: ratelimit.NewMemory(ratelimit.MemoryOptions{MaxKeys: 1})}
	return stdlog.New(s, "", 0)
}

// FlushServerLog writes the summary of the lines of net/http's that
// srv, a server of NewServer, held back since the last one (serverLog).
// The process calls it once srv is shut down, before its last line, so
// that none is lost; it does nothing for another server.
func FlushServerLog(srv *http.Server) {
	if srv.ErrorLog == nil {
		return
	}
	if s, ok := srv.ErrorLog.Writer().(*serverLog); ok {
		s.flush()
	}
}

// Write writes one line of net/http's, or counts it when past the bound.
func (s *serverLog) Write(p []byte) (int, error) {
	if s.allow() {
		s.log.Warn(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

// allow charges a line to the bucket and reports whether it may be
// written; a line that may not is counted, and a summary armed.
func (s *serverLog) allow() bool {
	now := s.now()
	if s.lines.AllowHash(0, now, serverLogLimit, 1).Allowed {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held == 0 {
		s.first = now
	}
	s.held++
	if !s.summary {
		s.summary = true
		s.after(serverLogSummary, s.flush)
	}
	return false
}

// flush writes how many lines were not written since the last summary,
// if any. The timer armed by allow calls it, and so does
// FlushServerLog.
func (s *serverLog) flush() {
	s.mu.Lock()
	n, first := s.held, s.first
	s.held, s.summary = 0, false
	s.mu.Unlock()
	if n > 0 {
		s.log.Warn("net/http's connection log lines not written: past their bound",
			zap.Int64("lines_not_written", n), zap.Time("first", first),
			zap.Int("bound_per_second", serverLogRate), zap.Int("bound_at_once", serverLogBurst))
	}
}
