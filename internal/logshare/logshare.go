// Package logshare is each client's share of the access log's refusal
// lines (docs/pools.md): the lines of the refusals exgate answers itself
// before a request reaches the backend (401, 400, 404, 405, 429…) cost a
// client nothing it is limited by, so one client could otherwise write
// as many as its connections carry, stall every request behind a slow
// log sink and bury the other clients' lines. Past its share, a client's
// refusal lines are counted, not written, and a summary line per client
// and interval says how many, of which status and code, first and last:
// nothing is lost silently.
package logshare

import (
	"net/netip"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/exgate/exgate/ratelimit"
	"github.com/exgate/exgate/share"
)

// MaxClients bounds the clients whose share the table remembers. A
// client is remembered only until its bucket would be full again (its
// entry expires then), so the table holds the clients that wrote
// refusal lines in the last burst's worth of time; past the bound the
// entry that expires soonest is dropped, which gives that client a full
// bucket back — at most one burst more of its lines.
const MaxClients = 65536

// MaxSuppressing bounds the clients whose not-written lines are counted
// one by one between two summaries; the lines of clients past it are
// counted together, in one summary line of their own.
const MaxSuppressing = 4096

// Interval is how often the summaries of the clients past their share
// are written: each client's at most once an interval, and once more in
// the interval its flood ends.
const Interval = 10 * time.Second

// Options are a Share's parameters.
type Options struct {
	// Rate is how many refusal lines a client may write per Period, and
	// Burst how many at once.
	Rate   int64
	Period time.Duration
	Burst  int64
	// Log receives the summary lines; nil means none are written.
	Log *zap.Logger
	// Suppressed, if set, is called for each line not written, with its
	// code ("" when it has none).
	Suppressed func(code string)
	// AfterFunc schedules f after d; nil means time.AfterFunc.
	AfterFunc func(d time.Duration, f func())
}

// Share is the clients' shares of the refusal lines. Its methods are safe
// for concurrent use; a nil *Share allows every line.
type Share struct {
	limit ratelimit.Limit   // Rate per Period, Burst
	lines *ratelimit.Memory // each client's bucket, keyed by its share.Key
	opts  Options

	mu     sync.Mutex
	over   map[share.Key]*tally
	others tally // the clients past MaxSuppressing
	armed  bool  // a flush is scheduled
}

// New returns a Share, or nil when o.Rate or o.Burst is not positive
// (the share is off).
func New(o Options) *Share {
	if o.Rate <= 0 || o.Burst <= 0 || o.Period <= 0 {
		return nil
	}
	if o.AfterFunc == nil {
		o.AfterFunc = func(d time.Duration, f func()) { time.AfterFunc(d, f) }
	}
	return &Share{
		limit: ratelimit.Limit{Rate: o.Rate, Period: o.Period, Burst: o.Burst},
		lines: ratelimit.NewMemory(ratelimit.MemoryOptions{MaxKeys: MaxClients}),
		opts:  o,
		over:  make(map[share.Key]*tally),
	}
}

// Allow charges client k one line at now and reports whether it is
// within its share. The bucket is the rate limiter's own GCRA, in a
// ratelimit.Memory keyed by k (Memory.AllowHash): the same arithmetic
// as every limit, a refused line takes nothing, and a client is
// forgotten once its bucket is full again.
func (s *Share) Allow(k share.Key, now time.Time) bool {
	if s == nil {
		return true
	}
	return s.lines.AllowHash(uint64(k), now, s.limit, 1).Allowed
}

// reason is what a line not written was: its status and code.
type reason struct {
	status int
	code   string
}

// tally counts the lines of one client (or of the clients past
// MaxSuppressing) not written since the last summary.
type tally struct {
	addr        netip.Addr
	account     string
	lines       int64
	by          map[reason]int64
	first, last time.Time
}

// Suppress counts one line of client k not written at now: a refusal
// of status and code, of the client at addr (its account as the access
// log writes it, or ""). It schedules the summary.
func (s *Share) Suppress(k share.Key, now time.Time, status int, code string, addr netip.Addr, account string) {
	if s == nil {
		return
	}
	if s.opts.Suppressed != nil {
		s.opts.Suppressed(code)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.over[k]
	switch {
	case ok:
	case len(s.over) < MaxSuppressing:
		t = &tally{addr: addr, account: account}
		s.over[k] = t
	default:
		t = &s.others
	}
	t.count(now, reason{status, code})
	if !s.armed {
		s.armed = true
		s.opts.AfterFunc(Interval, s.scheduled)
	}
}

// count adds one line of r at now.
func (t *tally) count(now time.Time, r reason) {
	if t.lines == 0 {
		t.first = now
		if t.by == nil {
			t.by = make(map[reason]int64)
		}
	}
	t.lines++
	t.last = now
	t.by[r]++
}

// scheduled writes the summaries and schedules the next while a client
// is still past its share.
func (s *Share) scheduled() {
	if s.Flush() {
		s.mu.Lock()
		s.opts.AfterFunc(Interval, s.scheduled)
		s.mu.Unlock()
	}
}

// Flush writes a summary line for each client with lines not written
// since the last one, and forgets the clients that had none (their
// flood ended with their last summary). It reports whether a client is
// still remembered, for whom a later flush is due; when none is, the
// next line not written schedules one.
func (s *Share) Flush() bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, t := range s.over {
		if t.lines == 0 {
			delete(s.over, k)
			continue
		}
		s.summary(t, false)
		t.reset()
	}
	if s.others.lines > 0 {
		s.summary(&s.others, true)
		s.others.reset()
	}
	s.armed = len(s.over) > 0
	return s.armed
}

// reset empties t for the next interval, keeping its client.
func (t *tally) reset() {
	t.lines = 0
	clear(t.by)
}

// SummaryMessage is the message of the summary lines.
const SummaryMessage = "access log lines not written: client past its share of refusal lines"

// summary writes t's summary line.
func (s *Share) summary(t *tally, others bool) {
	if s.opts.Log == nil {
		return
	}
	fields := make([]zap.Field, 0, 8)
	switch {
	case others:
		fields = append(fields, zap.Bool("other_clients", true))
	case t.account != "":
		fields = append(fields, zap.String("account", t.account))
	default:
		fields = append(fields, zap.Stringer("client", t.addr))
	}
	fields = append(fields,
		zap.Int64("lines_not_written", t.lines),
		zap.Array("by", reasons(t.by)),
		zap.Time("first", t.first),
		zap.Time("last", t.last),
	)
	s.opts.Log.Warn(SummaryMessage, fields...)
}

// reasonCount is one reason's count in a summary.
type reasonCount struct {
	reason
	lines int64
}

// reasonCounts are a summary's counts, by status then code.
type reasonCounts []reasonCount

func reasons(by map[reason]int64) reasonCounts {
	rc := make(reasonCounts, 0, len(by))
	for r, n := range by {
		rc = append(rc, reasonCount{r, n})
	}
	sort.Slice(rc, func(i, j int) bool {
		if rc[i].status != rc[j].status {
			return rc[i].status < rc[j].status
		}
		return rc[i].code < rc[j].code
	})
	return rc
}

// MarshalLogArray writes the counts as objects {status, code, lines}.
func (rc reasonCounts) MarshalLogArray(enc zapcore.ArrayEncoder) error {
	for _, r := range rc {
		if err := enc.AppendObject(r); err != nil {
			return err
		}
	}
	return nil
}

// MarshalLogObject writes one reason's count.
func (r reasonCount) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	enc.AddInt("status", r.status)
	if r.code != "" {
		enc.AddString("code", r.code)
	}
	enc.AddInt64("lines", r.lines)
	return nil
}
