package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/exgate/exgate/apierror"
	"github.com/exgate/exgate/clientip"
	"github.com/exgate/exgate/limiter"
	"github.com/exgate/exgate/metrics"
	"github.com/exgate/exgate/proxy"
	"github.com/exgate/exgate/topk"
	"github.com/exgate/exgate/upstream"
)

// IDPrefixLen is how many hex digits of an account key or token id the
// console shows, as the access log does.
const IDPrefixLen = 12

// ConsoleOptions configure the operator console of the admin listener:
// the JSON API under /admin/ and the page at /.
type ConsoleOptions struct {
	// Top is the tracker of heavy hitters the gateway records into.
	Top *topk.Tracker
	// Status returns what only the process knows (version, configuration
	// file, reloads, listeners, store, catalogue). Nil means none.
	Status func() ProcessStatus
	// Limits is the enforcer whose buckets /admin/inspect reads and
	// /admin/reset clears. Nil means neither names a subject.
	Limits *limiter.Enforcer
	// Metrics gives /admin/status the limit store's totals and counts
	// resets. Nil means none.
	Metrics *metrics.Metrics
	// Fleet is the backend services /admin/status reports. Nil means
	// none.
	Fleet *upstream.Fleet
	// Logger receives a line for every reset. Nil means none.
	Logger *zap.Logger
	// Replica names this process in /admin/status and /admin/top, so
	// that the console and `exgate top` tell replicas apart. "" means
	// the host name.
	Replica string
	// Started is when the process started: with Replica, it tells one
	// process from another of the same name (`exgate top` reaching one
	// replica at two addresses counts it once).
	Started time.Time
}

// ProcessStatus is the part of /admin/status the process fills in.
type ProcessStatus struct {
	Version       string            `json:"version"`
	Revision      string            `json:"revision,omitempty"`
	ConfigFile    string            `json:"config_file"`
	ConfigHash    string            `json:"config_hash,omitempty"`
	Started       time.Time         `json:"started"`
	LastReload    *time.Time        `json:"last_reload,omitempty"`
	ReloadOutcome string            `json:"reload_outcome,omitempty"`
	Listeners     map[string]string `json:"listeners"`
	Store         StoreStatus       `json:"store"`
	// Idempotency is duplicate protection's store; nil without it.
	Idempotency *IdempotencyStatus `json:"duplicates,omitempty"`
	// CatalogueAge is the market catalogue's age in seconds; -1 before it
	// is loaded; absent when no route validates orders.
	CatalogueAge *float64 `json:"catalogue_age,omitempty"`
}

// StoreStatus is the rate-limit store's state.
type StoreStatus struct {
	// Mode is "memory" or "redis" (with its topology, e.g. "redis cluster").
	Mode string `json:"mode"`
	// Reachable reports whether the last probe of the store succeeded.
	Reachable bool `json:"reachable"`
	// Error is the last probe's error.
	Error string `json:"error,omitempty"`
	// StoreErrors and the Fallback counters are the metrics' since start:
	// failed round trips to the store (exgate_ratelimit_store_errors_total)
	// and decisions taken without it, by mode
	// (exgate_ratelimit_fallback_total).
	StoreErrors    int64 `json:"store_errors"`
	FallbackOpen   int64 `json:"fallback_open"`
	FallbackClosed int64 `json:"fallback_closed"`
	FallbackLocal  int64 `json:"fallback_local"`
}

// IdempotencyStatus is duplicate protection's store at its last check.
type IdempotencyStatus struct {
	// Mode is "memory" or the Redis topology ("redis cluster").
	Mode string `json:"mode"`
	// Bytes and MaxBytes are what the store holds and its bound (the
	// memory store's, or Redis's used_memory and maxmemory; 0: none);
	// Identifiers, the memory store's identifiers.
	Bytes       int64 `json:"bytes"`
	MaxBytes    int64 `json:"max_bytes"`
	Identifiers int   `json:"identifiers,omitempty"`
	// Full reports a store that takes no new identifier.
	Full bool `json:"full"`
	// ShareIdentifiers and ShareBytes are each account's share.
	ShareIdentifiers int   `json:"share_identifiers"`
	ShareBytes       int64 `json:"share_bytes"`
	// ReplicaAcks is how many replicas acknowledge each claim.
	ReplicaAcks int `json:"replica_acks"`
	// Error is what refuses orders with an identifier, or "".
	Error string `json:"error,omitempty"`
}

// console serves the admin API and page.
type console struct {
	gw     Gateway
	o      ConsoleOptions
	rc     *readiness
	access *adminAccess
	resets atomic.Int64
	host   string
}

func mountConsole(mux *http.ServeMux, gw Gateway, o ConsoleOptions, rc *readiness, access *adminAccess) {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	c := &console{gw: gw, o: o, rc: rc, access: access}
	c.host, _ = os.Hostname()
	if c.o.Replica == "" {
		c.o.Replica = c.host
	}
	mux.Handle("GET /admin/status", access.api(http.HandlerFunc(c.status)))
	mux.Handle("GET /admin/top", access.api(http.HandlerFunc(c.top)))
	mux.Handle("GET /admin/inspect", access.api(http.HandlerFunc(c.inspect)))
	mux.Handle("POST /admin/inspect", access.api(http.HandlerFunc(c.inspect)))
	mux.Handle("POST /admin/reset", access.api(http.HandlerFunc(c.reset)))
	mux.Handle("GET /admin/refusals", access.api(http.HandlerFunc(c.refusalsList)))
	mux.Handle("GET /{$}", access.page(pageHandler()))
	mux.Handle("GET /console/", access.page(pageHandler()))
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		proxy.WriteError(w, "", apierror.Internal())
		return
	}
	writeStatus(w, code, append(b, '\n'))
}

// statusBody is /admin/status's answer.
type statusBody struct {
	ProcessStatus
	Replica   string                `json:"replica"`
	Host      string                `json:"host"`
	Now       time.Time             `json:"now"`
	Draining  bool                  `json:"draining"`
	Ready     bool                  `json:"ready"`
	Checks    map[string]string     `json:"checks"`
	Routes    []limiter.RouteLimits `json:"routes"`
	Requests  int64                 `json:"limited_requests"`
	Refused   int64                 `json:"limited_refused"`
	Resets    int64                 `json:"resets"`
	ResetOpen bool                  `json:"reset_enabled"`
	// Upstream is each backend service's state and its instances'.
	Upstream []serviceStatus `json:"upstream"`
	// TokenEnv names the variable the admin token is read from.
	TokenEnv string `json:"admin_token_env"`
}

func (c *console) status(w http.ResponseWriter, r *http.Request) {
	var b statusBody
	if c.o.Status != nil {
		b.ProcessStatus = c.o.Status()
	}
	st := c.o.Metrics.StoreTotals()
	b.Store.StoreErrors, b.Store.FallbackOpen = st.Errors, st.Fallback[metrics.FallbackOpen]
	b.Store.FallbackClosed, b.Store.FallbackLocal = st.Fallback[metrics.FallbackClosed], st.Fallback[metrics.FallbackLocal]
	b.Replica, b.Host, b.Now, b.Draining = c.o.Replica, c.host, c.rc.o.Now(), c.gw.Draining()
	b.Checks, b.Ready = c.rc.run(r.Context())
	b.Ready = b.Ready && !b.Draining
	if msg, ok := b.Checks["redis"]; ok {
		b.Store.Reachable = msg == "ok"
		if msg != "ok" {
			b.Store.Error = msg
		}
	} else {
		b.Store.Reachable = true
	}
	b.Routes = c.gw.Rules().Describe()
	b.Requests, b.Refused = c.o.Top.Totals()
	b.Resets, b.ResetOpen, b.TokenEnv = c.resets.Load(), c.access.hasToken, c.access.tokenVar
	b.Upstream = fleetStatus(c.o.Fleet)
	writeJSON(w, http.StatusOK, b)
}

// topEntry is one identity or address of a top list.
type topEntry struct {
	Kind    string `json:"kind"` // account, token or address
	ID      string `json:"id"`   // an HMAC prefix, or the address
	Count   int64  `json:"count"`
	Error   int64  `json:"error"` // the count may exceed the true one by this much
	Refused int64  `json:"refused,omitempty"`
}

type topRoute struct {
	Route           string     `json:"route"`
	Requests        int64      `json:"requests"`
	Refused         int64      `json:"refused"`
	ErrorBound      int64      `json:"error_bound"`
	IDsByRefused    []topEntry `json:"identities_by_refused"`
	IDsByRequests   []topEntry `json:"identities_by_requests"`
	AddrsByRefused  []topEntry `json:"addresses_by_refused"`
	AddrsByRequests []topEntry `json:"addresses_by_requests"`
}

type topWindow struct {
	Minutes int `json:"minutes"`
	// Seconds is how far back the window reaches now: the window slides,
	// in 10-second steps for 1 minute, minute steps for 5 and 15.
	Seconds float64    `json:"seconds"`
	Routes  []topRoute `json:"routes"`
}

type topBody struct {
	Replica string      `json:"replica"`
	Started time.Time   `json:"started"`
	K       int         `json:"k"`
	Note    string      `json:"note"`
	Windows []topWindow `json:"windows"`
}

func (c *console) top(w http.ResponseWriter, r *http.Request) {
	n := 10
	if v := r.URL.Query().Get("n"); v != "" {
		if x, err := strconv.Atoi(v); err == nil && x > 0 {
			n = min(x, 100)
		}
	}
	b := topBody{Replica: c.o.Replica, Started: c.o.Started, K: c.o.Top.K(),
		Note: "this replica only; counts overestimate by at most error (Space-Saving, N/k per stripe)"}
	v6 := c.gw.Rules().IPv6Prefix()
	for _, m := range topk.Windows {
		tw := topWindow{Minutes: m, Seconds: c.o.Top.Span(m).Seconds(), Routes: []topRoute{}}
		for _, rt := range c.o.Top.Top(m, n) {
			tw.Routes = append(tw.Routes, topRoute{
				Route: rt.Route, Requests: rt.Requests, Refused: rt.Refused, ErrorBound: rt.ErrorBound,
				IDsByRefused: idEntries(rt.IDsByRefused), IDsByRequests: idEntries(rt.IDsByRequests),
				AddrsByRefused: addrEntries(rt.AddrsByRefused, v6), AddrsByRequests: addrEntries(rt.AddrsByRequests, v6),
			})
		}
		b.Windows = append(b.Windows, tw)
	}
	writeJSON(w, http.StatusOK, b)
}

func idEntries(es []topk.Entry[topk.Identity]) []topEntry {
	out := make([]topEntry, 0, len(es))
	for _, e := range es {
		out = append(out, topEntry{Kind: e.Key.Kind, ID: prefix(e.Key.ID), Count: e.Count, Error: e.Err})
	}
	return out
}

// addrEntries lists the client addresses es counted, each as the limits
// count it (the gateway records it so): an IPv6 client as its group, the
// prefix of v6Prefix bits (client_ip.ipv6_prefix), written as a prefix,
// which inspect and reset take.
func addrEntries(es []topk.Entry[netip.Addr], v6Prefix int) []topEntry {
	out := make([]topEntry, 0, len(es))
	for _, e := range es {
		id := e.Key.String()
		if e.Key.Is6() && v6Prefix > 0 && v6Prefix < 128 {
			id = netip.PrefixFrom(e.Key, v6Prefix).String()
		}
		out = append(out, topEntry{Kind: "address", ID: id, Count: e.Count, Error: e.Err})
	}
	return out
}

func prefix(id string) string { return id[:min(len(id), IDPrefixLen)] }

// inspectBody is /admin/inspect's answer.
type inspectBody struct {
	Subject subjectBody          `json:"subject"`
	Limits  []limiter.LimitState `json:"limits"`
}

type subjectBody struct {
	Kind string `json:"kind"` // account, token or address
	ID   string `json:"id"`   // an HMAC prefix, or the address
}

// The admin API's own refusals.
var (
	errNoSubject = apierror.Static(http.StatusBadRequest, "invalid_subject",
		"Name exactly one of account, user, token, token_id or address.")
	errSubjectAddress = apierror.Static(http.StatusBadRequest, "invalid_subject",
		"address is not an IP address, nor an IPv6 client's group as the top lists write it.")
	errSubjectPrefix = apierror.Static(http.StatusBadRequest, "invalid_subject",
		"Give the whole id or its first "+strconv.Itoa(IDPrefixLen)+" hex digits.")
)

// storeUnavailable is the answer to an admin request the limit store
// failed to serve.
func storeUnavailable(err error) *apierror.Error {
	return apierror.New(http.StatusServiceUnavailable, "rate_limit_unavailable", err.Error())
}

// subject reads whom a request names: account (a key, or a prefix the
// top lists show), user (a user claim), token (a raw token, best sent in
// a POST body), token_id (an id or prefix) or address.
func (c *console) subject(r *http.Request) (limiter.Subject, subjectBody, *apierror.Error) {
	var s limiter.Subject
	var sb subjectBody
	if err := r.ParseForm(); err != nil {
		return s, sb, errNoSubject
	}
	set := 0
	for _, k := range []string{"account", "user", "token", "token_id", "address"} {
		if r.Form.Get(k) != "" {
			set++
		}
	}
	if set != 1 || c.o.Limits == nil {
		return s, sb, errNoSubject
	}
	var e *apierror.Error
	switch {
	case r.Form.Get("account") != "":
		s.Account, e = c.fullID("account", r.Form.Get("account"))
		sb = subjectBody{"account", prefix(s.Account)}
	case r.Form.Get("user") != "":
		s.User = r.Form.Get("user")
		s.Account = c.o.Limits.AccountID(s.User)
		sb = subjectBody{"account", prefix(s.Account)}
	case r.Form.Get("token") != "":
		s.TokenID = c.o.Limits.TokenID(r.Form.Get("token"))
		sb = subjectBody{"token", prefix(s.TokenID)}
	case r.Form.Get("token_id") != "":
		s.TokenID, e = c.fullID("token", r.Form.Get("token_id"))
		sb = subjectBody{"token", prefix(s.TokenID)}
	default:
		a, err := subjectAddr(r.Form.Get("address"), c.gw.Rules().IPv6Prefix())
		if err != nil {
			return s, sb, errSubjectAddress
		}
		a = clientip.ClientForm(a) // the IPv4 client a NAT64 or mapped form names, as the limits key it
		s.Addr, sb = a, subjectBody{"address", a.String()}
	}
	return s, sb, e
}

// subjectAddr reads the address a subject names: an address, or an IPv6
// client's group as the top lists write it (2001:db8:1:2::/64: a prefix
// of v6Prefix bits, client_ip.ipv6_prefix), as its first address, which
// the limits key as that group. A prefix of another length names no one
// client.
func subjectAddr(v string, v6Prefix int) (netip.Addr, error) {
	p, err := netip.ParsePrefix(v)
	if err != nil {
		return netip.ParseAddr(v)
	}
	if !p.Addr().Is6() || p.Addr().Is4In6() || p.Bits() != v6Prefix {
		return netip.Addr{}, errSubjectAddress
	}
	return p.Masked().Addr(), nil
}

// fullID returns the whole account key or token id that v names: v
// itself when whole, else the one identity of that kind counted in the
// last 15 minutes whose id starts with v, which must be at least as long
// as the prefixes the console shows (a shorter one could name someone
// else, and reset would clear the wrong buckets).
func (c *console) fullID(kind, v string) (string, *apierror.Error) {
	if limiter.IsTokenID(v) {
		return v, nil
	}
	if len(v) < IDPrefixLen {
		return "", errSubjectPrefix
	}
	full, ok := c.o.Top.Resolve(kind, v)
	if !ok {
		return "", apierror.New(http.StatusNotFound, "unknown_subject",
			"No "+kind+" with that prefix was counted in the last 15 minutes; give the whole id.")
	}
	return full, nil
}

func (c *console) inspect(w http.ResponseWriter, r *http.Request) {
	s, sb, e := c.subject(r)
	if e != nil {
		proxy.WriteError(w, "", e)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	states, err := c.o.Limits.Inspect(ctx, c.gw.Rules(), s)
	if err != nil {
		proxy.WriteError(w, "", storeUnavailable(err))
		return
	}
	if states == nil {
		states = []limiter.LimitState{}
	}
	writeJSON(w, http.StatusOK, inspectBody{Subject: sb, Limits: states})
}

// reset clears one subject's buckets: only with the admin token, which
// must be configured (access.api has checked it).
func (c *console) reset(w http.ResponseWriter, r *http.Request) {
	if !c.access.hasToken {
		proxy.WriteError(w, "", c.access.errResetDisabled)
		return
	}
	s, sb, e := c.subject(r)
	if e != nil {
		proxy.WriteError(w, "", e)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	n, err := c.o.Limits.Reset(ctx, c.gw.Rules(), s)
	c.o.Logger.Warn("rate-limit buckets reset by an operator",
		zap.String("subject_kind", sb.Kind), zap.String("subject", sb.ID), zap.Int("keys", n),
		zap.String("peer", r.RemoteAddr), zap.Error(err))
	if err != nil {
		proxy.WriteError(w, "", storeUnavailable(err))
		return
	}
	c.resets.Add(1)
	c.o.Metrics.AdminReset()
	writeJSON(w, http.StatusOK, map[string]any{"subject": sb, "cleared": n})
}

// refusalsBody is /admin/refusals's answer.
type refusalsBody struct {
	// Tracing reports whether tracing is on: off, nothing is listed.
	Tracing  bool                  `json:"tracing"`
	Refusals []proxy.RecentRefusal `json:"refusals"`
}

// refusalsList serves the last refusals of sampled requests with their
// trace ids, newest first.
func (c *console) refusalsList(w http.ResponseWriter, _ *http.Request) {
	var b refusalsBody
	b.Tracing, b.Refusals = c.gw.RecentRefusals()
	writeJSON(w, http.StatusOK, b)
}
