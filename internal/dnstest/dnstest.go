// Package dnstest serves a zone that a test changes as it runs, from a
// real DNS server (github.com/miekg/dns) on loopback, over UDP and TCP:
// the A, AAAA and SRV records a service's instances are found by.
package dnstest

import (
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/miekg/dns"
)

// SRV is one SRV record's data.
type SRV struct {
	Priority, Weight, Port uint16
	Target                 string
}

// Server is a DNS server for one test. Names are fully qualified ("a.test.");
// a name it holds no records for is answered NXDOMAIN.
type Server struct {
	// Addr is the server's address (127.0.0.1:port, the same port over
	// UDP and TCP).
	Addr string

	mu    sync.Mutex
	addrs map[string][]netip.Addr
	srvs  map[string][]SRV
	fail  bool
	// failing holds the names answered SERVFAIL (FailName).
	failing map[string]bool
	// failingType holds the questions of a name and type answered
	// SERVFAIL (FailType).
	failingType map[dns.Question]bool
	// Queries counts the questions answered.
	Queries atomic.Int64
}

// Start serves an empty zone until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{addrs: map[string][]netip.Addr{}, srvs: map[string][]SRV{}, failing: map[string]bool{},
		failingType: map[dns.Question]bool{}}
	pc, ln, err := listenPair()
	if err != nil {
		t.Fatal(err)
	}
	s.Addr = pc.LocalAddr().String()
	udp := &dns.Server{PacketConn: pc, Handler: s}
	tcp := &dns.Server{Listener: ln, Handler: s}
	go func() { _ = udp.ActivateAndServe() }()
	go func() { _ = tcp.ActivateAndServe() }()
	t.Cleanup(func() {
		_ = udp.Shutdown()
		_ = tcp.Shutdown()
	})
	return s
}

// SetAddrs makes addrs the A and AAAA records of name (none: NXDOMAIN).
func (s *Server) SetAddrs(name string, addrs ...netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addrs[dns.Fqdn(strings.ToLower(name))] = addrs
}

// SetSRV makes recs the SRV records of name.
func (s *Server) SetSRV(name string, recs ...SRV) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.srvs[dns.Fqdn(strings.ToLower(name))] = recs
}

// Fail makes the server answer SERVFAIL to every question while on.
func (s *Server) Fail(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = on
}

// FailName makes the server answer SERVFAIL to every question about
// name while on, and the others from the zone.
func (s *Server) FailName(name string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failing[dns.Fqdn(strings.ToLower(name))] = on
}

// FailType makes the server answer SERVFAIL to the questions of one
// record type ("A", "AAAA", "SRV") about name while on, and the others
// from the zone: a server that fails one address family.
func (s *Server) FailType(name, rtype string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := dns.Question{Name: dns.Fqdn(strings.ToLower(name)), Qtype: dns.StringToType[rtype], Qclass: dns.ClassINET}
	s.failingType[q] = on
}

// ServeDNS answers one query from the zone.
func (s *Server) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	s.Queries.Add(1)
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	s.mu.Lock()
	if s.fail {
		m.Rcode = dns.RcodeServerFailure
	} else {
		for _, q := range req.Question {
			s.answer(m, q)
		}
	}
	s.mu.Unlock()
	_ = w.WriteMsg(m)
}

// answer adds the records of q to m, or sets NXDOMAIN when the zone
// holds no record of q's name.
func (s *Server) answer(m *dns.Msg, q dns.Question) {
	name := strings.ToLower(q.Name)
	if s.failing[name] || s.failingType[dns.Question{Name: name, Qtype: q.Qtype, Qclass: q.Qclass}] {
		m.Rcode = dns.RcodeServerFailure
		return
	}
	addrs, hasAddrs := s.addrs[name]
	srvs, hasSRV := s.srvs[name]
	if !hasAddrs && !hasSRV || len(addrs) == 0 && len(srvs) == 0 {
		m.Rcode = dns.RcodeNameError
		return
	}
	hdr := func(t uint16) dns.RR_Header {
		return dns.RR_Header{Name: q.Name, Rrtype: t, Class: dns.ClassINET, Ttl: 1}
	}
	switch q.Qtype {
	case dns.TypeA, dns.TypeAAAA:
		for _, a := range addrs {
			switch {
			case a.Is4() && q.Qtype == dns.TypeA:
				m.Answer = append(m.Answer, &dns.A{Hdr: hdr(dns.TypeA), A: a.AsSlice()})
			case a.Is6() && q.Qtype == dns.TypeAAAA:
				m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr(dns.TypeAAAA), AAAA: a.AsSlice()})
			}
		}
	case dns.TypeSRV:
		for _, r := range srvs {
			m.Answer = append(m.Answer, &dns.SRV{Hdr: hdr(dns.TypeSRV), Priority: r.Priority, Weight: r.Weight, Port: r.Port, Target: dns.Fqdn(r.Target)})
		}
	}
}

// listenPair listens on UDP and TCP at one loopback port: a free UDP port
// may be taken for TCP by another process, so it tries a few ports.
func listenPair() (net.PacketConn, net.Listener, error) {
	var err error
	for range 50 {
		var pc net.PacketConn
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			return nil, nil, err
		}
		var ln net.Listener
		if ln, err = net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			return pc, ln, nil
		}
		pc.Close()
	}
	return nil, nil, err
}
