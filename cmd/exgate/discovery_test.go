package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/dnstest"
)

// dnsInstance is a backend instance at one loopback address: it counts
// the requests it answers, and holds those to /slow until released.
type dnsInstance struct {
	served  atomic.Int64
	holding chan struct{} // a /slow request arrived
	release chan struct{}
	srv     *http.Server
	ln      net.Listener
}

func startDNSInstance(t *testing.T, addr string) *dnsInstance {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return serveDNSInstance(t, ln)
}

// serveDNSInstance is startDNSInstance on the listener ln.
func serveDNSInstance(t *testing.T, ln net.Listener) *dnsInstance {
	t.Helper()
	addr := ln.Addr().String()
	in := &dnsInstance{holding: make(chan struct{}, 1), release: make(chan struct{}), ln: ln}
	in.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			in.holding <- struct{}{}
			<-in.release
		}
		in.served.Add(1)
		w.Header().Set("X-Request-Id", r.Header.Get("X-Request-Id"))
		_, _ = io.WriteString(w, `{"instance":"`+addr+`"}`)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = in.srv.Serve(ln) }()
	t.Cleanup(func() { _ = in.srv.Close() })
	return in
}

// twoLoopbackInstances starts instances on 127.0.0.1 and 127.0.0.2 at one
// port, as two pods of a headless Service are one name's addresses at
// one port.
func twoLoopbackInstances(t *testing.T) (port int, a, b *dnsInstance) {
	t.Helper()
	lnA, lnB, ok := listenPair(t, "127.0.0.1", "127.0.0.2")
	if !ok {
		t.Skip("no port free on both 127.0.0.1 and 127.0.0.2")
	}
	return lnA.Addr().(*net.TCPAddr).Port, serveDNSInstance(t, lnA), serveDNSInstance(t, lnB)
}

// listenPair listens on hostA and hostB at one port, found free on both:
// the second is bound while the first is held, so that no other test or
// process can take the port between them. ok is false when 20 ports
// tried were taken on hostB (or hostA cannot be listened on at all).
func listenPair(t *testing.T, hostA, hostB string) (lnA, lnB net.Listener, ok bool) {
	t.Helper()
	for range 20 {
		a, err := net.Listen("tcp", net.JoinHostPort(hostA, "0"))
		if err != nil {
			return nil, nil, false
		}
		port := strconv.Itoa(a.Addr().(*net.TCPAddr).Port)
		b, err := net.Listen("tcp", net.JoinHostPort(hostB, port))
		if err != nil {
			a.Close()
			continue
		}
		return a, b, true
	}
	return nil, nil, false
}

// TestDNSDiscoveryAddsInstance runs exgate with its default service found
// in DNS, served by a DNS server on loopback: an instance added to the
// name while exgate runs receives traffic without a reload; a failing
// DNS server, and an answer with no address, keep the instances; an
// instance removed from the name finishes the request it holds and gets
// no other.
func TestDNSDiscoveryAddsInstance(t *testing.T) {
	dns := dnstest.Start(t)
	port, a, b := twoLoopbackInstances(t)
	ipA, ipB := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
	dns.SetAddrs("backend.test.", ipA)

	cfg := config.Default()
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Server.DrainDelay = 0
	cfg.Upstream.DNS = config.Discovery{Name: "backend.test.", Port: port, Scheme: "http", Interval: 50 * time.Millisecond, Resolver: dns.Addr}
	cfg.Upstream.Outlier.MaxEjectionPercent = 0 // this test is about DNS alone
	cfg.Routes = []config.Route{{Name: "any", Match: config.Match{Path: "*"}, Auth: config.AuthNone}}
	app := startApp(t, cfg, deps{log: zap.NewNop(), now: time.Now})
	base := "http://" + app.addr

	get := func(path string) int {
		t.Helper()
		code, _, body := call(t, "GET", base+path, "")
		if code != 200 {
			t.Fatalf("GET %s: %d %s", path, code, body)
		}
		return code
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within a minute", what)
			}
		}
	}
	waitFor("the first lookup", func() bool {
		code, _, _ := call(t, "GET", base+"/x", "")
		return code == 200
	})
	for range 20 {
		get("/x")
	}
	if b.served.Load() != 0 {
		t.Fatalf("127.0.0.2 served %d requests before DNS named it", b.served.Load())
	}

	dns.SetAddrs("backend.test.", ipA, ipB)
	waitFor("the added instance receiving requests", func() bool { get("/x"); return b.served.Load() > 0 })

	lookups := func(result string) float64 {
		return sumMetric(scrapeAdmin(t, app.adminAd), "exgate_upstream_dns_lookups_total", `result="`+result+`"`)
	}
	dns.Fail(true)
	failed := lookups("error")
	waitFor("failed lookups counted", func() bool { return lookups("error") >= failed+3 })
	dns.Fail(false)
	dns.SetAddrs("backend.test.")
	empty := lookups("empty")
	waitFor("empty answers counted", func() bool { return lookups("empty") >= empty+3 })
	a0, b0 := a.served.Load(), b.served.Load()
	for range 40 {
		get("/x")
	}
	if a.served.Load() == a0 || b.served.Load() == b0 {
		t.Fatalf("after failed and empty lookups, 40 requests went %d to 127.0.0.1 and %d to 127.0.0.2: an instance was dropped",
			a.served.Load()-a0, b.served.Load()-b0)
	}

	dns.SetAddrs("backend.test.", ipA, ipB)
	var slow sync.WaitGroup
	slow.Add(1)
	var slowCode int
	go func() {
		defer slow.Done()
		slowCode, _, _ = call(t, "GET", base+"/slow", "")
	}()
	var held, other *dnsInstance
	var heldIP, otherIP netip.Addr
	select {
	case <-a.holding:
		held, other, heldIP, otherIP = a, b, ipA, ipB
	case <-b.holding:
		held, other, heldIP, otherIP = b, a, ipB, ipA
	case <-time.After(time.Minute):
		t.Fatal("the slow request reached no instance within a minute")
	}
	dns.SetAddrs("backend.test.", otherIP)
	waitFor(heldIP.String()+" out of the rotation", func() bool {
		h0, o0 := held.served.Load(), other.served.Load()
		for range 10 {
			get("/x")
		}
		return held.served.Load() == h0 && other.served.Load() == o0+10
	})
	close(held.release)
	close(other.release)
	slow.Wait()
	if slowCode != 200 {
		t.Fatalf("the request held by the removed instance was answered %d, want 200", slowCode)
	}
}

// sumMetric sums the samples of name in a Prometheus text exposition
// whose labels contain every one of labels.
func sumMetric(text, name string, labels ...string) float64 {
	total := 0.0
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		match := true
		for _, l := range labels {
			match = match && strings.Contains(rest, l)
		}
		f := strings.Fields(rest)
		var v float64
		if _, err := fmt.Sscan(f[len(f)-1], &v); match && err == nil {
			total += v
		}
	}
	return total
}

// startDNSGateway starts exgate with its default service found through
// dns (resolver: srv) and one route for any request.
func startDNSGateway(t *testing.T, srv *dnstest.Server, d config.Discovery) string {
	t.Helper()
	cfg := config.Default()
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Server.DrainDelay = 0
	d.Scheme, d.Interval, d.Resolver = "http", 50*time.Millisecond, srv.Addr
	cfg.Upstream.DNS = d
	cfg.Routes = []config.Route{{Name: "any", Match: config.Match{Path: "*"}, Auth: config.AuthNone}}
	a := startApp(t, cfg, deps{log: zap.NewNop(), now: time.Now})
	base := "http://" + a.addr
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if code, _, _ := call(t, "GET", base+"/x", ""); code == 200 {
			return base
		}
		if time.Now().After(deadline) {
			t.Fatal("no instance found in DNS within a minute")
		}
	}
}

// port returns the instance's port.
func (in *dnsInstance) port() uint16 { return uint16(in.ln.Addr().(*net.TCPAddr).Port) }

// startSRVGateway starts a gateway whose default service's instances are
// the records of _http._tcp.backend.test., of targets lo.test. (127.0.0.1).
func startSRVGateway(t *testing.T, records ...dnstest.SRV) string {
	t.Helper()
	dns := dnstest.Start(t)
	dns.SetAddrs("lo.test.", netip.MustParseAddr("127.0.0.1"))
	dns.SetSRV("_http._tcp.backend.test.", records...)
	return startDNSGateway(t, dns, config.Discovery{SRV: "_http._tcp.backend.test."})
}

// TestDNSDiscoverySRVWeights: SRV records name two instances on one
// address at their own ports, weighing 3 and 1; sent one at a time (an
// idle fleet), requests follow the weights (generous bounds).
func TestDNSDiscoverySRVWeights(t *testing.T) {
	heavy, light := startDNSInstance(t, "127.0.0.1:0"), startDNSInstance(t, "127.0.0.1:0")
	base := startSRVGateway(t,
		dnstest.SRV{Priority: 1, Weight: 3, Port: heavy.port(), Target: "lo.test."},
		dnstest.SRV{Priority: 1, Weight: 1, Port: light.port(), Target: "lo.test."},
		dnstest.SRV{Priority: 2, Weight: 100, Port: 1, Target: "lo.test."}, // a backup: never used
	)
	h0, l0 := heavy.served.Load(), light.served.Load()
	const n = 400
	for range n {
		if code, _, body := call(t, "GET", base+"/x", ""); code != 200 {
			t.Fatalf("GET: %d %s", code, body)
		}
	}
	// 300 and 100 expected; the binomial's standard deviation is 9.
	if h, l := heavy.served.Load()-h0, light.served.Load()-l0; h < 240 || h > 360 || h+l != n {
		t.Errorf("SRV weights 3:1: %d requests to the heavy instance, %d to the light one", h, l)
	}
}

// TestDNSDiscoverySRVFailover: SRV records of priority 1 and 2 name a
// primary and a backup; requests go to the primary alone, and once it
// stops accepting connections (ejected), to the backup.
func TestDNSDiscoverySRVFailover(t *testing.T) {
	primary, backup := startDNSInstance(t, "127.0.0.1:0"), startDNSInstance(t, "127.0.0.1:0")
	base := startSRVGateway(t,
		dnstest.SRV{Priority: 1, Weight: 1, Port: primary.port(), Target: "lo.test."},
		dnstest.SRV{Priority: 2, Weight: 1, Port: backup.port(), Target: "lo.test."},
	)
	for range 50 {
		if code, _, body := call(t, "GET", base+"/x", ""); code != 200 {
			t.Fatalf("GET: %d %s", code, body)
		}
	}
	if n := backup.served.Load(); n != 0 {
		t.Fatalf("the backup served %d requests while the primary was healthy", n)
	}
	_ = primary.srv.Close()
	for deadline := time.Now().Add(time.Minute); backup.served.Load() == 0; time.Sleep(10 * time.Millisecond) {
		_, _, _ = call(t, "GET", base+"/x", "")
		if time.Now().After(deadline) {
			t.Fatal("no request reached the backup within a minute of the primary's end")
		}
	}
	for range 20 {
		if code, _, body := call(t, "GET", base+"/x", ""); code != 200 {
			t.Fatalf("GET after the failover: %d %s", code, body)
		}
	}
}

// TestDNSDiscoveryAAndAAAA: a name's A and AAAA records are two instances,
// one over IPv4 and one over IPv6, at one port.
func TestDNSDiscoveryAAndAAAA(t *testing.T) {
	ln6, ln4, ok := listenPair(t, "::1", "127.0.0.1")
	if !ok {
		t.Skip("no IPv6 loopback, or no port free on both ::1 and 127.0.0.1")
	}
	port := ln6.Addr().(*net.TCPAddr).Port
	v6, v4 := serveDNSInstance(t, ln6), serveDNSInstance(t, ln4)
	dns := dnstest.Start(t)
	dns.SetAddrs("backend.test.", netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1"))
	base := startDNSGateway(t, dns, config.Discovery{Name: "backend.test.", Port: port})
	for deadline := time.Now().Add(time.Minute); v4.served.Load() == 0 || v6.served.Load() == 0; {
		if code, _, body := call(t, "GET", base+"/x", ""); code != 200 {
			t.Fatalf("GET: %d %s", code, body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("within a minute: %d requests over IPv4, %d over IPv6; want both", v4.served.Load(), v6.served.Load())
		}
	}
}
