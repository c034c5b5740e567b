package upstream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/exgate/exgate/internal/lograte"
)

// Lookup results, as DNS.Observe is told them.
const (
	LookupOK    = "ok"    // the answer named instances (changed or not)
	LookupEmpty = "empty" // the answer named none: the last set is kept
	LookupError = "error" // the lookup failed: the last set is kept
)

// DNS is a Source of a service's instances found in DNS, looked up again
// every Interval: the addresses of Name (A and AAAA records, such as a
// Kubernetes headless Service's), each an instance at Port, or the
// targets of SRV's records with their ports and weights.
//
// A lookup that fails, and one that names no instance, keep the instances
// last found: one bad answer (a DNS server restarting, a Service briefly
// without ready pods) never takes every instance away; instances that
// really went away fail their health checks meanwhile. A and AAAA
// records are asked apart: one family's lookup failing keeps that
// family's instances last found beside the other's answer (PartialError).
// Each lookup's
// result is counted through Observe and a failure is logged (at most once
// a second). Until a lookup first succeeds the service has no instances.
//
// Go's resolver does not expose the records' TTLs; Interval is how long
// an answer is used, whatever its TTL (a lower TTL is not honoured, a
// higher one costs a lookup an Interval).
type DNS struct {
	// Name is the name whose A and AAAA records are the instances'
	// addresses; Port is their port. Either Name or SRV.
	Name string
	Port int
	// SRV is the name whose SRV records are the instances: each target's
	// addresses (A and AAAA) at the record's port, with the record's
	// weight (0 counts as 1) and priority (the Service uses a higher
	// priority's instances only while no lower one's are healthy).
	SRV string
	// Scheme is the instances' URL scheme, "http" or "https"; "" is
	// "http".
	Scheme string
	// Interval is the time between lookups. It must be positive.
	Interval time.Duration
	// Resolver looks the names up; nil is net.DefaultResolver.
	Resolver *net.Resolver
	// Log, when set, gets a line for every failed lookup (at most one a
	// second) and every change of the set.
	Log *zap.Logger
	// Observe, when set, is told the result of every lookup: LookupOK,
	// LookupEmpty or LookupError.
	Observe func(result string)

	logLimit lograte.OncePerSecond
}

// NewResolver returns a resolver that asks the DNS server at addr
// (host:port) over UDP, and TCP for truncated answers, instead of the
// system's; "" returns nil, the system's resolver.
func NewResolver(addr string) *net.Resolver {
	if addr == "" {
		return nil
	}
	var d net.Dialer
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		},
	}
}

// Run looks the name up at once and then every Interval until ctx ends,
// calling update with the instances each time they change.
func (d *DNS) Run(ctx context.Context, update func([]Endpoint)) {
	var last []Endpoint
	t := time.NewTicker(d.Interval)
	defer t.Stop()
	for {
		if eps, ok := d.refresh(ctx, last); ok {
			last = eps
			update(eps)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// refresh runs one lookup and returns the instances it found, with true
// when they differ from last.
func (d *DNS) refresh(ctx context.Context, last []Endpoint) ([]Endpoint, bool) {
	lctx, cancel := context.WithTimeout(ctx, max(d.Interval, 2*time.Second))
	eps, err := d.Lookup(lctx)
	cancel()
	if ctx.Err() != nil {
		return nil, false
	}
	var partial *PartialError
	if errors.As(err, &partial) {
		eps = keepFamily(eps, last, partial.IPv6)
	}
	result := LookupOK
	switch {
	case err != nil:
		result = LookupError
	case len(eps) == 0:
		result = LookupEmpty
		err = errors.New("the answer names no instance")
	}
	if d.Observe != nil {
		d.Observe(result)
	}
	if partial != nil && len(eps) > 0 {
		if d.Log != nil && d.logLimit.Allow(time.Now()) {
			d.Log.Warn("DNS lookup of one address family of a service's instances failed; keeping that family's last ones found",
				zap.String("name", d.name()), zap.Int("instances", len(eps)), zap.Error(err))
		}
	} else if err != nil {
		if d.Log != nil && d.logLimit.Allow(time.Now()) {
			d.Log.Warn("DNS lookup of a service's instances failed; keeping the last ones found",
				zap.String("name", d.name()), zap.Int("instances", len(last)), zap.Error(err))
		}
		return nil, false
	}
	if slices.EqualFunc(eps, last, sameEndpoint) {
		return nil, false
	}
	if d.Log != nil {
		d.Log.Info("service instances found in DNS", zap.String("name", d.name()), zap.Int("instances", len(eps)), zap.Int("before", len(last)))
	}
	return eps, true
}

// name is the name looked up.
func (d *DNS) name() string { return cmp.Or(d.SRV, d.Name) }

// sameEndpoint reports whether a and b are the same instance with the
// same weight.
func sameEndpoint(a, b Endpoint) bool {
	return a.Weight == b.Weight && a.Priority == b.Priority && *a.URL == *b.URL
}

// Lookup looks the name up once and returns the instances it names,
// sorted by priority, then address and port. An address named twice (two
// SRV records' targets) is one instance, of the lower of the records'
// priorities, weighing the weights of that priority's records.
func (d *DNS) Lookup(ctx context.Context) ([]Endpoint, error) {
	r := d.Resolver
	if r == nil {
		r = net.DefaultResolver
	}
	found := map[netip.AddrPort]srvShare{}
	var partial error
	if d.SRV == "" {
		addrs, err := lookupFamilies(ctx, r, d.Name)
		if err != nil && !errors.As(err, new(*PartialError)) {
			return nil, err
		}
		partial = err
		for _, a := range addrs {
			found[netip.AddrPortFrom(a, uint16(d.Port))] = srvShare{weight: 1}
		}
	} else if err := d.lookupSRV(ctx, r, found); err != nil {
		return nil, err
	}
	eps := make([]Endpoint, 0, len(found))
	scheme := cmp.Or(d.Scheme, "http")
	for ap, sh := range found {
		eps = append(eps, Endpoint{URL: &url.URL{Scheme: scheme, Host: ap.String()}, Weight: sh.weight, Priority: sh.priority})
	}
	sortEndpoints(eps)
	return eps, partial
}

// sortEndpoints sorts eps by priority, then address and port.
func sortEndpoints(eps []Endpoint) {
	slices.SortFunc(eps, func(a, b Endpoint) int {
		return cmp.Or(cmp.Compare(a.Priority, b.Priority), strings.Compare(a.URL.Host, b.URL.Host))
	})
}

// PartialError is Lookup's error when the lookup of one address family
// of Name failed (SERVFAIL, a timeout) and the other's answered: the
// endpoints Lookup returns with it are the other family's. Run keeps the
// failed family's instances last found beside them. Go's resolver would
// return such a half answer as whole (net.Resolver.StrictErrors off), and
// the service would shrink to one family's instances, the others drained,
// on one bad answer; strict, it would fail the whole lookup every time a
// server never answers one family, and follow neither.
type PartialError struct {
	// IPv6 is whether the failed family is IPv6's (AAAA records), else
	// IPv4's (A).
	IPv6 bool
	Err  error
}

// Error names the failed family and why it failed.
func (e *PartialError) Error() string {
	return fmt.Sprintf("the %s records' lookup failed: %v", e.family(), e.Err)
}

// family is the failed family's record type.
func (e *PartialError) family() string {
	if e.IPv6 {
		return "AAAA"
	}
	return "A"
}

// Unwrap returns the failed family's error.
func (e *PartialError) Unwrap() error { return e.Err }

// lookupFamilies looks name's A and AAAA records up apart, at once, and
// returns the addresses both name. A family without records (NXDOMAIN, no
// answer) names none; when one family's lookup fails, the other's
// addresses come with a *PartialError; when both fail, the error is the
// first's.
func lookupFamilies(ctx context.Context, r *net.Resolver, name string) ([]netip.Addr, error) {
	var v6 []netip.Addr
	var err6 error
	done := make(chan struct{})
	go func() {
		defer close(done)
		v6, err6 = r.LookupNetIP(ctx, "ip6", name)
	}()
	v4, err4 := r.LookupNetIP(ctx, "ip4", name)
	<-done
	if isNotFound(err4) {
		v4, err4 = nil, nil
	}
	if isNotFound(err6) {
		v6, err6 = nil, nil
	}
	addrs := make([]netip.Addr, 0, len(v4)+len(v6))
	for _, a := range append(v4, v6...) {
		addrs = append(addrs, a.Unmap())
	}
	switch {
	case err4 != nil && err6 != nil:
		return nil, err4
	case err4 != nil:
		return addrs, &PartialError{Err: err4}
	case err6 != nil:
		return addrs, &PartialError{IPv6: true, Err: err6}
	}
	return addrs, nil
}

// keepFamily returns eps, found with one family's lookup failed, with the
// instances of last of that family (IPv6's, or IPv4's): those the failed
// lookup would otherwise take out of the service.
func keepFamily(eps, last []Endpoint, ipv6 bool) []Endpoint {
	out := slices.Clone(eps)
	for _, ep := range last {
		if ap, err := netip.ParseAddrPort(ep.URL.Host); err == nil && ap.Addr().Is6() == ipv6 {
			out = append(out, ep)
		}
	}
	sortEndpoints(out)
	return out
}

// srvShare is an instance's priority and weight, from its SRV records.
type srvShare struct {
	priority uint16
	weight   uint32
}

// lookupSRV adds the instances SRV's records name to found, each with
// its record's priority and weight. A target that has no address
// (NXDOMAIN, no records) is left out, and when no target has one, the
// lookup fails; so does it when a target's lookup fails (SERVFAIL, a
// timeout): a half answer would take that target's instances out of the
// service, which a failed lookup never does.
func (d *DNS) lookupSRV(ctx context.Context, r *net.Resolver, found map[netip.AddrPort]srvShare) error {
	_, srvs, err := r.LookupSRV(ctx, "", "", d.SRV)
	if err != nil && !isNotFound(err) {
		return err
	}
	var failed error
	resolved := 0
	for _, s := range srvs {
		if s.Port == 0 || s.Target == "." {
			continue
		}
		addrs, err := lookupFamilies(ctx, r, s.Target)
		var partial *PartialError
		switch {
		case errors.As(err, &partial): // a half answer fails the lookup too (not a PartialError: nothing is kept of it)
			return fmt.Errorf("SRV target %s: the %s records' lookup failed: %w", s.Target, partial.family(), partial.Err)
		case err != nil:
			return fmt.Errorf("SRV target %s: %w", s.Target, err)
		}
		if len(addrs) == 0 {
			failed = fmt.Errorf("SRV target %s: no address", s.Target)
			continue
		}
		resolved++
		for _, a := range addrs {
			ap := netip.AddrPortFrom(a, s.Port)
			sh, ok := found[ap]
			switch {
			case !ok || s.Priority < sh.priority:
				sh = srvShare{priority: s.Priority}
			case s.Priority > sh.priority:
				continue // the instance is already of a lower priority
			}
			sh.weight += uint32(max(s.Weight, 1))
			found[ap] = sh
		}
	}
	if resolved == 0 && failed != nil {
		return failed
	}
	return nil
}

// isNotFound reports whether err says the name has no records of the
// kind asked (NXDOMAIN, or no answer): an empty answer, not a failure.
// A *net.AddrError is one too: the system's resolver through cgo answers
// an IPv6 question about a name of A records alone with IPv4-mapped
// addresses (getaddrinfo's AI_V4MAPPED), which LookupNetIP's "ip6"
// filters out, left with "no suitable address".
func isNotFound(err error) bool {
	var de *net.DNSError
	return errors.As(err, &de) && de.IsNotFound || errors.As(err, new(*net.AddrError))
}

// ServerName is the name a service found through DNS is expected to have
// a certificate for: name, or SRV's name without its _service._proto
// labels, without the final dot.
func ServerName(name string) string {
	labels := strings.Split(strings.TrimSuffix(name, "."), ".")
	for len(labels) > 1 && strings.HasPrefix(labels[0], "_") {
		labels = labels[1:]
	}
	return strings.Join(labels, ".")
}
