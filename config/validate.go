package config

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Validate normalises c and checks it, returning every problem at once as
// an Errors value, or nil when c is valid. Normalising sets a Route.Auth
// of "" to "none", a Limit.When of "" to "always", and a Burst of 0 (in
// route limits and tier limits) to the rate's N. Each problem names its
// YAML path; Validate knows nothing of files or the environment, so its
// problems carry no line numbers (Load and Parse add them).
func (c *Config) Validate() error {
	col := &collector{}
	for _, e := range c.validate() {
		col.add(e)
	}
	return col.result()
}

// checker accumulates validation problems.
type checker struct{ errs Errors }

// addf records a problem at path.
func (v *checker) addf(path, format string, args ...any) {
	v.errs = append(v.errs, &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
}

// positive reports a duration that is not greater than zero.
func (v *checker) positive(path string, d time.Duration) {
	if d <= 0 {
		v.addf(path, "must be greater than 0, got %s", d)
	}
}

// oneOf reports a value that is not one of the allowed ones.
func (v *checker) oneOf(path, s string, allowed ...string) {
	if slices.Contains(allowed, s) {
		return
	}
	q := make([]string, len(allowed))
	for i, a := range allowed {
		q[i] = strconv.Quote(a)
	}
	list := strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
	v.addf(path, "want %s, got %q%s", list, s, didYouMean(s, allowed))
}

// normalise fills in the documented meanings of zero values.
func (c *Config) normalise() {
	c.countAccounts()
	for i := range c.Routes {
		r := &c.Routes[i]
		if r.Auth == "" {
			r.Auth = AuthNone
		}
		if r.Priority == "" {
			r.Priority = defaultPriority(r)
		}
		for j := range r.Limits {
			l := &r.Limits[j]
			if l.When == "" {
				l.When = WhenAlways
			}
			if l.Name == "" {
				l.Name = defaultLimitName(r.Limits, j)
			}
			if l.Burst == 0 && l.Rate.N > 0 && l.Rate.N <= maxRateN {
				l.Burst = int(l.Rate.N)
			}
		}
	}
	for _, routes := range c.Tiers {
		for name, tl := range routes {
			if tl.Burst == 0 && tl.Rate.N > 0 && tl.Rate.N <= maxRateN {
				tl.Burst = int(tl.Rate.N)
				routes[name] = tl
			}
		}
	}
}

// defaultLimitName names limits[j], which has no name: its key, or, when
// other limits of the route count by the same key, its key and condition
// ("address_anonymous"), and its index when even that repeats.
func defaultLimitName(limits []Limit, j int) string {
	l := limits[j]
	sameKey, sameWhen := 0, 0
	for _, o := range limits {
		if o.Key == l.Key {
			sameKey++
			if o.When == l.When || o.When == "" && l.When == WhenAlways {
				sameWhen++
			}
		}
	}
	switch {
	case sameKey <= 1:
		return l.Key
	case sameWhen <= 1:
		return l.Key + "_" + l.When
	}
	return l.Key + "_" + l.When + "_" + strconv.Itoa(j)
}

// validate normalises c and returns every problem, unbounded.
func (c *Config) validate() Errors {
	c.normalise()
	v := &checker{}

	// Listeners.
	v.listenAddr("listen", c.Listen)
	v.listenAddr("admin_listen", c.AdminListen)
	if sameListener(c.Listen, c.AdminListen) {
		v.addf("admin_listen", "must differ from listen (%q)", c.Listen)
	}

	// Server.
	s := c.Server
	v.positive("server.read_header_timeout", s.ReadHeaderTimeout)
	v.positive("server.read_timeout", s.ReadTimeout)
	v.positive("server.write_timeout", s.WriteTimeout)
	v.positive("server.idle_timeout", s.IdleTimeout)
	v.positive("server.shutdown_timeout", s.ShutdownTimeout)
	if s.DrainDelay < 0 {
		v.addf("server.drain_delay", "must not be negative (0 closes at once), got %s", s.DrainDelay)
	}
	if s.MaxHeaderBytes < 1<<10 || s.MaxHeaderBytes > 1<<20 {
		v.addf("server.max_header_bytes", "must be from 1KiB to 1MiB, got %s", s.MaxHeaderBytes)
	}
	if s.MaxBodyBytes < 1 {
		v.addf("server.max_body_bytes", "must be at least 1, got %s", s.MaxBodyBytes)
	}
	if s.MaxBufferedBytes < 64<<10 {
		v.addf("server.max_buffered_bytes", "must be at least 64KiB, got %s", s.MaxBufferedBytes)
	}
	if s.WriteTimeout > 0 {
		c.checkWriteTimeout(v)
	}
	c.checkEdge(v)
	c.checkCORS(v)

	// Upstream.
	u := c.Upstream
	switch {
	case u.URL.URL == nil:
		v.addf("upstream.url", "required, such as \"http://127.0.0.1:9000\"")
	case u.URL.Scheme != "http" && u.URL.Scheme != "https" || u.URL.Host == "":
		v.addf("upstream.url", "want an absolute http or https URL, got %q", u.URL.Redacted())
	}
	v.positive("upstream.timeout", u.Timeout)
	v.positive("upstream.dial_timeout", u.DialTimeout)
	v.positive("upstream.idle_conn_timeout", u.IdleConnTimeout)
	if u.MaxIdleConns < 0 {
		v.addf("upstream.max_idle_conns", "must not be negative, got %d", u.MaxIdleConns)
	}
	if u.MaxConnsPerHost < 0 {
		v.addf("upstream.max_conns_per_host", "must not be negative (0 means no cap), got %d", u.MaxConnsPerHost)
	}

	// Client address.
	for i, p := range c.ClientIP.TrustedProxies {
		if !p.IsValid() {
			v.addf(joinIndex("client_ip.trusted_proxies", i), "not a valid IP prefix")
		}
	}
	v.oneOf("client_ip.header", c.ClientIP.Header, HeaderXForwardedFor, HeaderForwarded)
	if n := c.ClientIP.IPv6Prefix; n < 1 || n > 128 {
		v.addf("client_ip.ipv6_prefix", "must be from 1 to 128, got %d", n)
	}

	// Limiter.
	l := c.Limiter
	v.oneOf("limiter.backend", l.Backend, "", BackendRedis, BackendMemory)
	if l.Backend == BackendRedis && len(l.Redis.Addrs) == 0 {
		v.addf("limiter.redis.addrs", "required when limiter.backend is \"redis\"")
	}
	for i, a := range l.Redis.Addrs {
		v.dialAddr(joinIndex("limiter.redis.addrs", i), a)
	}
	if l.Replicas < 1 {
		v.addf("limiter.replicas", "must be at least 1, got %d", l.Replicas)
	}
	v.oneOf("limiter.on_store_error", l.OnStoreError, StoreOpen, StoreClosed, StoreLocal)
	v.envName("limiter.key_secret_env", l.KeySecretEnv)
	v.envName("limiter.redis.password_env", l.Redis.PasswordEnv)
	if t := l.Redis.Timeout; t <= 0 || t > time.Second {
		v.addf("limiter.redis.timeout", "must be greater than 0 and at most 1s, got %s", t)
	}
	v.oneOf("limiter.headers", l.Headers, HeadersIETF, HeadersLegacy, HeadersNone)
	if l.MaxKeys < 1000 {
		v.addf("limiter.max_keys", "must be at least 1000, got %d", l.MaxKeys)
	}
	if l.DenyCacheKeys < 0 {
		v.addf("limiter.deny_cache_keys", "must not be negative (0 disables the cache), got %d", l.DenyCacheKeys)
	}
	if l.TokenSpray.MaxTokens < 0 {
		v.addf("limiter.token_spray.max_tokens", "must not be negative (0 turns the check off), got %d", l.TokenSpray.MaxTokens)
	}
	if l.TokenSpray.MaxTokens > 0 && (l.TokenSpray.Window < time.Second || l.TokenSpray.Window > 366*24*time.Hour) {
		v.addf("limiter.token_spray.window", "must be from 1s to 366d, got %s", l.TokenSpray.Window)
	}
	if !l.Redis.TLS {
		for _, f := range []struct{ path, value string }{
			{"limiter.redis.tls_ca_file", l.Redis.TLSCAFile},
			{"limiter.redis.tls_cert_file", l.Redis.TLSCertFile},
			{"limiter.redis.tls_key_file", l.Redis.TLSKeyFile},
			{"limiter.redis.tls_server_name", l.Redis.TLSServerName},
		} {
			if f.value != "" {
				v.addf(f.path, "requires limiter.redis.tls: true")
			}
		}
	}
	if (l.Redis.TLSCertFile == "") != (l.Redis.TLSKeyFile == "") {
		if l.Redis.TLSCertFile == "" {
			v.addf("limiter.redis.tls_cert_file", "required with limiter.redis.tls_key_file")
		} else {
			v.addf("limiter.redis.tls_key_file", "required with limiter.redis.tls_cert_file")
		}
	}
	if l.Redis.DB < 0 {
		v.addf("limiter.redis.db", "must not be negative, got %d", l.Redis.DB)
	} else if l.Redis.DB != 0 && len(l.Redis.Addrs) > 1 && l.Redis.MasterName == "" {
		v.addf("limiter.redis.db", "must be 0 with Redis Cluster (several addrs and no master_name), got %d", l.Redis.DB)
	}

	if c.ReloadInterval != 0 && c.ReloadInterval < time.Second {
		v.addf("reload_interval", "must be at least 1s (0 turns polling off), got %s", c.ReloadInterval)
	}

	// Log.
	v.oneOf("log.level", c.Log.Level, "debug", "info", "warn", "error")
	if c.Log.Sampling.Initial < 0 {
		v.addf("log.sampling.initial", "must not be negative (0 turns sampling off), got %d", c.Log.Sampling.Initial)
	}
	if c.Log.Sampling.Thereafter < 0 {
		v.addf("log.sampling.thereafter", "must not be negative, got %d", c.Log.Sampling.Thereafter)
	}
	c.checkValidation(v)
	c.checkIdentity(v)
	c.checkOverload(v)

	c.checkRoutes(v)
	c.checkTiers(v)
	c.checkEffective(v)
	return v.errs
}

// listenAddr checks a listener address: host:port with a numeric port
// from 0 to 65535; the host may be empty (all interfaces).
func (v *checker) listenAddr(path, a string) {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		v.addf(path, "want host:port such as \":8080\" or \"127.0.0.1:9090\", got %q", a)
		return
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || port == "" || n > 65535 {
		v.addf(path, "port %q must be a number from 0 to 65535", port)
	}
	if strings.ContainsAny(host, " \t/") {
		v.addf(path, "host %q is not a host name or IP address", host)
	}
}

// dialAddr checks an address to connect to: a non-empty host and a port
// from 1 to 65535.
func (v *checker) dialAddr(path, a string) {
	host, port, err := net.SplitHostPort(a)
	if err != nil || host == "" {
		v.addf(path, "want host:port such as \"127.0.0.1:6379\", got %q", a)
		return
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n < 1 {
		v.addf(path, "port %q must be a number from 1 to 65535", port)
	}
	if strings.ContainsAny(host, " \t/") {
		v.addf(path, "host %q is not a host name or IP address", host)
	}
}

// sameListener reports whether two listener addresses would claim the
// same socket: the same non-zero port on the same host, or on hosts of
// which one is a wildcard.
func sameListener(a, b string) bool {
	ha, pa, err1 := net.SplitHostPort(a)
	hb, pb, err2 := net.SplitHostPort(b)
	if err1 != nil || err2 != nil || pa != pb || pa == "0" {
		return false
	}
	wild := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return ha == hb || wild(ha) || wild(hb)
}

// envName checks the name of an environment variable.
func (v *checker) envName(path, s string) {
	if !isEnvName(s) {
		v.addf(path, "want an environment variable name ([A-Z_][A-Z0-9_]*), got %q", s)
	}
}

// rate checks a rate; parsed rates are always valid, so this catches
// rates built in code and missing rates.
func (v *checker) rate(path string, r Rate) {
	switch {
	case r.IsZero():
		v.addf(path, "required, such as 60/1m")
	case r.N < 1 || r.N > maxRateN:
		v.addf(path, "N must be from 1 to %d, got %d", int64(maxRateN), r.N)
	case r.Period < time.Second || r.Period%time.Second != 0 || r.Period > 366*24*time.Hour:
		v.addf(path, "period must be whole seconds from 1s to 366d, got %s", r.Period)
	}
}

// burst checks a burst after normalisation.
func (v *checker) burst(path string, b int) {
	if b < 0 || int64(b) > maxRateN {
		v.addf(path, "must be from 0 to %d (0 means the rate's N), got %d", int64(maxRateN), b)
	}
}

// checkWriteTimeout reports routes whose timeout the server's write
// timeout would cut short.
func (c *Config) checkWriteTimeout(v *checker) {
	w := c.Server.WriteTimeout
	var inherit []string
	for i := range c.Routes {
		r := &c.Routes[i]
		p := joinIndex("routes", i)
		switch {
		case r.Timeout > 0 && r.Timeout >= w:
			v.addf("server.write_timeout", "%s must exceed %s.timeout (%s, route %q)", w, p, r.Timeout, r.Name)
		case r.Timeout == 0 && c.Upstream.Timeout >= w:
			inherit = append(inherit, fmt.Sprintf("%s (%q)", p, r.Name))
		}
	}
	if len(inherit) > 0 {
		list := strings.Join(inherit, ", ")
		if len(inherit) > 3 {
			list = strings.Join(inherit[:3], ", ") + fmt.Sprintf(" and %d more", len(inherit)-3)
		}
		v.addf("server.write_timeout", "%s must exceed upstream.timeout (%s), the timeout of %s", w, c.Upstream.Timeout, list)
	}
}

// patternKey identifies a route's method and pattern up to the names of
// its parameters.
func patternKey(m Match) string {
	segs := strings.Split(m.Path, "/")
	for i, s := range segs {
		switch {
		case strings.HasSuffix(s, "...}"):
			segs[i] = "{...}"
		case strings.HasPrefix(s, "{"):
			segs[i] = "{}"
		}
	}
	return m.Method + " " + strings.Join(segs, "/")
}

// checkRoutes checks the route table.
func (c *Config) checkRoutes(v *checker) {
	if len(c.Routes) == 0 {
		v.addf("routes", "at least one route is required")
		return
	}
	names := map[string]int{}
	patterns := map[string]int{}
	defaultAt := -1
	for i := range c.Routes {
		r := &c.Routes[i]
		p := joinIndex("routes", i)

		switch {
		case r.Name == "":
			v.addf(p+".name", "required")
		case !isName(r.Name):
			v.addf(p+".name", "%q must be lower-case letters, digits and _", r.Name)
		default:
			if j, dup := names[r.Name]; dup {
				v.addf(p+".name", "%q is already the name of routes[%d]", r.Name, j)
			} else {
				names[r.Name] = i
			}
		}

		m := r.Match
		switch {
		case m.Path == "":
			v.addf(p+".match", "required, such as \"GET /api/v1/mkt/markets/\" or \"*\"")
		case m.IsDefault():
			if m.Method != "" {
				v.addf(p+".match", "the default route \"*\" takes no method")
			}
			if defaultAt >= 0 {
				v.addf(p+".match", "only one default route \"*\" is allowed; routes[%d] is one", defaultAt)
			} else {
				defaultAt = i
			}
		default:
			if m.Method != "" && !knownMethods[m.Method] {
				v.addf(p+".match", "unknown method %q", m.Method)
			} else if err := CheckPattern(m.Path); err != nil {
				v.addf(p+".match", "%v", err)
			} else if j, dup := patterns[patternKey(m)]; dup {
				v.addf(p+".match", "%q matches the same requests as routes[%d] (%q)", m.String(), j, c.Routes[j].Match.String())
			} else {
				patterns[patternKey(m)] = i
			}
		}

		v.oneOf(p+".auth", r.Auth, AuthNone, AuthOptional, AuthRequired)
		switch r.Validate {
		case ValidateNone:
		case ValidateOrd, ValidateBulk:
			if m.Path != "" && m.Method != "POST" {
				v.addf(p+".validate", "%q needs a POST route, but the route matches %q", r.Validate, m.String())
			}
		default:
			v.oneOf(p+".validate", r.Validate, ValidateNone, ValidateOrd, ValidateBulk)
		}
		c.checkBulkRoute(v, p, r)
		if r.Timeout < 0 {
			v.addf(p+".timeout", "must not be negative (0 means upstream.timeout), got %s", r.Timeout)
		}
		if r.OnStoreError != "" {
			v.oneOf(p+".on_store_error", r.OnStoreError, StoreOpen, StoreClosed, StoreLocal)
		}

		limitNames := map[string]int{}
		for j, l := range r.Limits {
			lp := joinIndex(p+".limits", j)
			if l.Name != "" && !isName(l.Name) {
				v.addf(lp+".name", "%q must be lower-case letters, digits and _", l.Name)
			} else if k, dup := limitNames[l.Name]; dup {
				v.addf(lp+".name", "%q is already the name of %s; give each limit of a route its own name", l.Name, joinIndex(p+".limits", k))
			} else {
				limitNames[l.Name] = j
			}
			v.oneOf(lp+".key", l.Key, KeyToken, KeyAccount, KeyAddress)
			v.oneOf(lp+".when", l.When, WhenAlways, WhenToken, WhenAnon)
			if l.Key != KeyAddress && l.When == WhenAnon {
				v.addf(lp+".when", "a %s limit cannot apply to anonymous requests", l.Key)
			}
			v.rate(lp+".rate", l.Rate)
			v.burst(lp+".burst", l.Burst)
		}
	}
}

// checkTiers checks that every tier names real routes that have a token
// limit to override.
func (c *Config) checkTiers(v *checker) {
	var routeNames []string
	for _, r := range c.Routes {
		routeNames = append(routeNames, r.Name)
	}
	tiers := make([]string, 0, len(c.Tiers))
	for t := range c.Tiers {
		tiers = append(tiers, t)
	}
	slices.Sort(tiers)
	for _, t := range tiers {
		tp := joinKey("tiers", t)
		if !isName(t) {
			v.addf(tp, "tier name %q must be lower-case letters, digits and _", t)
		}
		routes := make([]string, 0, len(c.Tiers[t]))
		for r := range c.Tiers[t] {
			routes = append(routes, r)
		}
		slices.Sort(routes)
		for _, rn := range routes {
			rp := joinKey(tp, rn)
			i := slices.Index(routeNames, rn)
			switch {
			case i < 0:
				v.addf(rp, "no such route%s", didYouMean(rn, routeNames))
			case !slices.ContainsFunc(c.Routes[i].Limits, func(l Limit) bool { return l.Key != KeyAddress }):
				v.addf(rp, "route %q has no token or account limit for a tier to override", rn)
			}
			tl := c.Tiers[t][rn]
			v.rate(rp+".rate", tl.Rate)
			v.burst(rp+".burst", tl.Burst)
		}
	}
}

// checkBulkRoute checks the bulk settings of route r at path p: a bulk
// route is charged against other routes' limits (Bulk.Orders and
// Bulk.Cancels, which must exist and count per token), needs a token so
// that those token limits apply, and has no limits of its own; any other
// route has no bulk settings.
func (c *Config) checkBulkRoute(v *checker, p string, r *Route) {
	if r.Validate != ValidateBulk {
		if r.Bulk != (BulkRoute{}) {
			v.addf(p+".bulk", "only for a route with validate: %s", ValidateBulk)
		}
		return
	}
	if r.Auth != AuthRequired {
		v.addf(p+".auth", "a %s route must require a token, so that the token limits it is charged against apply", ValidateBulk)
	}
	if len(r.Limits) > 0 {
		v.addf(p+".limits", "a %s route has no limits of its own: it is charged against bulk.orders and bulk.cancels", ValidateBulk)
	}
	for _, f := range []struct{ key, name string }{{"orders", r.Bulk.Orders}, {"cancels", r.Bulk.Cancels}} {
		fp := p + ".bulk." + f.key
		if f.name == "" {
			v.addf(fp, "required: the route whose limits a bulk is charged against")
			continue
		}
		t := c.Route(f.name)
		switch {
		case t == nil:
			v.addf(fp, "no route named %q", f.name)
		case t.Name == r.Name || t.Validate == ValidateBulk:
			v.addf(fp, "route %q is a bulk route; name the route of single requests", f.name)
		case !slices.ContainsFunc(t.Limits, func(l Limit) bool { return l.Key == KeyToken || l.Key == KeyAccount }):
			v.addf(fp, "route %q has no token limit to charge", f.name)
		}
	}
}
