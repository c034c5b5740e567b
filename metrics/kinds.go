package metrics

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
)

// UpstreamErrorKind is the kind label of exgate_upstream_errors_total. The
// zero value is UpstreamOther.
type UpstreamErrorKind uint8

// Upstream error kinds.
const (
	// UpstreamOther is any failure not covered below (TLS, malformed
	// response, ...); exgate answers 502.
	UpstreamOther UpstreamErrorKind = iota
	// UpstreamTimeout: the backend did not answer within the route
	// timeout, or a dial or I/O deadline passed; exgate answers 504.
	UpstreamTimeout
	// UpstreamUnreachable: no connection could be made (refused, no
	// route to host, DNS failure); exgate answers 502.
	UpstreamUnreachable
	// UpstreamReset: the backend closed or reset the connection before
	// or during its response; exgate answers 502, or drops the client
	// connection when the response had started.
	UpstreamReset
	// UpstreamClientGone: the client went away first, so the backend's
	// answer was abandoned; nothing is sent and the request is logged and
	// counted as 499.
	UpstreamClientGone
	numUpstreamErrorKinds
)

// String returns the label value: "other", "timeout", "unreachable",
// "reset" or "client_gone".
func (k UpstreamErrorKind) String() string {
	switch k {
	case UpstreamTimeout:
		return "timeout"
	case UpstreamUnreachable:
		return "unreachable"
	case UpstreamReset:
		return "reset"
	case UpstreamClientGone:
		return "client_gone"
	}
	return "other"
}

// ClassifyUpstreamError returns the kind of a failure to get an answer
// from the backend. clientGone reports whether the client's own request
// context had ended (the client disconnected), which wins over err: the
// backend call then fails only because exgate abandoned it.
func ClassifyUpstreamError(err error, clientGone bool) UpstreamErrorKind {
	if clientGone || errors.Is(err, context.Canceled) {
		return UpstreamClientGone
	}
	if IsTimeout(err) {
		return UpstreamTimeout
	}
	var dns *net.DNSError
	if errors.As(err, &dns) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) ||
		errors.Is(err, syscall.EHOSTDOWN) || errors.Is(err, syscall.ENETDOWN) {
		return UpstreamUnreachable
	}
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) {
		return UpstreamReset
	}
	return UpstreamOther
}

// IsTimeout reports whether err is or wraps context.DeadlineExceeded or an
// error with a Timeout method that reports true (net.Error among them).
// It is the one timeout rule: an upstream error it matches is counted as
// UpstreamTimeout and answered 504, and a client body it matches 408.
func IsTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// storeErrorKind is the kind label of exgate_ratelimit_store_errors_total.
type storeErrorKind uint8

const (
	storeErrOther storeErrorKind = iota
	storeErrTimeout
	storeErrFull
	numStoreErrorKinds
)

func (k storeErrorKind) String() string {
	switch k {
	case storeErrTimeout:
		return "timeout"
	case storeErrFull:
		return "full"
	}
	return "other"
}

func classifyStoreError(err error) storeErrorKind {
	switch {
	case IsTimeout(err):
		return storeErrTimeout
	case IsOutOfMemory(err):
		return storeErrFull
	}
	return storeErrOther
}

// IsOutOfMemory reports whether err is Redis refusing a write at its
// maxmemory (an OOM reply).
func IsOutOfMemory(err error) bool {
	return err != nil && strings.Contains(err.Error(), "OOM command not allowed")
}

// FallbackMode is the mode label of exgate_ratelimit_fallback_total: what
// decided a request while the rate-limit store was failing. The zero value
// is FallbackOpen.
type FallbackMode uint8

// Fallback modes, as limiter.on_store_error names them.
const (
	// FallbackOpen: the request was allowed unchecked.
	FallbackOpen FallbackMode = iota
	// FallbackClosed: the request was refused with 503.
	FallbackClosed
	// FallbackLocal: the in-process limiter decided (rate / replicas).
	FallbackLocal
	numFallbackModes
)

// String returns the label value: "open", "closed" or "local".
func (f FallbackMode) String() string {
	switch f {
	case FallbackClosed:
		return "closed"
	case FallbackLocal:
		return "local"
	}
	return "open"
}

// ParseFallbackMode returns the FallbackMode named by a
// limiter.on_store_error value ("open", "closed" or "local").
func ParseFallbackMode(s string) (FallbackMode, bool) {
	for f := FallbackMode(0); f < numFallbackModes; f++ {
		if f.String() == s {
			return f, true
		}
	}
	return 0, false
}

// IdempotencyOutcome is the outcome label of exgate_idempotency_total. The
// zero value is IdempotencyClaimed.
type IdempotencyOutcome uint8

// Duplicate-protection outcomes.
const (
	// IdempotencyClaimed: the identifier was new; the order went to the
	// backend.
	IdempotencyClaimed IdempotencyOutcome = iota
	// IdempotencyReplayed: the identifier was seen with the same body and
	// the stored answer was returned.
	IdempotencyReplayed
	// IdempotencyInProgress: the identifier's first order is still being
	// placed; the duplicate was refused.
	IdempotencyInProgress
	// IdempotencyConflict: the identifier was seen with a different body;
	// the order was refused.
	IdempotencyConflict
	// IdempotencyUnknown: the first order's outcome is unknown (the
	// backend did not answer); the duplicate was refused.
	IdempotencyUnknown
	// IdempotencyStoreError: the store failed, so the identifier could
	// not be checked.
	IdempotencyStoreError
	// IdempotencyStoreFull: the store had no room for a new identifier
	// (the memory store's bounds, Redis at maxmemory); the order was
	// refused.
	IdempotencyStoreFull
	// IdempotencyAccountFull: the account held its whole share of the
	// store (idempotency.max_per_account); its order was refused.
	IdempotencyAccountFull
	// IdempotencyReleased: the backend refused a claimed order (4xx), so
	// its identifier was freed.
	IdempotencyReleased
	// IdempotencyNotAcceptable: a repeat of a placed order whose Accept
	// (or Prefer) does not ask for the stored answer got 406 instead of
	// it.
	IdempotencyNotAcceptable
	numIdempotencyOutcomes
)

// String returns the label value: "claimed", "replayed", "in_progress",
// "conflict", "unknown", "store_error", "store_full", "account_full",
// "released" or "not_acceptable".
func (o IdempotencyOutcome) String() string {
	switch o {
	case IdempotencyClaimed:
		return "claimed"
	case IdempotencyReplayed:
		return "replayed"
	case IdempotencyInProgress:
		return "in_progress"
	case IdempotencyConflict:
		return "conflict"
	case IdempotencyUnknown:
		return "unknown"
	case IdempotencyStoreError:
		return "store_error"
	case IdempotencyStoreFull:
		return "store_full"
	case IdempotencyAccountFull:
		return "account_full"
	case IdempotencyReleased:
		return "released"
	case IdempotencyNotAcceptable:
		return "not_acceptable"
	}
	return "invalid"
}
