package upstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/exgate/exgate/internal/dnstest"
)

// weighted lists eps as "URL wWeight" strings, with " pPriority" when
// it is not 0.
func weighted(eps []Endpoint) []string {
	out := make([]string, len(eps))
	for i, e := range eps {
		out[i] = fmt.Sprintf("%s w%d", e.URL, e.Weight)
		if e.Priority != 0 {
			out[i] += fmt.Sprintf(" p%d", e.Priority)
		}
	}
	return out
}

func TestDNSLookup(t *testing.T) {
	srv := dnstest.Start(t)
	srv.SetAddrs("backend.test.", netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("::1"), netip.MustParseAddr("127.0.0.1"))
	srv.SetAddrs("a.test.", netip.MustParseAddr("127.0.0.11"))
	srv.SetAddrs("b.test.", netip.MustParseAddr("127.0.0.12"), netip.MustParseAddr("::2"))
	srv.SetAddrs("c.test.", netip.MustParseAddr("127.0.0.13"))
	srv.SetSRV("_http._tcp.backend.test.",
		dnstest.SRV{Priority: 10, Weight: 30, Port: 9001, Target: "a.test."},
		dnstest.SRV{Priority: 10, Weight: 0, Port: 9002, Target: "b.test."},
		dnstest.SRV{Priority: 20, Weight: 50, Port: 9003, Target: "c.test."}, // a higher priority: a backup
		dnstest.SRV{Priority: 30, Weight: 9, Port: 9001, Target: "a.test."},  // an instance of priority 10 already
	)
	srv.SetSRV("_http._tcp.half.test.",
		dnstest.SRV{Priority: 1, Weight: 5, Port: 9001, Target: "a.test."},
		dnstest.SRV{Priority: 1, Weight: 5, Port: 9001, Target: "missing.test."}, // unresolvable: left out
		dnstest.SRV{Priority: 1, Weight: 3, Port: 9001, Target: "a.test."},       // the same instance again: weights add
	)
	srv.SetSRV("_http._tcp.gone.test.", dnstest.SRV{Priority: 1, Weight: 5, Port: 9001, Target: "missing.test."})
	srv.SetAddrs("broken.test.", netip.MustParseAddr("127.0.0.14"))
	srv.FailName("broken.test.", true) // its server restarting: SERVFAIL
	srv.SetSRV("_http._tcp.flaky.test.",
		dnstest.SRV{Priority: 1, Weight: 5, Port: 9001, Target: "a.test."},
		dnstest.SRV{Priority: 1, Weight: 5, Port: 9001, Target: "broken.test."}, // its lookup fails: the lookup fails
	)
	for _, tt := range []struct {
		name    string
		dns     *DNS
		want    []string
		wantErr bool
	}{
		{"A and AAAA", &DNS{Name: "backend.test.", Port: 9000}, []string{"http://127.0.0.1:9000 w1", "http://127.0.0.2:9000 w1", "http://[::1]:9000 w1"}, false},
		{"https", &DNS{Name: "a.test.", Port: 443, Scheme: "https"}, []string{"https://127.0.0.11:443 w1"}, false},
		{"NXDOMAIN is empty", &DNS{Name: "nothing.test.", Port: 9000}, []string{}, false},
		{"SRV weights and priorities", &DNS{SRV: "_http._tcp.backend.test."},
			[]string{"http://127.0.0.11:9001 w30 p10", "http://127.0.0.12:9002 w1 p10", "http://[::2]:9002 w1 p10", "http://127.0.0.13:9003 w50 p20"}, false},
		{"SRV target unresolvable", &DNS{SRV: "_http._tcp.half.test."}, []string{"http://127.0.0.11:9001 w8 p1"}, false},
		{"SRV no target resolvable", &DNS{SRV: "_http._tcp.gone.test."}, nil, true},
		// Before, the failing target was left out: its instances left the
		// service (drained) on a half answer, which keeps the last set no
		// more than a whole one does.
		{"SRV target lookup failing", &DNS{SRV: "_http._tcp.flaky.test."}, nil, true},
		{"SRV NXDOMAIN is empty", &DNS{SRV: "_http._tcp.nothing.test."}, []string{}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := tt.dns
			d.Resolver = NewResolver(srv.Addr)
			eps, err := d.Lookup(context.Background())
			if (err != nil) != tt.wantErr {
				t.Fatalf("Lookup: %v, want error: %v", err, tt.wantErr)
			}
			if got := weighted(eps); !tt.wantErr && !slices.Equal(got, tt.want) {
				t.Errorf("Lookup = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestDNSLookupServerFailure(t *testing.T) {
	srv := dnstest.Start(t)
	srv.SetAddrs("backend.test.", netip.MustParseAddr("127.0.0.1"))
	srv.Fail(true)
	d := DNS{Name: "backend.test.", Port: 9000, Resolver: NewResolver(srv.Addr)}
	if eps, err := d.Lookup(context.Background()); err == nil {
		t.Fatalf("Lookup with SERVFAIL = %v, want an error", weighted(eps))
	}
}

// TestDNSRunKeepsLastGoodSet follows a service through DNS: an instance
// added is found, a failing server and an empty answer keep the instances
// last found (counted as such), and a later answer replaces them.
func TestDNSRunKeepsLastGoodSet(t *testing.T) {
	srv := dnstest.Start(t)
	a1, a2 := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
	srv.SetAddrs("backend.test.", a1)
	var mu sync.Mutex
	results := map[string]int{}
	updates := make(chan []string, 16)
	d := &DNS{
		Name: "backend.test.", Port: 9000, Interval: 20 * time.Millisecond, Resolver: NewResolver(srv.Addr),
		Observe: func(r string) { mu.Lock(); results[r]++; mu.Unlock() },
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx, func(eps []Endpoint) { updates <- weighted(eps) }) }()
	defer func() { cancel(); <-done }()

	next := func(want ...string) {
		t.Helper()
		select {
		case got := <-updates:
			if !slices.Equal(got, want) {
				t.Fatalf("update = %q, want %q", got, want)
			}
		case <-time.After(time.Minute):
			t.Fatalf("no update within a minute, want %q", want)
		}
	}
	count := func(r string) int { mu.Lock(); defer mu.Unlock(); return results[r] }
	waitCount := func(r string, n int) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); count(r) < n; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d lookups with result %s within a minute, want %d", count(r), r, n)
			}
		}
	}
	next("http://127.0.0.1:9000 w1")
	srv.SetAddrs("backend.test.", a1, a2)
	next("http://127.0.0.1:9000 w1", "http://127.0.0.2:9000 w1")

	srv.Fail(true)
	waitCount(LookupError, 3)
	srv.Fail(false)
	srv.SetAddrs("backend.test.")
	waitCount(LookupEmpty, 3)
	select {
	case got := <-updates:
		t.Fatalf("a failed or empty lookup updated the instances to %q", got)
	default:
	}
	srv.SetAddrs("backend.test.", a2)
	next("http://127.0.0.2:9000 w1")
}

// TestDNSLookupOneFamilyFailing looks names up on a DNS server that
// answers SERVFAIL to one address family's questions: a name's lookup
// gives the other family's addresses with a *PartialError naming the
// failed one (Run keeps that family's last instances), and an SRV
// target's fails the whole lookup, as a target that fails whole does.
func TestDNSLookupOneFamilyFailing(t *testing.T) {
	srv := dnstest.Start(t)
	srv.SetAddrs("both.test.", netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1"))
	srv.SetSRV("_http._tcp.both.test.", dnstest.SRV{Priority: 1, Weight: 1, Port: 9001, Target: "both.test."})
	srv.SetAddrs("v4only.test.", netip.MustParseAddr("127.0.0.2"))
	for _, tt := range []struct {
		name, fail, rtype string
		dns               *DNS
		want              []string
		wantPartial       bool // else a failure whole
		wantIPv6          bool
	}{
		{"AAAA failing", "both.test.", "AAAA", &DNS{Name: "both.test.", Port: 9000}, []string{"http://127.0.0.1:9000 w1"}, true, true},
		{"A failing", "both.test.", "A", &DNS{Name: "both.test.", Port: 9000}, []string{"http://[::1]:9000 w1"}, true, false},
		{"AAAA failing, no A record", "v4only.test.", "AAAA", &DNS{Name: "v4only.test.", Port: 9000}, []string{"http://127.0.0.2:9000 w1"}, true, true},
		{"SRV target's AAAA failing", "both.test.", "AAAA", &DNS{SRV: "_http._tcp.both.test."}, nil, false, false},
		{"SRV target's A failing", "both.test.", "A", &DNS{SRV: "_http._tcp.both.test."}, nil, false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv.FailType(tt.fail, tt.rtype, true)
			defer srv.FailType(tt.fail, tt.rtype, false)
			d := tt.dns
			d.Resolver = NewResolver(srv.Addr)
			eps, err := d.Lookup(context.Background())
			var partial *PartialError
			switch {
			case err == nil:
				t.Fatalf("Lookup = %q with %s failing, want an error", weighted(eps), tt.rtype)
			case errors.As(err, &partial) != tt.wantPartial:
				t.Fatalf("Lookup: %v, want partial: %v", err, tt.wantPartial)
			case !tt.wantPartial:
				return
			case partial.IPv6 != tt.wantIPv6:
				t.Errorf("the failed family: IPv6 %v, want %v (%v)", partial.IPv6, tt.wantIPv6, err)
			}
			if got := weighted(eps); !slices.Equal(got, tt.want) {
				t.Errorf("Lookup = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestDNSRunKeepsFailedFamily follows a name of an IPv4 and an IPv6
// instance while its DNS server fails one family's questions: an
// instance added to the other family is followed, the failed family's
// instances stay (counted as a failed lookup), and once the family
// answers again its own changes are followed. Before, Go's resolver
// returned the half answer as whole: the service shrank to one family.
func TestDNSRunKeepsFailedFamily(t *testing.T) {
	a1, a2 := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
	b1, b2 := netip.MustParseAddr("::1"), netip.MustParseAddr("::2")
	for _, tt := range []struct {
		rtype string
		kept  []string // while failing: the failed family's instances kept, the other's found
	}{
		{"AAAA", []string{"http://127.0.0.1:9000 w1", "http://127.0.0.2:9000 w1", "http://[::1]:9000 w1"}},
		{"A", []string{"http://127.0.0.1:9000 w1", "http://[::1]:9000 w1", "http://[::2]:9000 w1"}},
	} {
		t.Run(tt.rtype, func(t *testing.T) {
			srv := dnstest.Start(t)
			srv.SetAddrs("backend.test.", a1, b1)
			var mu sync.Mutex
			results := map[string]int{}
			updates := make(chan []string, 16)
			d := &DNS{
				Name: "backend.test.", Port: 9000, Interval: 20 * time.Millisecond, Resolver: NewResolver(srv.Addr),
				Observe: func(r string) { mu.Lock(); results[r]++; mu.Unlock() },
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); d.Run(ctx, func(eps []Endpoint) { updates <- weighted(eps) }) }()
			defer func() { cancel(); <-done }()
			next := func(want ...string) {
				t.Helper()
				select {
				case got := <-updates:
					if !slices.Equal(got, want) {
						t.Fatalf("update = %q, want %q", got, want)
					}
				case <-time.After(time.Minute): // only bounds a hang
					t.Fatalf("no update within a minute, want %q", want)
				}
			}
			next("http://127.0.0.1:9000 w1", "http://[::1]:9000 w1")

			srv.FailType("backend.test.", tt.rtype, true)
			srv.SetAddrs("backend.test.", a1, a2, b1, b2) // the failing family's addition is not seen
			next(tt.kept...)
			mu.Lock()
			failed := results[LookupError]
			mu.Unlock()
			if failed == 0 {
				t.Error("the half answer was not counted as a failed lookup")
			}
			srv.FailType("backend.test.", tt.rtype, false)
			next("http://127.0.0.1:9000 w1", "http://127.0.0.2:9000 w1", "http://[::1]:9000 w1", "http://[::2]:9000 w1")
		})
	}
}

// TestIsNotFound tells an empty answer from a failed lookup: NXDOMAIN
// and no records, and an IPv6 lookup left with no address once the
// cgo resolver's IPv4-mapped ones are filtered out, are empty; SERVFAIL
// and a timeout are failures.
func TestIsNotFound(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"NXDOMAIN", &net.DNSError{Err: "no such host", Name: "a.test", IsNotFound: true}, true},
		{"no address of the family", &net.AddrError{Err: "no suitable address found", Addr: "a.test"}, true},
		{"SERVFAIL", &net.DNSError{Err: "server misbehaving", Name: "a.test", IsTemporary: true}, false},
		{"timeout", &net.DNSError{Err: "i/o timeout", Name: "a.test", IsTimeout: true}, false},
		{"wrapped NXDOMAIN", fmt.Errorf("x: %w", &net.DNSError{IsNotFound: true}), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := isNotFound(tt.err); got != tt.want {
				t.Errorf("isNotFound(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestServerName(t *testing.T) {
	for in, want := range map[string]string{
		"backend.ns.svc.cluster.local.":             "backend.ns.svc.cluster.local",
		"_https._tcp.backend.ns.svc.cluster.local.": "backend.ns.svc.cluster.local",
		"backend.test": "backend.test",
		"_x":           "_x",
	} {
		if got := ServerName(in); got != want {
			t.Errorf("ServerName(%q) = %q, want %q", in, got, want)
		}
	}
}
