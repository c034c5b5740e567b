package config

import (
	"net"
	"strconv"
	"time"
)

// Discovery finds a service's instances in DNS instead of a list of
// URLs, looked up again every Interval without a reload: the addresses
// of Name (A and AAAA records, such as a Kubernetes headless Service's)
// at Port, or the targets, ports and weights of SRV's records. A failed
// lookup, or one that names no instance, keeps the instances last found.
type Discovery struct {
	// Name is the name whose A and AAAA records are the instances'
	// addresses, such as "orders.trading.svc.cluster.local". Either Name
	// (with Port) or SRV. Default "" (no discovery).
	Name string `yaml:"name"`
	// Port is the instances' port, with Name. Default 0.
	Port int `yaml:"port"`
	// SRV is the name whose SRV records are the instances, such as
	// "_http._tcp.orders.trading.svc.cluster.local": each target's
	// addresses at the record's port, with its weight; only the records
	// of the lowest priority. Default "".
	SRV string `yaml:"srv"`
	// Scheme is the instances' scheme, "http" or "https" (then dialled
	// with upstream.tls; the server name defaults to Name, or SRV's name
	// without its _service._proto labels). Default "http".
	Scheme string `yaml:"scheme"`
	// Interval is the time between lookups; the records' TTLs are not
	// read (Go's resolver does not give them). Default 5s.
	Interval time.Duration `yaml:"interval"`
	// Resolver is the DNS server asked, host:port; "" means the system's
	// (/etc/resolv.conf). Default "".
	Resolver string `yaml:"resolver"`
}

// defaultDiscovery returns the discovery defaults: off, and once a name
// is given, plain HTTP, looked up every 5s through the system's resolver.
func defaultDiscovery() Discovery { return Discovery{Scheme: "http", Interval: 5 * time.Second} }

// On reports whether the service's instances come from DNS.
func (d *Discovery) On() bool { return d.Name != "" || d.SRV != "" }

// check reports problems in the discovery settings at p; urls is the
// path of the service's list of URLs when it has one ("" when not).
func (d *Discovery) check(col *collector, p path, urls path) {
	col.oneOf(p.key("scheme"), d.Scheme, "http", "https")
	col.positive(p.key("interval"), d.Interval)
	if d.Resolver != "" {
		if host, port, err := net.SplitHostPort(d.Resolver); err != nil || host == "" || !isPort(port) {
			col.addf(p.key("resolver"), "want host:port of a DNS server, such as \"10.96.0.10:53\", got %q", d.Resolver)
		}
	}
	switch {
	case !d.On():
		if d.Port != 0 {
			col.addf(p.key("port"), "set without %s", p.key("name"))
		}
		return
	case d.Name != "" && d.SRV != "":
		col.addf(p.key("srv"), "set with %s: give one (SRV records carry their ports)", p.key("name"))
	case d.Name != "" && (d.Port < 1 || d.Port > 65535):
		col.addf(p.key("port"), "want the instances' port (1-65535) with %s, got %d", p.key("name"), d.Port)
	case d.SRV != "" && d.Port != 0:
		col.addf(p.key("port"), "set with %s, whose records carry their ports", p.key("srv"))
	}
	if urls != "" {
		col.addf(p, "set with %s: the instances come from one or the other", urls)
	}
}

// isPort reports whether s is a port number from 1 to 65535.
func isPort(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= 1 && n <= 65535
}
