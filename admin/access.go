package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/exgate/exgate/apierror"
	"github.com/exgate/exgate/proxy"
)

// adminAccess decides who may use the admin listener: a request must
// name a Host the listener answers to (no DNS-rebinding page reads the
// console, /readyz's check errors or /metrics through a browser on an
// operator's machine), and for the console's API and pprof carry the
// admin token when one is set. /healthz, which holds nothing, passes
// both; /readyz and /metrics, for probes and scrapers, need no token.
type adminAccess struct {
	token    [sha256.Size]byte // SHA-256 of the token, compared in constant time
	hasToken bool
	// closed refuses the console and pprof while no token is set (the
	// listener is reachable beyond loopback).
	closed bool
	hosts  map[string]bool
	// tokenVar names the variable the token is read from.
	tokenVar string

	errToken, errClosed, errResetDisabled, errCrossSite *apierror.Error
}

func newAdminAccess(o Options) *adminAccess {
	tokenVar := o.TokenEnv
	if tokenVar == "" {
		tokenVar = "EXGATE_ADMIN_TOKEN"
	}
	a := &adminAccess{
		hasToken: o.Token != "",
		closed:   o.RequireToken && o.Token == "",
		hosts:    map[string]bool{},
		tokenVar: tokenVar,
		errToken: apierror.Static(http.StatusUnauthorized, "not_authenticated",
			"The admin API needs the admin bearer token.", "WWW-Authenticate", `Bearer realm="exgate admin"`),
		errClosed: apierror.Static(http.StatusForbidden, "admin_token_required",
			"The admin listener is reachable beyond loopback and no admin token is set: set "+tokenVar+
				" (admin.token_env) to use the console and pprof here."),
		errResetDisabled: apierror.Static(http.StatusForbidden, "reset_disabled",
			"Reset needs an admin token ("+tokenVar+")."),
		errCrossSite: apierror.Static(http.StatusForbidden, "cross_site_refused",
			"The admin API and pprof answer a browser only from the console's own page or an address typed in, "+
				"not a request another site's page sent."),
	}
	if a.hasToken {
		a.token = sha256.Sum256([]byte(o.Token))
	}
	for _, h := range o.AllowedHosts {
		a.hosts[normalHost(h)] = true
	}
	return a
}

// authorized reports whether r carries the admin token (true when none
// is set). Both sides are hashed first, so the comparison takes the
// same time whatever the length of what was sent.
func (a *adminAccess) authorized(r *http.Request) bool {
	if !a.hasToken {
		return true
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	sum := sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(sum[:], a.token[:]) == 1 && ok
}

// hostAllowed reports whether the listener answers a request for host
// (the Host header, with or without a port): an absent Host (HTTP/1.0:
// no browser), an IP address (a page can reach a literal address only
// from its own origin, which is this listener), localhost and names
// under .localhost (browsers resolve them to loopback themselves), or a
// configured name.
func (a *adminAccess) hostAllowed(host string) bool {
	if host == "" {
		return true
	}
	if h, port, err := net.SplitHostPort(host); err == nil {
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return false
		}
		host = h
	}
	host = normalHost(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	return host == "localhost" || strings.HasSuffix(host, ".localhost") || a.hosts[host]
}

// normalHost is a host name as compared: lower case, without a final dot.
func normalHost(h string) string { return strings.ToLower(strings.TrimSuffix(h, ".")) }

// hostRefused is the answer to a request for a Host the listener does
// not answer to.
func hostRefused(host string) *apierror.Error {
	return apierror.New(http.StatusForbidden, "host_not_allowed",
		"This admin listener does not answer to Host "+strconv.Quote(host)+
			": use its address, localhost, or a name in admin.allowed_hosts.")
}

// crossSite reports whether r is a browser's request that another
// origin's page sent (an image, a fetch, a form): Sec-Fetch-Site other
// than same-origin or none (an address typed in, a bookmark), or, from a
// browser that sends no Sec-Fetch-Site, an Origin that is not the
// listener's own (scheme aside: the listener's Host, as the browser
// named it). Such a request is unread by its page, but pprof's and the
// console's cost is paid all the same (a CPU profile, a forced
// collection, a stop-the-world goroutine dump). Tools send neither
// header.
func crossSite(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin", "none":
		return false
	case "":
		o := r.Header.Get("Origin")
		if o == "" {
			return false
		}
		u, err := url.Parse(o)
		return err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host)
	}
	return true
}

// page guards what needs no token (the console's page, /readyz,
// /metrics): the Host check only. Probes and scrapers name the listener
// by its address (the kubelet, a balancer, Prometheus's service
// discovery), send no Host (HAProxy's HTTP/1.0 check) or a name the
// operator lists.
func (a *adminAccess) page(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !a.hostAllowed(r.Host) {
			proxy.WriteError(w, "", hostRefused(r.Host))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// api guards the console's API and pprof: the Host check, a browser's
// request from another origin refused, then the admin token (or,
// without one on a listener beyond loopback, a refusal).
func (a *adminAccess) api(h http.Handler) http.Handler {
	return a.page(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case crossSite(r):
			proxy.WriteError(w, "", a.errCrossSite)
		case a.closed:
			proxy.WriteError(w, "", a.errClosed)
		case !a.authorized(r):
			proxy.WriteError(w, "", a.errToken)
		default:
			h.ServeHTTP(w, r)
		}
	}))
}
