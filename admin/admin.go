// Package admin serves exgate's admin listener: /healthz, /readyz with
// its checks, /metrics, pprof, and the operator console (the JSON API
// under /admin/ and its page), every error answer as JSON. It reads the
// traffic gateway through the small Gateway interface; the composition
// root hands it the gateway, the limit enforcer and the metrics.
package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/exgate/exgate/limiter"
	"github.com/exgate/exgate/proxy"
)

// Check is one readiness check of the admin listener.
type Check struct {
	// Name labels the check in /readyz's answer ("backend", "redis", …).
	Name string
	// Critical makes /readyz answer 503 while the check fails. A
	// non-critical failure is reported but keeps the instance ready: the
	// gateway still serves correctly without it (a rate-limit store with a
	// local or open fallback, say), and taking every replica out of the
	// load balancer because a shared dependency failed would turn a
	// degradation into an outage.
	Critical bool
	// Impact, when set, decides at each run, from the configuration in
	// force, whether a failure makes the instance not ready (it replaces
	// Critical) and what the failure degrades ("orders with an identifier
	// are refused"), which /readyz puts before the error. Nil: Critical,
	// and the error alone.
	Impact func() (critical bool, degraded string)
	// Run reports the dependency's state; it must honour ctx. A nil
	// error means the dependency is fine or not in use.
	Run func(ctx context.Context) error
}

// Gateway is what the admin listener reads of the traffic gateway
// (*proxy.Gateway).
type Gateway interface {
	// Draining reports whether the gateway is shutting down: /readyz
	// answers 503 from then on.
	Draining() bool
	// Rules returns the rate limits in force (a reload replaces them).
	Rules() *limiter.Rules
	// RecentRefusals returns the last refusals of sampled requests,
	// newest first, and whether tracing is on.
	RecentRefusals() (tracing bool, refusals []proxy.RecentRefusal)
}

// Options configure the admin handler. The zero value serves /healthz
// and /readyz only.
type Options struct {
	// Checks are run by /readyz, each with CheckTimeout, at most once per
	// CheckInterval (probes in between get the last answer).
	Checks []Check
	// CheckTimeout bounds each check. Zero means 1s.
	CheckTimeout time.Duration
	// CheckInterval is how long check results are reused. Zero means 1s.
	CheckInterval time.Duration
	// Metrics serves /metrics when set.
	Metrics http.Handler
	// Pprof serves net/http/pprof under /debug/pprof/.
	Pprof bool
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
	// Console serves the operator console (/admin/… and the page at /)
	// when set.
	Console *ConsoleOptions
	// Token, when set, is the bearer token the console's API and pprof
	// need. /healthz, /readyz and /metrics never need it: probes and
	// scrapers must keep working.
	Token string
	// TokenEnv names the variable the token is read from, for refusals
	// that tell the operator what to set. "" means EXGATE_ADMIN_TOKEN.
	TokenEnv string
	// RequireToken refuses the console's API and pprof (403
	// admin_token_required) while Token is empty: the composition root
	// sets it when the listener is reachable beyond loopback.
	RequireToken bool
	// AllowedHosts are the host names the listener answers to besides IP
	// addresses, localhost and names under .localhost; a request naming
	// another Host is refused with 403 host_not_allowed, whatever its
	// path but /healthz.
	AllowedHosts []string
}

// Handler returns the handler of the admin listener: /healthz
// answers 200 while the process serves; /readyz answers 200 while every
// critical check passes and the gateway is not draining, else 503, with
// each check's state in a JSON body; /metrics and /debug/pprof/ when
// configured. All but /healthz (which holds nothing) answer only the
// Hosts of AllowedHosts (and addresses, localhost), pprof and the console's API
// only with the token and never to another origin's page (crossSite);
// every error answer is JSON.
func Handler(gw Gateway, o Options) http.Handler {
	if o.CheckTimeout <= 0 {
		o.CheckTimeout = time.Second
	}
	if o.CheckInterval <= 0 {
		o.CheckInterval = time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	rc := &readiness{gw: gw, o: o}
	access := newAdminAccess(o)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeStatus(w, http.StatusOK, []byte(`{"status":"ok"}`+"\n"))
	})
	mux.Handle("GET /readyz", access.page(http.HandlerFunc(rc.serve)))
	if o.Metrics != nil {
		mux.Handle("GET /metrics", access.page(o.Metrics))
	}
	if o.Console != nil {
		mountConsole(mux, gw, *o.Console, rc, access)
	}
	if o.Pprof {
		mux.Handle("/debug/pprof/", access.api(http.HandlerFunc(pprof.Index)))
		mux.Handle("/debug/pprof/cmdline", access.api(http.HandlerFunc(pprof.Cmdline)))
		mux.Handle("/debug/pprof/profile", access.api(http.HandlerFunc(pprof.Profile)))
		mux.Handle("/debug/pprof/symbol", access.api(http.HandlerFunc(pprof.Symbol)))
		mux.Handle("/debug/pprof/trace", access.api(http.HandlerFunc(pprof.Trace)))
	}
	return jsonErrors(mux)
}

// readiness runs the checks and caches their answer.
type readiness struct {
	gw Gateway
	o  Options
	mu sync.Mutex
	at time.Time
	st map[string]string
	ok bool
}

// readyBody is /readyz's answer.
type readyBody struct {
	Status string            `json:"status"`
	Checks map[string]string `json:"checks,omitempty"`
}

func (rc *readiness) serve(w http.ResponseWriter, r *http.Request) {
	if rc.gw.Draining() {
		writeStatus(w, http.StatusServiceUnavailable, []byte(`{"status":"draining"}`+"\n"))
		return
	}
	checks, ok := rc.run(r.Context())
	body := readyBody{Status: "ready", Checks: checks}
	code := http.StatusOK
	if !ok {
		body.Status, code = "not_ready", http.StatusServiceUnavailable
	}
	b, _ := json.Marshal(body)
	writeStatus(w, code, append(b, '\n'))
}

// run returns each check's state ("ok", or the error) and whether every
// critical check passed, running the checks again when the last answer
// is older than CheckInterval.
func (rc *readiness) run(ctx context.Context) (map[string]string, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	now := rc.o.Now()
	if rc.st != nil && now.Sub(rc.at) < rc.o.CheckInterval {
		return rc.st, rc.ok
	}
	st := make(map[string]string, len(rc.o.Checks))
	ok := true
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, c := range rc.o.Checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, rc.o.CheckTimeout)
			defer cancel()
			state, critical := "ok", c.Critical
			if err := c.Run(cctx); err != nil {
				degraded := ""
				if c.Impact != nil {
					critical, degraded = c.Impact()
				}
				state = err.Error()
				if degraded != "" {
					state = degraded + ": " + state
				}
				if !critical {
					state += " (not critical)"
				}
			}
			mu.Lock()
			st[c.Name] = state
			if state != "ok" && critical {
				ok = false
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	rc.at, rc.st, rc.ok = now, st, ok
	return st, ok
}

func writeStatus(w http.ResponseWriter, code int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}
