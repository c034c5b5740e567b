// Package idempotency is exgate's duplicate protection on order
// identifiers: per token, an identifier reaches the backend at most once
// within a retention window, and repeats of the same request are answered
// with the first response.
//
// The proxy claims the key (token id, identifier) with the request body's
// fingerprint before forwarding, and afterwards completes the claim with
// the backend's response, releases it (the request definitely never
// reached the backend) or marks its outcome unknown (it may have). A Store
// makes the claim atomic, across replicas in the Redis implementation, so
// that concurrent identical requests produce exactly one Claimed. An
// in-flight claim whose holder never finishes (a crashed replica) turns
// into an unknown outcome after the in-flight timeout, never into a free
// identifier. docs/validation.md describes the protocol.
//
// A bulk placement claims the identifiers of all its orders at once, all
// or nothing (Store.ClaimAll), and is one request to the store: its
// state and its response are kept once, under its first identifier (the
// head), and each other identifier holds only a mark naming the bulk by
// its fingerprint. Each client's share of the store — an account's, or
// for opaque tokens their client address's (Store.ClaimAll's client) —
// is counted in entries and in bytes (Options.MaxPerAccount,
// MaxBytesPerAccount), and bounded by the store's room too: a client
// takes a claim only while it holds fewer than are left free (the
// dynamic threshold of docs/pools.md), so clients filling the store leave
// room for one that holds nothing.
package idempotency

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/exgate/exgate/apierror"
	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/notsent"
)

// Fingerprint identifies a request body: its SHA-256.
type Fingerprint [sha256.Size]byte

// FingerprintOf returns the fingerprint of a request body, exactly as
// received.
func FingerprintOf(body []byte) Fingerprint { return sha256.Sum256(body) }

// Key names an identifier of one account. Account is what the proxy
// knows the client as (the verified account where identities are
// verified, else the token id, an HMAC of the token, never the token);
// each account has its own identifiers. A claim is charged to the share
// of the store (Options.MaxPerAccount, Options.MaxBytesPerAccount) of its
// client: the account itself, or, for an account anyone can invent (an
// opaque token), the client it came from (Store.ClaimAll's client,
// AddressClient), so that the tokens one address invents share one share
// (docs/pools.md); in a Redis Cluster, the account's (Redis.keys). An
// identifier is its account's wherever a claim of it comes from.
type Key struct {
	Account, Identifier string
}

// AddressClient returns the Client of a claim made from the client
// address a (grouped as the rate limits group it: clientip.AddrGroup of
// clientip.ClientForm), a name no account or token id takes (it holds a
// space). The zero Addr is the one client of requests without an
// address.
func AddressClient(a netip.Addr) string {
	var b [len("addr ") + 45]byte
	return string(a.AppendTo(append(b[:0], "addr "...)))
}

// owner returns who a claim of account from client is charged to.
func owner(account, client string) string {
	if client == "" {
		return account
	}
	return client
}

// Outcome is the result of a claim.
type Outcome int

// Claim outcomes.
const (
	// Claimed: the key was free and is now held by this request, which
	// goes to the backend; the proxy must then Complete, Release or
	// MarkUnknown the claim.
	Claimed Outcome = iota + 1
	// InProgress: the same request is being processed (409
	// request_in_progress).
	InProgress
	// Conflict: the identifier was used with a different body (409
	// duplicate_identifier).
	Conflict
	// Replay: the same request completed; Claim.Record holds the first
	// response, which the proxy sends again with Idempotent-Replayed:
	// true.
	Replay
	// Unknown: the same request may have reached the backend but its
	// response is unknown (409 outcome_unknown).
	Unknown
)

// String names the outcome.
func (o Outcome) String() string {
	switch o {
	case Claimed:
		return "claimed"
	case InProgress:
		return "in_progress"
	case Conflict:
		return "conflict"
	case Replay:
		return "replay"
	case Unknown:
		return "unknown"
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// Record is a backend response kept for replay.
type Record struct {
	// Status is the HTTP status code.
	Status int
	// ContentType is the response's Content-Type, or "".
	ContentType string
	// Header is the response's headers kept with it besides Content-Type,
	// as name and value pairs in order (the proxy's allow-list of headers
	// about the order: Location, ETag…), or nil. A pair whose name or
	// value holds a line break is not kept (net/http never sends one).
	Header []string
	// Accept is what the order's Accept header asked for, as the proxy
	// keeps it to judge a retry's against (a cache keeps the request
	// headers a response varies by alike), or "".
	Accept string
	// Body is the whole response body.
	Body []byte
}

// MaxRecordHeaderBytes bounds what a Record's Header and Accept take
// together (HeaderBytes): a response whose headers to keep take more is
// not kept, its outcome recorded as unknown instead, as a body over
// Options.MaxResponseBytes is.
const MaxRecordHeaderBytes = 4 << 10

// HeaderBytes returns what r's Header and Accept take: each name and
// value with two bytes of separator, and the Accept.
func (r *Record) HeaderBytes() int {
	n := len(r.Accept)
	for _, s := range r.Header {
		n += len(s) + 1
	}
	return n
}

// keptPair reports whether a Record keeps the header name: value: a name
// without a colon, neither with a line break (never sent by net/http).
func keptPair(name, value string) bool {
	return name != "" && !strings.ContainsAny(name, ":\r\n") && !strings.ContainsAny(value, "\r\n")
}

// keptValue is what a Record keeps of a header value: the value, or ""
// when it holds a line break.
func keptValue(v string) string {
	if strings.ContainsAny(v, "\r\n") {
		return ""
	}
	return v
}

// keepable reports whether a store keeps r under o: its body within
// Options.MaxResponseBytes, its headers within MaxRecordHeaderBytes, its
// status three digits.
func (o *Options) keepable(r *Record) bool {
	return len(r.Body) <= o.MaxResponseBytes && r.HeaderBytes() <= MaxRecordHeaderBytes &&
		r.Status >= 100 && r.Status <= 999
}

// Claim is the answer to Store.Claim and Store.ClaimAll.
type Claim struct {
	// Outcome says what the proxy does with the request.
	Outcome Outcome
	// Record is the first response, for Replay; nil otherwise.
	Record *Record
	// Key and Fingerprint are the claim's arguments; for ClaimAll, Key
	// names the first identifier.
	Key         Key
	Fingerprint Fingerprint
	// At is, for InProgress, Conflict and Unknown, the index among the
	// claimed identifiers of the one that decided the outcome (0 for
	// Claim).
	At int

	more   []string // ClaimAll's identifiers after the first
	client string   // ClaimAll's client, whose share it is charged to (Redis, for Claimed)
	keys   []string // the claim's keys in Redis (Redis.keys), for Claimed
	id     string   // the holder's token, for Claimed
	slot   int64    // the account-share slot the claim was counted in (Redis)
	charge int64    // the bytes the claim charged its account's share (Redis)
}

// Store keeps claims. Every method has a deadline (Options.Timeout) and
// reports store failures as errors; it is then unknown whether the call
// took effect, so the proxy must not forward the order (see Unavailable).
type Store interface {
	// Claim claims key for a request with fingerprint fp, or reports why
	// it cannot.
	// A new identifier is refused with ErrAccountFull when its account
	// already holds its share (Options.MaxPerAccount entries or
	// Options.MaxBytesPerAccount bytes, or no fewer than the store has
	// left free), and with ErrFull when the store has no room for it.
	Claim(ctx context.Context, key Key, fp Fingerprint) (Claim, error)
	// ClaimAll claims the distinct identifiers ids (at least one) of
	// account, charged to client's share ("": the account's own; Key), for one request
	// with fingerprint fp, a bulk of orders: all of them or none. The request is kept once, under ids[0]; the
	// outcome is that of the request (a repeat of the same bulk is
	// InProgress, Replay or Unknown) or, when any of ids is held by
	// another request, Conflict with Claim.At naming the first such.
	// Complete, Release and MarkUnknown of the claim settle every
	// identifier at once.
	ClaimAll(ctx context.Context, account, client string, ids []string, fp Fingerprint) (Claim, error)
	// Complete records the backend's response to a Claimed request; later
	// identical requests replay it. A body over Options.MaxResponseBytes,
	// or headers over MaxRecordHeaderBytes, are not kept: the outcome is
	// recorded as unknown instead. rec.Body
	// must be the whole body: a caller that stopped reading it calls
	// MarkUnknown rather than storing a truncated response.
	Complete(ctx context.Context, c Claim, rec Record) error
	// Release frees the key of a Claimed request that certainly never
	// reached the backend, so that a retry can go through.
	Release(ctx context.Context, c Claim) error
	// MarkUnknown records that a Claimed request may have reached the
	// backend but no response came back; repeats get Unknown for the
	// retention window.
	MarkUnknown(ctx context.Context, c Claim) error
}

// Errors of a Store besides store failures.
var (
	// ErrNotClaimed: Complete, Release or MarkUnknown of a claim whose
	// outcome is not Claimed.
	ErrNotClaimed = errors.New("idempotency: not a Claimed claim")
	// ErrClaimLost: the claim is no longer held (already completed,
	// released or marked, or expired after the retention window).
	ErrClaimLost = errors.New("idempotency: claim no longer held")
	// ErrFull: the store is full and takes no new identifier: the memory
	// store holds Options.MaxEntries or Options.MaxBytes of unexpired
	// entries, or Redis refuses writes at its maxmemory (OOM).
	ErrFull = errors.New("idempotency: store full")
	// ErrAccountFull: the claim's client (ClaimAll's, else its account)
	// already holds its share of the store (Options.MaxPerAccount entries
	// or Options.MaxBytesPerAccount bytes, or no fewer than the store has
	// left free: the memory store's take, Redis's room); other clients
	// still claim.
	ErrAccountFull = errors.New("idempotency: account's share of the store is full")
)

// Options configure a Store.
type Options struct {
	// Retention is how long a key stays taken after its last change.
	// Default 24h.
	Retention time.Duration
	// InFlightTimeout is how long a Claimed request may take before
	// repeats get Unknown. Default 30s.
	InFlightTimeout time.Duration
	// MaxResponseBytes bounds a stored response body. Default 64KiB.
	MaxResponseBytes int
	// Timeout is the deadline of each store call. Default 100ms.
	Timeout time.Duration
	// KeyPrefix starts every Redis key. Default "exgate:idem:".
	KeyPrefix string
	// MaxEntries and MaxBytes bound the memory store: identifiers, and
	// the bytes its entries cost the heap (MemoryBytes). Defaults 1000000
	// and 1GiB.
	MaxEntries int
	MaxBytes   int64
	// MaxPerAccount is the most identifiers one account (or one client
	// address, for all the opaque tokens it presents: Key) holds
	// at once
	// (in flight, completed or unknown, until they expire), and
	// MaxBytesPerAccount the most bytes they may cost the store
	// (MemoryBytes, RedisBytes); past either the account's new
	// identifiers get ErrAccountFull. Defaults 200000 and 200MiB:
	// config.Config.IdempotencyShare derives both from the order limits.
	MaxPerAccount      int
	MaxBytesPerAccount int64
	// ReplicaAcks is how many Redis replicas must acknowledge a claim
	// (WAIT) before the order is forwarded; 0 forwards on the master's
	// word alone. The memory store ignores it. Default 0.
	ReplicaAcks int
	// Now is the clock that times in-flight claims (and, in the memory
	// store, retention). Nil means time.Now.
	Now func() time.Time
	// Report, when set, is told the end of each work the Redis store
	// does in the background (Background): the frees of lost claims,
	// the settlements retried. It is called from the work's goroutine.
	Report func(Background)
}

// OptionsFrom returns the Options of the idempotency configuration.
func OptionsFrom(c config.Idempotency) Options {
	return Options{
		Retention:        c.Retention,
		InFlightTimeout:  c.InFlightTimeout,
		MaxResponseBytes: int(c.MaxResponseBytes),
		Timeout:          c.Timeout,
		KeyPrefix:        c.KeyPrefix,
		ReplicaAcks:      max(c.ReplicaAcks, 0), // -1 (by topology): config.Config.IdempotencyReplicaAcks
		MaxEntries:       c.Memory.MaxEntries,
		MaxBytes:         int64(c.Memory.MaxBytes),
		MaxPerAccount:    c.MaxPerAccount,
		// 0 (derived from the order limits): config.Config.IdempotencyShare
		MaxBytesPerAccount: int64(c.MaxBytesPerAccount),
	}
}

// withDefaults fills in zero values, with the configuration's defaults
// (config.DefaultIdempotency) where it has them.
func (o Options) withDefaults() Options {
	d := OptionsFrom(config.DefaultIdempotency())
	if o.Retention <= 0 {
		o.Retention = d.Retention
	}
	if o.InFlightTimeout <= 0 {
		o.InFlightTimeout = d.InFlightTimeout
	}
	if o.MaxResponseBytes <= 0 {
		o.MaxResponseBytes = d.MaxResponseBytes
	}
	if o.Timeout <= 0 {
		o.Timeout = d.Timeout
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = d.KeyPrefix
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = d.MaxEntries
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = d.MaxBytes
	}
	if o.MaxPerAccount <= 0 {
		o.MaxPerAccount = 200000
	}
	if o.MaxBytesPerAccount <= 0 {
		o.MaxBytesPerAccount = 200 << 20
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// ReplayedHeader is the response header the proxy adds to a replayed
// response, with the value "true".
const ReplayedHeader = "Idempotent-Replayed"

// Answers to an order with an identifier that exgate does not send,
// encoded once.
var (
	errInProgress = apierror.Static(http.StatusConflict, "request_in_progress",
		"A request with this identifier is still being processed; retry later to receive its response.")
	errConflict = apierror.Static(http.StatusConflict, "duplicate_identifier",
		"This identifier was already used for a different order.")
	errUnknown = apierror.Static(http.StatusConflict, "outcome_unknown",
		"A request with this identifier was already sent to the exchange and its outcome is unknown; check your orders before placing it again with a new identifier.")
	errUnavailable = apierror.Static(http.StatusServiceUnavailable, "duplicate_protection_unavailable",
		"Duplicate protection is temporarily unavailable, so the order was not sent; retry shortly with the same identifier.")
	errFull = apierror.Static(http.StatusServiceUnavailable, "duplicate_protection_full",
		"Duplicate protection has no room for new identifiers, so the order was not sent; retry later, or send it without an identifier.")
	errAccountFull = apierror.Static(http.StatusServiceUnavailable, "identifier_quota_exceeded",
		"Your share of duplicate-protection entries is full (your account's; with unverified tokens, your address's, or in a Redis Cluster your token's; a share is at most what the store has left free, so it shrinks as the store fills), so the order was not sent; retry later, or send it without an identifier.")
)

// Refusal returns the answer to a request whose claim came back
// InProgress, Conflict or Unknown. The answer is shared: read-only.
func Refusal(o Outcome) *apierror.Error {
	switch o {
	case InProgress:
		return errInProgress
	case Conflict:
		return errConflict
	case Unknown:
		return errUnknown
	}
	return apierror.Internal()
}

// Unavailable is the answer to an order with an identifier when the store
// fails: without the store exgate cannot promise a single placement, so
// it places nothing.
func Unavailable() *apierror.Error { return errUnavailable }

// Full is the answer to a new identifier when the store has no room
// (ErrFull): the order is not sent.
func Full() *apierror.Error { return errFull }

// AccountFull is the answer to a new identifier of an account that holds
// its whole share of the store (ErrAccountFull): only that account's new
// identifiers are refused, until its entries expire.
func AccountFull() *apierror.Error { return errAccountFull }

// NotSent reports whether a transport error, from the backend round trip
// or a Redis call, proves the request never left exgate: the connection
// could not be opened (dial failure, refused, name not resolved), or the
// server's certificate failed exgate's verification in the TLS handshake,
// or the handshake did not end within the Transport's
// TLSHandshakeTimeout, before any byte of the request was written.
// Anything else (timeouts, resets, EOF after writing, an alert from the
// backend, which TLS 1.3 may send after the client wrote) may have
// reached the server. It is upstream.NothingSent: one list
// (notsent.Proves), so that the order the proxy moves to another instance
// and the claim it releases are decided alike.
func NotSent(err error) bool { return notsent.Proves(err) }
