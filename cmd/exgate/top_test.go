package main

import (
	"context"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/limiter"
)

// dnsRecords are what a test DNS server answers for one name.
type dnsRecords struct {
	addrs []netip.Addr
	srv   []net.SRV
}

// serveDNS answers A, AAAA and SRV queries from zone over UDP on
// loopback until the test ends (NXDOMAIN for any other name), and
// returns a resolver that asks it: Go's own resolver, as `exgate top`
// uses it, pointed at this server instead of /etc/resolv.conf's.
func serveDNS(t *testing.T, zone map[string]dnsRecords) *net.Resolver {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if answer, err := dnsAnswer(buf[:n], zone); err == nil {
				_, _ = pc.WriteTo(answer, from)
			}
		}
	}()
	addr := pc.LocalAddr().String()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", addr)
	}}
}

// dnsAnswer builds the answer to the query q from zone.
func dnsAnswer(q []byte, zone map[string]dnsRecords) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil {
		return nil, err
	}
	question, err := p.Question()
	if err != nil {
		return nil, err
	}
	recs, ok := zone[strings.ToLower(question.Name.String())]
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
	if !ok {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(question); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	hdr := dnsmessage.ResourceHeader{Name: question.Name, Class: dnsmessage.ClassINET, TTL: 5}
	for _, a := range recs.addrs {
		switch {
		case question.Type == dnsmessage.TypeA && a.Is4():
			err = b.AResource(hdr, dnsmessage.AResource{A: a.As4()})
		case question.Type == dnsmessage.TypeAAAA && a.Is6():
			err = b.AAAAResource(hdr, dnsmessage.AAAAResource{AAAA: a.As16()})
		}
		if err != nil {
			return nil, err
		}
	}
	if question.Type == dnsmessage.TypeSRV {
		for _, s := range recs.srv {
			target, err := dnsmessage.NewName(s.Target)
			if err != nil {
				return nil, err
			}
			if err := b.SRVResource(hdr, dnsmessage.SRVResource{Priority: s.Priority, Weight: s.Weight, Port: s.Port, Target: target}); err != nil {
				return nil, err
			}
		}
	}
	return b.Finish()
}

// startTopReplicas starts TestTopFindsReplicasThroughDNS's replicas,
// exgate-0 and exgate-1, their admin listeners at one port of 127.0.0.1
// and 127.0.0.2, and sends each 5 market reads of one token, 3 allowed.
// The port is the one the kernel finds free for exgate-0; exgate-1 is
// started again beside another exgate-0 when a listener at 127.0.0.2
// holds it (a port found free for both beforehand could be taken by
// another process before they bind it). It returns the port.
func startTopReplicas(t *testing.T) int {
	t.Helper()
	replica := func(i int, admin string) (*app, error) {
		return tryStartStack(t, func(c *config.Config) {
			c.AdminListen = admin
			c.Replica = "exgate-" + strconv.Itoa(i)
			c.Route("list_markets").Limits[1].Rate = config.Rate{N: 3, Period: time.Minute}
			c.Route("list_markets").Limits[1].Burst = 3
			c.Log.Access = false
		}, func(k string) (string, bool) {
			if k == adminTokenEnv {
				return testAdminToken, true
			}
			return secretEnv(k)
		})
	}
	for attempt := 0; ; attempt++ {
		first, err := replica(0, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(first.adminAd)
		second, err := replica(1, net.JoinHostPort("127.0.0.2", port))
		if err != nil {
			if attempt < 9 && strings.Contains(err.Error(), "admin listen") {
				continue
			}
			t.Fatal(err)
		}
		for _, st := range []*app{first, second} {
			for range 5 {
				get(t, "http://"+st.addr+"/api/v1/mkt/markets/", "Authorization", "Bearer hot-token")
			}
		}
		p, _ := strconv.Atoi(port)
		return p
	}
}

// TestTopFindsReplicasThroughDNS: two replicas, named by their replica
// setting, on one admin port at 127.0.0.1 and 127.0.0.2, as a Kubernetes
// headless Service's records name pods. `exgate top` finds them through
// the name's A records (-dns) and through SRV records (-srv), lists each
// replica by name, counts a process reached at two addresses once, says
// which replica did not answer, and adds the others' counts.
func TestTopFindsReplicasThroughDNS(t *testing.T) {
	port := startTopReplicas(t)
	k, _ := limiter.NewKeyer([]byte(keySecret))
	hot := k.ID("hot-token")[:12]
	ip := netip.MustParseAddr
	p := uint16(port)
	res := serveDNS(t, map[string]dnsRecords{
		"exgate-admin.exgate.test.": {addrs: []netip.Addr{ip("127.0.0.1"), ip("127.0.0.2")}},
		"_admin._tcp.exgate-admin.exgate.test.": {srv: []net.SRV{
			{Target: "pod-0.exgate.test.", Port: p}, {Target: "pod-1.exgate.test.", Port: p},
			{Target: "pod-0-again.exgate.test.", Port: p}, {Target: "pod-gone.exgate.test.", Port: p},
		}},
		"pod-0.exgate.test.":       {addrs: []netip.Addr{ip("127.0.0.1")}},
		"pod-0-again.exgate.test.": {addrs: []netip.Addr{ip("127.0.0.1")}},
		"pod-1.exgate.test.":       {addrs: []netip.Addr{ip("127.0.0.2")}},
		"pod-gone.exgate.test.":    {addrs: []netip.Addr{ip("127.0.0.3")}},
	})
	env := func(key string) (string, bool) {
		if key == adminTokenEnv {
			return testAdminToken, true
		}
		return "", false
	}
	sums := regexp.MustCompile(`(?s)BY REFUSED\n.*\nlist_markets +token +` + hot + ` +4 +0\n.*BY REQUESTS\n.*\nlist_markets +token +` + hot + ` +10 +0\n`)
	ps := strconv.Itoa(port)
	for _, tc := range []struct {
		name  string
		args  []string
		code  int
		lines []string // lines the replica list holds
	}{
		{"A records", []string{"-dns", "exgate-admin.exgate.test.:" + ps}, 0, []string{
			`exgate-0 +http://127.0.0.1:` + ps + ` +ok`, `exgate-1 +http://127.0.0.2:` + ps + ` +ok`}},
		{"SRV records, one replica gone, one also by name", []string{"-srv", "_admin._tcp.exgate-admin.exgate.test.", "-admin", "http://localhost:" + ps}, 1, []string{
			`exgate-0 +http://localhost:` + ps + ` +ok`,
			`exgate-0 +http://127.0.0.1:` + ps + ` +the same process as http://localhost:` + ps + ` \(counted once\)`,
			`exgate-1 +http://127.0.0.2:` + ps + ` +ok`,
			`\? +http://127.0.0.3:` + ps + ` +dial tcp 127.0.0.3:` + ps + `: connect: connection refused`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut strings.Builder
			args := append([]string{"-window", "1"}, tc.args...)
			if code := runTop(context.Background(), args, env, &out, &errOut, res); code != tc.code {
				t.Fatalf("exit code %d, want %d: %s\n%s", code, tc.code, errOut.String(), out.String())
			}
			if tc.code == 1 && !strings.Contains(errOut.String(), "1 of 4 admin listeners did not answer") {
				t.Errorf("stderr: %s", errOut.String())
			}
			for _, l := range tc.lines {
				if !regexp.MustCompile(`(?m)^` + l + `$`).MatchString(out.String()) {
					t.Errorf("no line %q in:\n%s", l, out.String())
				}
			}
			if !sums.MatchString(out.String()) || !strings.Contains(out.String(), "2 replicas, last 1 minute (sliding: the last 1m") {
				t.Errorf("the fleet's sums:\n%s", out.String())
			}
		})
	}
	var out, errOut strings.Builder
	if code := runTop(context.Background(), []string{"-dns", "nowhere.exgate.test.:9090"}, env, &out, &errOut, res); code != 1 ||
		!strings.Contains(errOut.String(), "-dns nowhere.exgate.test.:9090: ") {
		t.Errorf("a name that does not resolve: %d %s", code, errOut.String())
	}
}
