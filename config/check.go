package config

import (
	"fmt"
	"io"
	"net/netip"
)

// Checked is a configuration checked as `exgate check-config` reports it:
// the configuration as decoded and every problem found in it, to which
// the caller adds those of the files it names, and warnings about
// settings that are valid but unsafe.
type Checked struct {
	// Config is the configuration as decoded: a value that could not be
	// decoded keeps its default. Nil only when the document is too large
	// to read.
	Config *Config
	col    *collector
	src    *sources
	warns  Errors
}

// Check parses data as Parse does, and keeps the configuration and its
// problems together, so that the files it names can be checked too in
// the same pass (AddProblem) even when the YAML has problems of its own.
func Check(name string, data []byte, getenv func(string) (string, bool)) *Checked {
	c, col := parse(name, data, getenv)
	ch := &Checked{Config: c, col: col, src: col.src}
	if c != nil {
		ch.warns = c.warnings(col.src)
	}
	return ch
}

// CheckFile reads the file at path once (ReadFile) and checks it (Check);
// a file that cannot be read is the one problem. Path "" checks the
// defaults and the environment.
func CheckFile(path string, getenv func(string) (string, bool)) *Checked {
	if path == "" {
		return Check("", nil, getenv)
	}
	data, err := ReadFile(path)
	if err != nil {
		ch := &Checked{col: &collector{}}
		for _, fe := range err.(Errors) {
			ch.col.add(fe)
		}
		return ch
	}
	return Check(path, data, getenv)
}

// Problems returns every problem found, in the order found (the YAML's,
// the environment's, the sections' checks, then those added), or nil.
func (c *Checked) Problems() Errors {
	es, _ := c.col.result().(Errors)
	return es
}

// Warnings returns the settings that are valid but let anyone who
// reaches exgate choose the client address it counts them as (a trusted
// proxy or PROXY protocol peer prefix of every address, or of more
// addresses than a set of load balancers has), and keys set by a former
// name (limiter.backend, idempotency.backend).
func (c *Checked) Warnings() Errors { return c.warns }

// Has reports whether a problem was found at path, within it, or at a
// path that contains it (a problem of the whole section).
func (c *Checked) Has(path string) bool {
	for _, fe := range c.col.errs {
		if fe.Path == "" || within(path, fe.Path) || within(fe.Path, path) {
			return true
		}
	}
	return false
}

// AddProblem records a problem found outside the loader, such as a file
// the configuration names that cannot be read, at its YAML path, with the
// line or variable the path's value came from.
func (c *Checked) AddProblem(path, msg string) {
	fe := &FieldError{Path: path, Msg: msg}
	if c.src != nil {
		c.src.annotate(fe)
	}
	c.col.add(fe)
}

// Report writes every problem, one a line, then every warning, each after
// "warning: ", and "ok" when there was no problem; it reports whether
// there was none.
func (c *Checked) Report(w io.Writer) (ok bool) {
	problems := c.Problems()
	for _, fe := range problems {
		fmt.Fprintln(w, fe.Error())
	}
	for _, fe := range c.warns {
		fmt.Fprintln(w, "warning: "+fe.Error())
	}
	if len(problems) > 0 {
		return false
	}
	fmt.Fprintln(w, "ok")
	return true
}

// Widest trusted prefixes that do not warn: a set of load balancers or
// proxies fits in a /16 of IPv4 or a /48 of IPv6; wider, every other host
// in the prefix can name any client address too.
const (
	widestTrustedV4 = 16
	widestTrustedV6 = 48
)

// warnings lists the trusted prefixes that let clients choose their
// address, and the former names set (Checked.Warnings), annotated by src.
func (c *Config) warnings(src *sources) Errors {
	var out Errors
	add := func(p path, pr Prefix, header, who string) {
		var msg string
		switch {
		case !pr.IsValid():
			return
		case pr.Bits() == 0:
			msg = fmt.Sprintf("%s trusts every address: any client can send %s naming any address, and is limited and logged as that address; list only your %s", pr, header, who)
		case pr.Addr().Is4() && pr.Bits() < widestTrustedV4, pr.Addr().Is6() && pr.Bits() < widestTrustedV6:
			msg = fmt.Sprintf("%s trusts %s addresses: any host in it can send %s naming any address, and is limited and logged as that address; narrow it to your %s", pr, prefixSize(pr.Prefix), header, who)
		default:
			return
		}
		fe := &FieldError{Path: string(p), Msg: msg}
		if src != nil {
			src.annotate(fe)
		}
		out = append(out, fe)
	}
	header := "an X-Forwarded-For"
	if c.ClientIP.Header == HeaderForwarded {
		header = "a Forwarded header"
	}
	for i, pr := range c.ClientIP.TrustedProxies {
		add(path("client_ip").key("trusted_proxies").index(i), pr, header, "proxies' addresses")
	}
	for i, pr := range c.Server.ProxyProtocol.TrustedPeers {
		add(path("server").key("proxy_protocol").key("trusted_peers").index(i), pr, "a PROXY protocol header", "load balancers' addresses")
	}
	for _, section := range []struct {
		p       path
		backend string
	}{{"limiter", c.Limiter.Backend}, {"idempotency", c.Idempotency.Backend}} {
		if section.backend == "" {
			continue
		}
		fe := &FieldError{Path: string(section.p.key("backend")), Msg: fmt.Sprintf("is the former name of %s, read still: rename it", section.p.key("store"))}
		if src != nil {
			src.annotate(fe)
		}
		out = append(out, fe)
	}
	return out
}

// prefixSize says how many addresses p holds: "16777216", or "2^80".
func prefixSize(p netip.Prefix) string {
	host := p.Addr().BitLen() - p.Bits()
	if host < 63 {
		return fmt.Sprint(uint64(1) << host)
	}
	return fmt.Sprintf("2^%d", host)
}
