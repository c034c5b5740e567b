package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"golang.org/x/net/netutil"

	"github.com/exgate/exgate/admin"
	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/edge"
	"github.com/exgate/exgate/idempotency"
	"github.com/exgate/exgate/identity"
	"github.com/exgate/exgate/limiter"
	"github.com/exgate/exgate/metrics"
	"github.com/exgate/exgate/proxy"
	"github.com/exgate/exgate/sim"
	"github.com/exgate/exgate/topk"
	"github.com/exgate/exgate/tracing"
	"github.com/exgate/exgate/upstream"
	"github.com/exgate/exgate/validate"
)

// deps are the explicit dependencies of the gateway process.
type deps struct {
	log *zap.Logger
	// evidence writes what log sampling must keep (newLogger). Nil means
	// log.
	evidence *zap.Logger
	// now is the process's clock. Nil means time.Now, the wall clock
	// (newApp), which the gateway is then left to default to
	// (proxy.Options.Now nil): it reads a request's later times as time
	// elapsed since its start, one read of the monotonic clock each, where
	// a clock of the caller's is read whole (wall and monotonic) each time.
	now        func() time.Time
	wallClock  bool // now is time.Now, as newApp fills it in
	dev        bool
	getenv     func(string) (string, bool) // nil: empty environment
	configPath string                      // "" when running on defaults
	// configData is the configuration file's content as read at start,
	// once (a pipe gives it only once): the file watch starts from it.
	configData []byte
	// warnings are the configuration's unsafe settings
	// (config.Checked.Warnings), logged at start.
	warnings config.Errors
	// reg receives exgate's metrics, served on the admin listener's
	// /metrics. Nil means a new registry.
	reg *prometheus.Registry
	// spanExporter replaces the OTLP exporter of tracing (tests). Nil
	// means the one the configuration names.
	spanExporter spanExporter
	// adminConnState, when set, is told each admin connection's state
	// after the admin listener's share is (tests: a connection is idle,
	// and may be closed for a newer one of its address, once told so).
	adminConnState func(net.Conn, http.ConnState)
}

// app is a started gateway: listeners bound and serving.
type app struct {
	cfg     *config.Config                // the configuration at start
	live    atomic.Pointer[config.Config] // the configuration in force, after reloads
	d       deps
	log     *zap.Logger
	metrics *metrics.Metrics
	limits  *limiter.Store
	idem    redis.UniversalClient // duplicate protection's Redis client, or nil
	// idemStore is duplicate protection's store in idem, or nil: its
	// frees in the background are waited for before idem is closed.
	idemStore *idempotency.Redis
	dup       *idempotencyHealth // watches duplicate protection's store; nil without it
	// top counts who hits the limits, for the admin console.
	top        *topk.Tracker
	replica    string // this process's name among the replicas (replicaName)
	started    time.Time
	cfgHash    atomic.Pointer[string]
	lastReload atomic.Pointer[reloadRecord]
	// startDigest is the digest of the watched files when the
	// configuration was read at start (filesDigest).
	startDigest [sha256.Size]byte
	idemOwn     bool                // idem is its own client, not the limiter's
	cat         *validate.Catalogue // nil when no route validates orders
	stopCat     context.CancelFunc
	stopID      context.CancelFunc // ends the JWKS refresh; nil without one
	fleet       *upstream.Fleet    // the backend services
	stopFleet   context.CancelFunc // ends the fleet's sources and health checks
	gw          *proxy.Gateway
	srv         *http.Server
	admin       *http.Server
	backend     *http.Server // dev mode only
	addr        string       // bound traffic address
	adminAd     string       // bound admin address
	backAddr    string       // dev backend address
	edge        *metrics.Edge
	// traces is the tracer provider, nil while tracing is off;
	// traceMetrics counts its spans.
	traces       *tracing.Provider
	traceMetrics *metrics.Tracing
	certs        *edge.Certificates // nil without TLS
	stopTLS      context.CancelFunc // stops the certificate watch
	// backendTLS dials each service's https instances, by service name
	// (services that share upstream.tls share one); serviceTransports
	// are the Transports of services with a tls block of their own;
	// stopBackendTLS stops the files' watch.
	backendTLS        map[string]*upstream.ClientTLS
	serviceTransports map[string]http.RoundTripper
	stopBackendTLS    context.CancelFunc
	discovery         *metrics.Discovery
	errc              chan error
}

// start binds every listener and starts serving. It wires the parts of
// the gateway in the order they depend on each other; when one fails, the
// parts already started are stopped. In dev mode the reference backend
// starts first, on a free loopback port, and the upstream points at it.
func start(cfg *config.Config, d deps) (*app, error) {
	a, err := newApp(cfg, d)
	if err != nil {
		return nil, err
	}
	if err := a.wire(cfg); err != nil {
		a.stopParts()
		return nil, err
	}
	return a, nil
}

// newApp returns the app for cfg with its metrics registered and nothing
// started; d's zero values are filled in.
func newApp(cfg *config.Config, d deps) (*app, error) {
	if d.getenv == nil {
		d.getenv = func(string) (string, bool) { return "", false }
	}
	if d.evidence == nil {
		d.evidence = d.log
	}
	if d.now == nil {
		d.now, d.wallClock = time.Now, true
	}
	if d.dev {
		d.getenv = devGetenv(d.getenv)
	}
	if d.reg == nil {
		d.reg = prometheus.NewRegistry()
	}
	a := &app{cfg: cfg, d: d, log: d.log, errc: make(chan error, 3)}
	a.live.Store(cfg)
	a.started, a.top = d.now(), newTracker(d.now)
	h := configHash(cfg)
	a.cfgHash.Store(&h)
	var err error
	if a.metrics, err = metrics.New(d.reg, buildInfo()); err != nil {
		return nil, err
	}
	a.replica = replicaName(cfg)
	a.metrics.SetReplica(a.replica)
	if a.edge, err = metrics.NewEdge(d.reg); err != nil {
		return nil, err
	}
	if a.traceMetrics, err = metrics.NewTracing(d.reg); err != nil {
		return nil, err
	}
	if a.discovery, err = metrics.NewDiscovery(d.reg); err != nil {
		return nil, err
	}
	return a, nil
}

// wire starts the parts of the gateway, each from cfg and a.d: the files
// the configuration names, the rate-limit store, the token verifier, the
// market catalogue and order validator, duplicate protection, the
// gateway, the certificates, and last the listeners.
func (a *app) wire(cfg *config.Config) error {
	if a.d.dev {
		if err := a.startDevBackend(cfg); err != nil {
			return err
		}
	}
	read := readOnce{}
	if a.d.configPath != "" && a.d.configData != nil {
		read[a.d.configPath] = a.d.configData
	}
	tokens, users, err := loadTiers(cfg, a.d.configPath, read)
	if err != nil {
		return err
	}
	if a.d.configPath != "" {
		a.startDigest = filesDigest(a.watchedFiles(), read)
	}
	files := withResolvedFiles(cfg, a.d.configPath)
	if err := a.openLimits(files); err != nil {
		return err
	}
	verifier, err := a.startIdentity(files)
	if err != nil {
		return err
	}
	transport := upstream.NewTransport(cfg.Upstream)
	if err := a.startBackendTLS(cfg, transport); err != nil {
		return err
	}
	a.startFleet(cfg, transport)
	validator, err := a.startValidation(cfg, a.catalogueTransport(transport))
	if err != nil {
		return err
	}
	gatewayNow := a.d.now
	if a.d.wallClock {
		gatewayNow = nil // time.Now, a request's later times read as time elapsed (proxy.Options.Now)
	}
	opts := proxy.Options{
		Logger: a.log.Named("gateway"), Evidence: a.d.evidence.Named("gateway"), Now: gatewayNow, Transport: transport, Fleet: a.fleet,
		Limits: a.limits.Enforcer, Rules: limiter.Compile(cfg, tokens).WithUsers(users), Metrics: a.metrics,
		Validator: validator, Verifier: verifier, Top: a.top,
	}
	if err := a.startTracing(cfg); err != nil {
		return err
	}
	if a.traces != nil {
		opts.Tracer = a.traces.Tracer()
	}
	if cfg.IdempotencyRuns() {
		if opts.Idempotency, err = a.openIdempotencyStore(files); err != nil {
			return err
		}
	}
	if a.gw, err = proxy.New(cfg, opts); err != nil {
		return err
	}
	if err := a.loadCertificates(cfg); err != nil {
		return err
	}
	if err := a.listen(cfg); err != nil {
		return err
	}
	a.log.Info("exgate started",
		zap.String("listen", a.addr), zap.String("admin_listen", a.adminAd),
		zap.Strings("services", cfg.Upstream.ServiceNames()), zap.Int("routes", len(cfg.Routes)),
		zap.String("limiter", a.limits.Kind), zap.Int("tier_tokens", len(tokens)), zap.Int("tier_users", len(users)),
		zap.Bool("verify_tokens", verifier != nil),
		zap.Bool("tls", a.certs != nil), zap.Int("proxy_protocol_peers", len(cfg.Server.ProxyProtocol.TrustedPeers)),
		zap.Bool("tracing", a.traces != nil),
		zap.String("version", versionString()))
	a.warnUnsafeDefaults()
	return nil
}

// startDevBackend serves the reference backend on a free loopback port
// and points cfg's upstream at it.
func (a *app) startDevBackend(cfg *config.Config) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("dev backend: %w", err)
	}
	a.backAddr = ln.Addr().String()
	a.backend = &http.Server{
		Handler:           sim.New(sim.Options{Now: a.d.now}),
		ReadHeaderTimeout: 5 * time.Second,
	}
	go a.serve("backend", a.backend, ln)
	cfg.Upstream.URL = config.MustURL("http://" + a.backAddr)
	cfg.Upstream.URLs = nil
	return nil
}

// openLimits opens the rate-limit store, timing its calls into the
// metrics. When duplicate protection keeps its claims in Redis too, the
// store's keys are shared with it (limiter.OpenOptions.SharedKeys).
func (a *app) openLimits(cfg *config.Config) error {
	m := a.metrics
	var err error
	a.limits, err = limiter.Open(cfg, limiter.OpenOptions{
		Getenv: a.d.getenv, Logger: a.log.Named("limiter"), Now: a.d.now,
		Observe:    func(dur time.Duration, _ int, err error) { m.ObserveStore(dur, err) },
		SharedKeys: idempotencyInRedis(cfg),
		ClaimFunc:  claimFunc(cfg),
	})
	return err
}

// startIdentity builds the access-token verifier when identity.verify is
// on (nil otherwise) and keeps its JWKS URL fresh until shutdown. Account
// keys are HMACs under the limiter's key secret, like token ids.
func (a *app) startIdentity(cfg *config.Config) (*identity.Verifier, error) {
	if !cfg.Identity.Verify {
		return nil, nil
	}
	m := a.metrics
	v, err := identity.New(cfg.Identity.JWT, identity.Options{
		Getenv: a.d.getenv, AccountKey: a.limits.Enforcer.AccountID, Now: a.d.now,
		Logger: a.log.Named("identity"), OnFetch: m.JWKSFetch,
		OnCachedRefusal: func(r identity.Reason) { m.AuthFailureCached(string(r)) },
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.stopID = cancel
	go v.Run(ctx)
	return v, nil
}

// startValidation starts the market catalogue (fetched from the backend
// now and every validation.catalogue.refresh) and returns the order
// validator, or nil when no route validates orders. In dev mode it waits
// for the first load, so that the first order of the quick start is not
// refused for want of a catalogue.
func (a *app) startValidation(cfg *config.Config, transport http.RoundTripper) (*validate.Validator, error) {
	if !cfg.ValidatesOrders() {
		return nil, nil
	}
	vc := cfg.Validation
	var token string
	if vc.Catalogue.TokenEnv != "" {
		token, _ = a.d.getenv(vc.Catalogue.TokenEnv)
	}
	m := a.metrics
	if err := m.RegisterCatalogueAge(a.d.reg); err != nil {
		return nil, err
	}
	cat, err := validate.NewCatalogue(validate.CatalogueOptions{
		BaseURL: defaultInstance(cfg), Path: vc.Catalogue.Path, Transport: transport, Token: token,
		Refresh: vc.Catalogue.Refresh, Timeout: vc.Catalogue.Timeout, MaxBytes: int64(vc.Catalogue.MaxBytes),
		Now: a.d.now, Logger: a.log.Named("catalogue"),
		OnLoad: func(err error) {
			if err == nil {
				m.SetCatalogueLoaded(a.d.now())
			}
		},
	})
	if err != nil {
		return nil, err
	}
	v, err := validate.New(vc, cat, a.log.Named("validate"))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.cat, a.stopCat = cat, cancel
	if a.d.dev {
		lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
		if err := cat.Load(lctx); err != nil {
			a.log.Warn("market catalogue not loaded yet; orders are refused until it is", zap.Error(err))
		}
		lcancel()
	}
	go cat.Run(ctx)
	return v, nil
}

// loadCertificates reads the traffic listener's certificates, when TLS
// is configured.
func (a *app) loadCertificates(cfg *config.Config) error {
	files := certificateFiles(cfg, a.d.configPath)
	if len(files) == 0 {
		return nil
	}
	var err error
	a.certs, err = edge.LoadCertificates(files, a.log.Named("tls"), a.edge)
	return err
}

// listen builds the traffic and admin servers, binds their listeners and
// starts serving, and starts the certificate watch.
func (a *app) listen(cfg *config.Config) error {
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	aln, err := net.Listen("tcp", cfg.AdminListen)
	if err != nil {
		ln.Close()
		return fmt.Errorf("admin listen %s: %w", cfg.AdminListen, err)
	}
	a.addr, a.adminAd = ln.Addr().String(), aln.Addr().String()
	// Past admin.max_connections a connection waits in the kernel's
	// accept queue, holding none of the descriptors traffic shares; below
	// it, each address has its share (edge.ShareAdminConnections), so
	// that one caller's idle connections cannot keep the probes and
	// Prometheus waiting there.
	aln, adminIdle := edge.ShareAdminConnections(netutil.LimitListener(aln, cfg.Admin.MaxConnections), cfg, a.edge)
	a.srv = edge.NewServer(cfg, a.gw, a.log, a.edge)
	a.admin = admin.NewServer(cfg, admin.Handler(a.gw, a.adminOptions(cfg)), a.log)
	a.admin.ConnState = adminIdle
	if told := a.d.adminConnState; told != nil {
		a.admin.ConnState = func(c net.Conn, s http.ConnState) { adminIdle(c, s); told(c, s) }
	}
	tln := edge.ProxyProtocolListener(edge.ShareConnections(ln, cfg, a.edge), cfg.Server.ProxyProtocol, cfg.Server.ReadHeaderTimeout, a.edge)
	go a.serveTraffic(tln)
	if a.certs != nil {
		ctx, cancel := context.WithCancel(context.Background())
		a.stopTLS = cancel
		go a.certs.Watch(ctx, cfg.Server.TLS.ReloadInterval)
	}
	go a.serve("admin", a.admin, aln)
	return nil
}

// warnUnsafeDefaults logs what an operator most likely did not mean: an
// admin console open beyond loopback, limits each replica counts alone.
func (a *app) warnUnsafeDefaults() {
	for _, w := range a.d.warnings {
		a.log.Warn("unsafe configuration: " + w.Error())
	}
	if tok, _ := a.d.getenv(a.cfg.Admin.TokenEnv); tok == "" && !loopbackAddr(a.adminAd) {
		a.log.Warn("the admin listener is not on loopback and " + a.cfg.Admin.TokenEnv +
			" (admin.token_env) is not set: the console and pprof answer 403 admin_token_required; /healthz, /readyz and /metrics are served")
	}
	if a.limits.Kind == config.StoreMemory && !a.d.dev {
		a.log.Warn("rate limits are kept in this process: each replica counts on its own; set limiter.redis.addrs to share them")
	}
}

// serveTraffic serves the gateway on ln, over TLS when certificates are
// configured.
func (a *app) serveTraffic(ln net.Listener) {
	if err := edge.ServeTraffic(a.srv, ln, a.certs); err != nil && !errors.Is(err, http.ErrServerClosed) {
		a.errc <- fmt.Errorf("gateway: %w", err)
	}
}

// serve serves s on ln; a failure other than closing ends the process
// (wait).
func (a *app) serve(name string, s *http.Server, ln net.Listener) {
	if err := s.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		a.errc <- fmt.Errorf("%s: %w", name, err)
	}
}

// stopParts stops what start had started when a later part failed: the
// catalogue refresh, the JWKS refresh, the dev backend and the stores.
func (a *app) stopParts() {
	a.stopBackground()
	if a.backend != nil {
		_ = a.backend.Close()
	}
	a.stopTracing(time.Second)
	a.closeStores()
}

// stopBackground stops what start left running in the background: the
// backend TLS files' watch, the catalogue refresh, the JWKS refresh and
// the fleet's sources and health checks.
func (a *app) stopBackground() {
	if a.stopBackendTLS != nil {
		a.stopBackendTLS()
	}
	if a.stopCat != nil {
		a.stopCat()
	}
	if a.stopID != nil {
		a.stopID()
	}
	if a.stopFleet != nil {
		a.stopFleet()
	}
}

// closeStores closes the rate-limit store and duplicate protection's own
// Redis client, once duplicate protection's frees of lost claims under
// way have ended (idempotency.Redis.Wait): the client they use, its own
// or the limiter's, closed first would cut them.
func (a *app) closeStores() {
	if a.dup != nil {
		a.dup.stop()
	}
	if a.idemStore != nil {
		a.idemStore.Wait()
	}
	if a.idemOwn {
		_ = a.idem.Close()
	}
	if a.limits != nil {
		_ = a.limits.Close()
	}
}

// wait serves until ctx ends or a server fails, then shuts down: /readyz
// turns 503, the listeners close, in-flight requests get up to
// server.shutdown_timeout to finish. It returns the exit code and why the
// gateway stopped (the signal, the server's failure, and requests cut by
// the shutdown timeout).
func (a *app) wait(ctx context.Context) (int, string) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	changed := make(chan struct{}, 1)
	if rereadable(a.d.configPath) && a.cfg.ReloadInterval > 0 {
		wctx, stopWatch := context.WithCancel(context.Background())
		defer stopWatch()
		go a.watchFiles(wctx, a.cfg.ReloadInterval, changed)
	}
	code, why := 0, ""
	for running := true; running; {
		select {
		case <-ctx.Done():
			a.log.Info("shutting down", zap.Duration("timeout", a.cfg.Server.ShutdownTimeout))
			why, running = context.Cause(ctx).Error(), false
		case err := <-a.errc:
			a.log.Error("server failed", zap.Error(err))
			code, why, running = 1, "server failed: "+err.Error(), false
		case <-hup:
			a.reloadNow()
		case <-changed:
			a.reloadNow()
		}
	}
	if err := a.shutdown(); err != nil {
		a.log.Error("shutdown incomplete", zap.Error(err))
		code, why = 1, why+"; shutdown incomplete, requests still running were cut: "+err.Error()
	}
	return code, why
}

// shutdown drains and stops every server: /readyz turns 503 at once, the
// traffic listener keeps serving for server.drain_delay so that load
// balancers notice, then closes; requests under way get
// server.shutdown_timeout to finish.
func (a *app) shutdown() error {
	a.gw.SetDraining()
	if d := a.cfg.Server.DrainDelay; d > 0 {
		a.log.Info("draining: /readyz answers 503; closing the listener after the drain delay", zap.Duration("drain_delay", d))
		time.Sleep(d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.cfg.Server.ShutdownTimeout)
	defer cancel()
	err := a.srv.Shutdown(ctx)
	_ = a.admin.Shutdown(ctx)
	if a.backend != nil {
		_ = a.backend.Shutdown(ctx)
	}
	a.gw.CloseIdleConnections()
	a.gw.FlushLogShare()       // the refusal lines not written since the last summary
	edge.FlushServerLog(a.srv) // and net/http's own lines
	if a.stopTLS != nil {
		a.stopTLS()
	}
	a.stopBackground()
	a.stopTracing(tracingFlushTimeout)
	a.closeStores()
	return err
}

// tracingFlushTimeout bounds the export of the spans still queued at
// shutdown: a collector that is down must not hold the process.
const tracingFlushTimeout = 5 * time.Second
