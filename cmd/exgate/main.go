// Command exgate is the API gateway for the trading API: it canonicalises
// and routes every request, refuses what must not reach the backend, and
// forwards the rest.
//
// Usage:
//
//	exgate [-config FILE] [-dev] [-print-config] [-version]
//	exgate check-config FILE
//	exgate token-id [-config FILE] < tokens
//
// With no file, exgate runs with the built-in defaults (the trading API's
// limits table); EXGATE_<PATH> environment variables override any scalar.
// -dev also starts the reference backend in this process, on a free
// loopback port, with in-memory state. SIGHUP reloads the routes, limits,
// tiers and tokens file; SIGINT and SIGTERM drain and stop.
//
// token-id prints, for each token read from standard input (one per
// line), the token id that the tokens file and the logs use: an HMAC of the
// token under the key secret (limiter.key_secret_env).
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/idempotency"
	"github.com/exgate/exgate/identity"
	"github.com/exgate/exgate/limiter"
	"github.com/exgate/exgate/metrics"
	"github.com/exgate/exgate/proxy"
	"github.com/exgate/exgate/sim"
	"github.com/exgate/exgate/topk"
	"github.com/exgate/exgate/validate"
)

// defaultGCPercent is the garbage collector's target when GOGC is not
// set: a gateway's live heap is small (tens of MB) and it allocates fast,
// so collecting at 5× the live heap instead of 2× spends a few percent
// less CPU for some tens of MB more memory. GOMEMLIMIT (set it below a
// container's memory limit) still bounds the heap.
const defaultGCPercent = 400

func main() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(defaultGCPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// The first SIGINT or SIGTERM drains and stops gracefully; from then
	// on the signals have their default effect, so a second one ends the
	// process at once (an operator's second Ctrl-C, or a supervisor that
	// will not wait).
	go func() { <-ctx.Done(); stop() }()
	os.Exit(run(ctx, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr))
}

// run is main without the process: it returns the exit code. ctx ends the
// gateway (a signal, in main).
func run(ctx context.Context, args []string, getenv func(string) (string, bool), stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "check-config" {
		if len(args) != 2 {
			fmt.Fprintln(stderr, "usage: exgate check-config FILE")
			return 2
		}
		// The files the configuration names are checked before its "ok".
		var report bytes.Buffer
		if !config.CheckFile(args[1], getenv, &report) {
			_, _ = io.Copy(stdout, &report)
			return 1
		}
		if err := checkNamedFiles(args[1], getenv); err != nil {
			fmt.Fprintln(stdout, err)
			return 1
		}
		_, _ = io.Copy(stdout, &report)
		return 0
	}
	if len(args) > 0 && args[0] == "top" {
		return topCommand(ctx, args[1:], getenv, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "inspect" {
		return inspectCommand(ctx, args[1:], getenv, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "token-id" {
		return tokenIDs(args[1:], getenv, os.Stdin, stdout, stderr)
	}

	fs := flag.NewFlagSet("exgate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "YAML configuration `file` (default: built-in defaults)")
	dev := fs.Bool("dev", false, "development mode: also run the reference backend in this process, limits in memory (unless EXGATE_LIMITER_BACKEND=redis)")
	printConfig := fs.Bool("print-config", false, "print the effective configuration as YAML and exit")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "exgate: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stdout, versionString())
		return 0
	}

	cfg, err := config.Load(*configPath, getenv)
	if err != nil {
		fmt.Fprintf(stderr, "exgate: configuration errors:\n%v\n", err)
		return 2
	}
	if *dev {
		devOverrides(cfg)
	}
	if *printConfig {
		b, err := cfg.Marshal()
		if err != nil {
			fmt.Fprintln(stderr, "exgate:", err)
			return 1
		}
		_, _ = stdout.Write(b)
		return 0
	}

	log, err := newLogger(cfg.Log, *dev, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "exgate:", err)
		return 2
	}
	defer func() { _ = log.Sync() }()
	defer redirectStdLog(log.Named("stdlib"))()

	redis.SetLogger(redisLogger{log.Named("redis")})
	if *dev {
		getenv = devSecret(getenv, cfg.Limiter.KeySecretEnv)
	}
	a, err := start(cfg, deps{log: log, now: time.Now, dev: *dev, getenv: getenv, configPath: *configPath})
	if err != nil {
		log.Error("cannot start", zap.Error(err))
		return 1
	}
	if *dev {
		printDevBanner(stdout, a)
	}
	return a.wait(ctx)
}

// deps are the explicit dependencies of the gateway process.
type deps struct {
	log        *zap.Logger
	now        func() time.Time
	dev        bool
	getenv     func(string) (string, bool) // nil: empty environment
	configPath string                      // "" when running on defaults
	// reg receives exgate's metrics, served on the admin listener's
	// /metrics. Nil means a new registry.
	reg *prometheus.Registry
}

// devOverrides adapts a configuration to dev mode: limits in this process
// unless limiter.backend is explicitly "redis" (so that two dev instances
// can share limits through a real Redis), no drain delay at Ctrl-C, and,
// unless the file configures identity itself, access tokens verified with
// the reference backend's signing secret, so that limits count per
// account out of the box (a route table that still counts token strings
// keeps tokens opaque). The reference backend's address is set once it
// listens.
func devOverrides(cfg *config.Config) {
	if cfg.Limiter.Backend != config.BackendRedis {
		cfg.Limiter.Backend = config.BackendMemory
	}
	cfg.Server.DrainDelay = 0
	if cfg.Identity.Verify {
		return
	}
	verified := *cfg
	verified.Routes = slices.Clone(cfg.Routes)
	for i := range verified.Routes {
		verified.Routes[i].Limits = slices.Clone(cfg.Routes[i].Limits)
	}
	verified.Identity.Verify = true
	verified.Identity.JWT.Keys = []config.JWTKey{{Algorithms: []string{"HS256"}, SecretEnv: devSecretEnv}}
	if verified.Validate() == nil {
		*cfg = verified
	}
}

// devSecretEnv is the variable dev mode reads the reference backend's
// signing secret from; dev mode answers it with sim.DevSecret.
const devSecretEnv = "EXGATE_DEV_SIM_JWT_SECRET"

// devGetenv is getenv with the reference backend's signing secret.
func devGetenv(getenv func(string) (string, bool)) func(string) (string, bool) {
	return func(k string) (string, bool) {
		if k == devSecretEnv {
			return sim.DevSecret, true
		}
		return getenv(k)
	}
}

// app is a started gateway: listeners bound and serving.
type app struct {
	cfg     *config.Config                // the configuration at start
	live    atomic.Pointer[config.Config] // the configuration in force, after reloads
	d       deps
	log     *zap.Logger
	metrics *metrics.Metrics
	limits  *limiter.Backend
	idem    redis.UniversalClient // duplicate protection's Redis client, or nil
	// top counts who hits the limits, for the admin console.
	top        *topk.Tracker
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
	gw          *proxy.Gateway
	srv         *http.Server
	admin       *http.Server
	backend     *http.Server // dev mode only
	addr        string       // bound traffic address
	adminAd     string       // bound admin address
	backAddr    string       // dev backend address
	edge        *metrics.Edge
	certs       *proxy.Certificates // nil without TLS
	stopTLS     context.CancelFunc  // stops the certificate watch
	errc        chan error
}

// start binds every listener and starts serving. In dev mode it first
// starts the reference backend on a free loopback port and points the
// upstream at it.
func start(cfg *config.Config, d deps) (*app, error) {
	if d.getenv == nil {
		d.getenv = func(string) (string, bool) { return "", false }
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
	if d.configPath != "" {
		a.startDigest = filesDigest(a.watchedFiles())
	}
	m, err := metrics.New(d.reg, buildInfo())
	if err != nil {
		return nil, err
	}
	a.metrics = m
	if a.edge, err = metrics.NewEdge(d.reg); err != nil {
		return nil, err
	}
	if d.dev {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("dev backend: %w", err)
		}
		a.backAddr = ln.Addr().String()
		a.backend = &http.Server{
			Handler:           sim.New(sim.Options{Now: d.now}),
			ReadHeaderTimeout: 5 * time.Second,
		}
		go a.serve("backend", a.backend, ln)
		cfg.Upstream.URL = config.MustURL("http://" + a.backAddr)
	}
	tokens, err := loadTokens(cfg, d.configPath)
	if err != nil {
		a.closeBackend()
		return nil, err
	}
	users, err := loadUsers(cfg, d.configPath)
	if err != nil {
		a.closeBackend()
		return nil, err
	}
	resolveRedisFiles(cfg, d.configPath)
	resolveIdentityFiles(cfg, d.configPath)
	idemRedis := cfg.ProtectsDuplicates() && cfg.IdempotencyBackend() == config.BackendRedis
	a.limits, err = limiter.Open(cfg, limiter.OpenOptions{
		Getenv: d.getenv, Logger: d.log.Named("limiter"), Now: d.now,
		Observe:    func(dur time.Duration, _ int, err error) { m.ObserveStore(dur, err) },
		SharedKeys: idemRedis,
	})
	if err != nil {
		a.closeBackend()
		return nil, err
	}
	verifier, err := a.startIdentity(cfg)
	if err != nil {
		a.closeBackend()
		return nil, err
	}
	transport := proxy.NewTransport(cfg.Upstream)
	v, err := a.startValidation(cfg, transport)
	if err != nil {
		a.closeBackend()
		return nil, err
	}
	gwOpts := proxy.Options{
		Logger: d.log.Named("gateway"), Now: d.now, Transport: transport,
		Limits: a.limits.Enforcer, Rules: limiter.Compile(cfg, tokens).WithUsers(users), Metrics: m,
		Validator: v, Verifier: verifier, Top: a.top,
	}
	if cfg.Idempotency.Enabled && v != nil {
		opts := idempotency.OptionsFrom(cfg.Idempotency)
		opts.Now = d.now
		opts.ReplicaAcks = cfg.IdempotencyReplicaAcks()
		if idemRedis {
			// Duplicate protection is shared by every replica through
			// Redis even when the limits are kept in memory: then it has
			// a client of its own, from limiter.redis.
			a.idem = a.limits.Client
			if a.idem == nil {
				password, _ := d.getenv(cfg.Limiter.Redis.PasswordEnv)
				if a.idem, err = limiter.NewRedisClient(cfg.Limiter.Redis, password); err != nil {
					a.closeBackend()
					return nil, err
				}
				a.idemOwn = true
			}
			gwOpts.Idempotency = idempotency.NewRedis(a.idem, opts)
		} else {
			gwOpts.Idempotency = idempotency.NewMemory(opts)
		}
		dm, err := metrics.NewDuplicateStore(d.reg)
		if err != nil {
			a.closeBackend()
			return nil, err
		}
		gwOpts.Idempotency = observedStore{s: gwOpts.Idempotency, m: dm, now: d.now}
		gwOpts.IdempotencyTimeout = cfg.Idempotency.Timeout
		gwOpts.IdempotencyMaxResponse = int(cfg.Idempotency.MaxResponseBytes)
	}
	gw, err := proxy.New(cfg, gwOpts)
	if err != nil {
		a.closeBackend()
		return nil, err
	}
	a.gw = gw
	if files := certificateFiles(cfg, d.configPath); len(files) > 0 {
		if a.certs, err = proxy.LoadCertificates(files, d.log.Named("tls"), a.edge); err != nil {
			a.closeBackend()
			return nil, err
		}
	}
	a.srv = proxy.NewServer(cfg, gw, d.log, a.edge)
	a.admin = proxy.NewAdminServer(cfg, gw.AdminHandler(proxy.AdminOptions{
		Checks: a.readinessChecks(), Pprof: cfg.Admin.Pprof, Now: d.now,
		Metrics: metrics.Handler(d.reg), Console: a.consoleOptions(),
	}), d.log)

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		a.closeBackend()
		return nil, fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	aln, err := net.Listen("tcp", cfg.AdminListen)
	if err != nil {
		ln.Close()
		a.closeBackend()
		return nil, fmt.Errorf("admin listen %s: %w", cfg.AdminListen, err)
	}
	a.addr, a.adminAd = ln.Addr().String(), aln.Addr().String()
	tln := proxy.ProxyProtocolListener(ln, cfg.Server.ProxyProtocol, cfg.Server.ReadHeaderTimeout, a.edge)
	go a.serveTraffic(tln)
	if a.certs != nil {
		ctx, cancel := context.WithCancel(context.Background())
		a.stopTLS = cancel
		go a.certs.Watch(ctx, cfg.Server.TLS.ReloadInterval)
	}
	go a.serve("admin", a.admin, aln)
	d.log.Info("exgate started",
		zap.String("listen", a.addr), zap.String("admin_listen", a.adminAd),
		zap.String("upstream", cfg.Upstream.URL.String()), zap.Int("routes", len(cfg.Routes)),
		zap.String("limiter", a.limits.Kind), zap.Int("tier_tokens", len(tokens)), zap.Int("tier_users", len(users)),
		zap.Bool("verify_tokens", verifier != nil),
		zap.Bool("tls", a.certs != nil), zap.Int("proxy_protocol_peers", len(cfg.Server.ProxyProtocol.TrustedPeers)),
		zap.String("version", versionString()))
	if tok, _ := d.getenv(adminTokenEnv); tok == "" && !loopbackAddr(a.adminAd) {
		d.log.Warn("the admin listener is not on loopback and " + adminTokenEnv + " is not set: anyone who reaches it can read the operator console")
	}
	if a.limits.Kind == config.BackendMemory && !d.dev {
		d.log.Warn("rate limits are kept in this process: each replica counts on its own; set limiter.redis.addrs to share them")
	}
	return a, nil
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
		BaseURL: cfg.Upstream.URL.URL, Path: vc.Catalogue.Path, Transport: transport, Token: token,
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

// readinessChecks are what /readyz looks at besides draining. Whether a
// failure makes the instance not ready, and what /readyz says it
// degrades, follow the configuration in force (reloads included):
//   - backend: accepts connections; critical (without it every request
//     fails).
//   - catalogue: the market catalogue is loaded; critical while a route
//     validates orders and validation.before_catalogue is reject.
//   - redis (the rate-limit store) answers; critical only while a limited
//     route fails closed without it: with a local or open fallback the
//     gateway still serves, and taking every replica out of the load
//     balancer because the store they share failed would be an outage.
//   - duplicate_protection (its Redis store) answers; not critical for the
//     same reason: only orders with an identifier are refused.
func (a *app) readinessChecks() []proxy.Check {
	u := a.cfg.Upstream.URL
	hostport := u.Host
	if u.Port() == "" {
		if u.Scheme == "https" {
			hostport = net.JoinHostPort(u.Hostname(), "443")
		} else {
			hostport = net.JoinHostPort(u.Hostname(), "80")
		}
	}
	checks := []proxy.Check{{
		Name: "backend", Critical: true,
		Run: func(ctx context.Context) error {
			var dl net.Dialer
			c, err := dl.DialContext(ctx, "tcp", hostport)
			if err != nil {
				return err
			}
			return c.Close()
		},
	}}
	if a.cat != nil {
		cat := a.cat
		checks = append(checks, proxy.Check{
			Name: "catalogue",
			Impact: func() (bool, string) {
				if a.live.Load().Validation.BeforeCatalogue == config.BeforeCataloguePass {
					return false, "orders are checked without the market rules"
				}
				return true, "orders are refused (503 catalogue_unavailable)"
			},
			Run: func(context.Context) error {
				if !a.live.Load().ValidatesOrders() || cat.Ready() {
					return nil
				}
				return errors.New("market catalogue not loaded yet")
			},
		})
	}
	if a.limits.Client != nil {
		checks = append(checks, proxy.Check{
			Name:   "redis",
			Impact: func() (bool, string) { return storeImpact(a.live.Load()) },
			Run:    a.limits.Ping,
		})
	}
	if a.idem != nil {
		idem := a.idem
		checks = append(checks, proxy.Check{
			Name: "duplicate_protection",
			Impact: func() (bool, string) {
				return false, "orders with an identifier are refused (503 duplicate_protection_unavailable): duplicate-protection store unreachable"
			},
			Run: func(ctx context.Context) error { return idem.Ping(ctx).Err() },
		})
	}
	return checks
}

// storeImpact says what a failing rate-limit store degrades under cfg:
// which limited routes answer 503 (on_store_error: closed), are limited
// per replica (local) or not at all (open), and whether that makes the
// instance not ready (only failing closed does).
func storeImpact(cfg *config.Config) (critical bool, degraded string) {
	var byMode = map[string][]string{}
	for _, r := range cfg.Routes {
		if len(r.Limits) == 0 {
			continue
		}
		mode := r.OnStoreError
		if mode == "" {
			mode = cfg.Limiter.OnStoreError
		}
		byMode[mode] = append(byMode[mode], r.Name)
	}
	var parts []string
	for _, m := range []struct{ mode, says string }{
		{config.StoreClosed, "answer 503 rate_limit_unavailable (on_store_error: closed)"},
		{config.StoreLocal, "are limited by each replica on its own (on_store_error: local)"},
		{config.StoreOpen, "are not limited (on_store_error: open)"},
	} {
		if names := byMode[m.mode]; len(names) > 0 {
			parts = append(parts, "routes "+strings.Join(names, ", ")+" "+m.says)
		}
	}
	if len(parts) == 0 {
		return false, "rate-limit store unreachable"
	}
	return len(byMode[config.StoreClosed]) > 0, strings.Join(parts, "; ") + ": rate-limit store unreachable"
}

// loadTokens reads the configuration's tokens file, if any; a relative
// path is taken from the configuration file's directory.
func loadTokens(cfg *config.Config, configPath string) (map[string]string, error) {
	if cfg.TokensFile == "" {
		return nil, nil
	}
	path := fromConfigDir(configPath, cfg.TokensFile)
	tokens, err := limiter.LoadTokens(path, tierNames(cfg))
	if err != nil {
		return nil, fmt.Errorf("tokens_file: %w", err)
	}
	return tokens, nil
}

// checkNamedFiles reads the files the valid configuration at path names:
// the tokens and users files, the Redis TLS files, the traffic listener's
// certificates and the identity key files (PEM public keys and the JWKS
// file; secrets live in the environment of the gateways and are not
// checked here).
func checkNamedFiles(path string, getenv func(string) (string, bool)) error {
	cfg, err := config.Load(path, getenv)
	if err != nil {
		return err
	}
	if _, err := loadTokens(cfg, path); err != nil {
		return err
	}
	if _, err := loadUsers(cfg, path); err != nil {
		return err
	}
	resolveIdentityFiles(cfg, path)
	var files []config.JWTKey
	for _, k := range cfg.Identity.JWT.Keys {
		if k.PublicKeyFile != "" {
			files = append(files, k)
		}
	}
	if _, err := identity.StaticKeys(files, getenv); err != nil {
		return err
	}
	if f := cfg.Identity.JWT.JWKSFile; f != "" {
		if _, err := identity.ReadJWKSFile(f, cfg.Identity.JWT.JWKSAlgorithms); err != nil {
			return err
		}
	}
	resolveRedisFiles(cfg, path)
	if _, err = limiter.RedisTLSConfig(cfg.Limiter.Redis); err != nil {
		return err
	}
	if files := certificateFiles(cfg, path); len(files) > 0 {
		_, err = proxy.LoadCertificates(files, nil, nil)
	}
	return err
}

// certificateFiles returns the traffic listener's certificate files,
// relative paths taken from the configuration file's directory.
func certificateFiles(cfg *config.Config, configPath string) []config.Certificate {
	files := make([]config.Certificate, len(cfg.Server.TLS.Certificates))
	for i, c := range cfg.Server.TLS.Certificates {
		files[i] = config.Certificate{CertFile: fromConfigDir(configPath, c.CertFile), KeyFile: fromConfigDir(configPath, c.KeyFile)}
	}
	return files
}

// loadUsers reads the configuration's users file (user id → tier), if
// any; a relative path is taken from the configuration file's directory.
func loadUsers(cfg *config.Config, configPath string) (map[string]string, error) {
	if cfg.Identity.UsersFile == "" {
		return nil, nil
	}
	users, err := limiter.LoadUsers(fromConfigDir(configPath, cfg.Identity.UsersFile), tierNames(cfg))
	if err != nil {
		return nil, fmt.Errorf("identity.users_file: %w", err)
	}
	return users, nil
}

// tierNames returns the configured tiers, sorted.
func tierNames(cfg *config.Config) []string {
	tiers := make([]string, 0, len(cfg.Tiers))
	for t := range cfg.Tiers {
		tiers = append(tiers, t)
	}
	slices.Sort(tiers)
	return tiers
}

// resolveIdentityFiles makes the identity key files of cfg relative to
// the configuration file's directory.
func resolveIdentityFiles(cfg *config.Config, configPath string) {
	j := &cfg.Identity.JWT
	j.Keys = slices.Clone(j.Keys)
	for i := range j.Keys {
		j.Keys[i].PublicKeyFile = fromConfigDir(configPath, j.Keys[i].PublicKeyFile)
	}
	j.JWKSFile = fromConfigDir(configPath, j.JWKSFile)
}

// fromConfigDir returns path, taken from the directory of the
// configuration file when it is relative.
func fromConfigDir(configPath, path string) string {
	if path == "" || filepath.IsAbs(path) || configPath == "" {
		return path
	}
	return filepath.Join(filepath.Dir(configPath), path)
}

// resolveRedisFiles makes the Redis TLS files of cfg relative to the
// configuration file's directory.
func resolveRedisFiles(cfg *config.Config, configPath string) {
	r := &cfg.Limiter.Redis
	r.TLSCAFile = fromConfigDir(configPath, r.TLSCAFile)
	r.TLSCertFile = fromConfigDir(configPath, r.TLSCertFile)
	r.TLSKeyFile = fromConfigDir(configPath, r.TLSKeyFile)
}

// reloadCertificates reads the traffic listener's certificate files
// again, those the reloaded configuration cfg names when it is not nil.
// A bad file keeps the last good certificates (Certificates.Reload logs
// and counts it).
func (a *app) reloadCertificates(cfg *config.Config) {
	if a.certs == nil {
		return
	}
	var files []config.Certificate
	if cfg != nil && len(cfg.Server.TLS.Certificates) > 0 {
		files = certificateFiles(cfg, a.d.configPath)
	}
	_, _ = a.certs.Reload(files)
}

// reload reads the configuration file and the tokens file again and, when
// both are valid, puts the live settings (config.ReloadModes: routes,
// limits, tiers, token spray, fallback, upstream.timeout, validation
// rules…) in force: requests under way finish under the old ones; none is
// dropped. Restart-only settings keep their value from start, and the
// configuration in force must be valid with them. A bad file changes
// nothing. The log line names what changed and what waits for a restart.
// The certificate files are read again in any case.
func (a *app) reload() error {
	cfg, err := a.reloadConfig()
	a.reloadCertificates(cfg)
	return err
}

// reloadConfig is reload without the certificates; it returns the new
// configuration when it was swapped in.
func (a *app) reloadConfig() (*config.Config, error) {
	cfg, err := config.Load(a.d.configPath, a.d.getenv)
	if err != nil {
		return nil, err
	}
	if a.d.dev {
		devOverrides(cfg)
		cfg.Upstream.URL = a.cfg.Upstream.URL
	}
	eff, live, restart := config.Reloaded(a.live.Load(), cfg)
	if on := len(a.cfg.Server.TLS.Certificates) > 0; on != (len(cfg.Server.TLS.Certificates) > 0) {
		// New certificate files are read on a reload; turning TLS on
		// or off takes a restart.
		eff.Server.TLS.Certificates = a.live.Load().Server.TLS.Certificates
		restart = append(restart, "server.tls.certificates (turning TLS on or off)")
	}
	if err := eff.Validate(); err != nil {
		return nil, fmt.Errorf("with the settings fixed at start (%s): %w", strings.Join(restart, ", "), err)
	}
	tokens, err := loadTokens(eff, a.d.configPath)
	if err != nil {
		return nil, err
	}
	users, err := loadUsers(eff, a.d.configPath)
	if err != nil {
		return nil, err
	}
	var v *validate.Validator
	if eff.ValidatesOrders() {
		if a.cat == nil {
			// The catalogue and duplicate protection are built at start,
			// only when some route validates orders. Putting the route in
			// force without them would forward its orders unchecked and
			// unclaimed, so the reload is refused instead.
			return nil, errors.New("routes: validate: order needs a restart: no route validated orders at start, so the market catalogue and duplicate protection were not built")
		} else if v, err = validate.New(eff.Validation, a.cat, a.log.Named("validate")); err != nil {
			return nil, err
		}
	}
	a.gw.Reload(eff, limiter.Compile(eff, tokens).WithUsers(users), v)
	a.live.Store(eff)
	h := configHash(eff)
	a.cfgHash.Store(&h)
	fields := []zap.Field{zap.Int("routes", len(eff.Routes)), zap.Int("tiers", len(eff.Tiers)), zap.Int("tier_tokens", len(tokens)),
		zap.Int("tier_users", len(users)), zap.Strings("applied", live)}
	if len(restart) > 0 {
		fields = append(fields, zap.Strings("ignored_until_restart", restart))
	}
	a.log.Info("configuration reloaded", fields...)
	return eff, nil
}

// tokenIDs implements `exgate token-id`.
func tokenIDs(args []string, getenv func(string) (string, bool), stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("exgate token-id", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "YAML configuration `file` naming the key secret's variable")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: exgate token-id [-config FILE] < tokens (one per line)")
		return 2
	}
	cfg, err := config.Load(*configPath, getenv)
	if err != nil {
		fmt.Fprintf(stderr, "exgate: configuration errors:\n%v\n", err)
		return 2
	}
	secret, _ := getenv(cfg.Limiter.KeySecretEnv)
	k, err := limiter.NewKeyer([]byte(secret))
	if err != nil {
		fmt.Fprintf(stderr, "exgate: %s: %v (set it to the secret the gateways use)\n", cfg.Limiter.KeySecretEnv, err)
		return 2
	}
	sc := bufio.NewScanner(stdin)
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	for sc.Scan() {
		tok := strings.TrimSpace(sc.Text())
		tok = strings.TrimSpace(strings.TrimPrefix(tok, "Bearer "))
		if tok == "" {
			continue
		}
		fmt.Fprintln(stdout, k.ID(tok))
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(stderr, "exgate:", err)
		return 1
	}
	return 0
}

// serveTraffic serves the gateway on ln, over TLS when certificates are
// configured.
func (a *app) serveTraffic(ln net.Listener) {
	if err := proxy.ServeTraffic(a.srv, ln, a.certs); err != nil && !errors.Is(err, http.ErrServerClosed) {
		a.errc <- fmt.Errorf("gateway: %w", err)
	}
}

func (a *app) serve(name string, s *http.Server, ln net.Listener) {
	if err := s.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		a.errc <- fmt.Errorf("%s: %w", name, err)
	}
}

func (a *app) closeBackend() {
	if a.stopCat != nil {
		a.stopCat()
	}
	if a.stopID != nil {
		a.stopID()
	}
	if a.backend != nil {
		_ = a.backend.Close()
	}
	a.closeStores()
}

// closeStores closes the rate-limit store and duplicate protection's own
// Redis client.
func (a *app) closeStores() {
	if a.idemOwn {
		_ = a.idem.Close()
	}
	if a.limits != nil {
		_ = a.limits.Close()
	}
}

// wait serves until ctx ends or a server fails, then shuts down: /readyz
// turns 503, the listeners close, in-flight requests get up to
// server.shutdown_timeout to finish. It returns the exit code.
func (a *app) wait(ctx context.Context) int {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	changed := make(chan struct{}, 1)
	if a.d.configPath != "" && a.cfg.ReloadInterval > 0 {
		wctx, stopWatch := context.WithCancel(context.Background())
		defer stopWatch()
		go a.watchFiles(wctx, a.cfg.ReloadInterval, changed)
	}
	code := 0
	for running := true; running; {
		select {
		case <-ctx.Done():
			a.log.Info("shutting down", zap.Duration("timeout", a.cfg.Server.ShutdownTimeout))
			running = false
		case err := <-a.errc:
			a.log.Error("server failed", zap.Error(err))
			code, running = 1, false
		case <-hup:
			a.reloadNow()
		case <-changed:
			a.reloadNow()
		}
	}
	if err := a.shutdown(); err != nil {
		a.log.Error("shutdown incomplete", zap.Error(err))
		code = 1
	}
	return code
}

// reloadNow reloads the configuration (on SIGHUP or a watched file's
// change), counts the result and logs a failure.
func (a *app) reloadNow() {
	err := a.reload()
	a.metrics.ConfigReload(err == nil)
	rec := &reloadRecord{at: a.d.now(), outcome: "ok"}
	if err != nil {
		rec.outcome = "failed: " + err.Error()
	}
	a.lastReload.Store(rec)
	if err != nil {
		a.log.Error("configuration reload failed; keeping the last good configuration", zap.Error(err))
	}
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
	if a.stopTLS != nil {
		a.stopTLS()
	}
	if a.stopCat != nil {
		a.stopCat()
	}
	if a.stopID != nil {
		a.stopID()
	}
	a.closeStores()
	return err
}

// redisLogger sends go-redis's own log lines (pool dial failures, …) to
// zap at warn level, at most one a second so that a Redis outage cannot
// flood the log.
type redisLogger struct{ log *zap.Logger }

var redisLogLast atomic.Int64

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	now := time.Now().UnixNano()
	last := redisLogLast.Load()
	if now-last < int64(time.Second) || !redisLogLast.CompareAndSwap(last, now) {
		return
	}
	l.log.Warn(fmt.Sprintf(format, v...))
}

// newLogger builds the process logger: JSON on stderr, or a console
// encoder in dev mode, sampled when log.sampling says so. Outside dev mode
// lines are written in batches (256 KiB, at most a second late) rather
// than one write system call per access log line; run syncs the logger
// before the process exits.
func newLogger(lc config.Log, dev bool, w io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(lc.Level)
	if err != nil {
		return nil, fmt.Errorf("log.level: %w", err)
	}
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.TimeKey = "time"
	encCfg.EncodeTime = zapcore.RFC3339NanoTimeEncoder
	enc := zapcore.NewJSONEncoder(encCfg)
	if dev {
		encCfg.EncodeLevel = zapcore.CapitalLevelEncoder
		encCfg.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
		enc = zapcore.NewConsoleEncoder(encCfg)
	}
	var ws zapcore.WriteSyncer = zapcore.Lock(zapcore.AddSync(w))
	if !dev {
		ws = &zapcore.BufferedWriteSyncer{WS: zapcore.AddSync(w), Size: 256 << 10, FlushInterval: time.Second}
	}
	core := zapcore.NewCore(enc, ws, lvl)
	if lc.Sampling.Initial > 0 {
		core = zapcore.NewSamplerWithOptions(core, time.Second, lc.Sampling.Initial, lc.Sampling.Thereafter)
	}
	return zap.New(core, zap.ErrorOutput(zapcore.Lock(zapcore.AddSync(w)))), nil
}

// version and revision are set at link time by release builds
// (-ldflags "-X main.version=v1.2.0 -X main.revision=…"); otherwise they
// come from the build information the Go toolchain records.
var version, revision string

// buildInfo returns the version, revision and Go version of this binary.
func buildInfo() metrics.BuildInfo {
	bi := metrics.ReadBuildInfo()
	if version != "" {
		bi.Version = version
	}
	if revision != "" {
		bi.Revision = revision
	}
	if bi.Version == "" {
		bi.Version = "devel"
	}
	return bi
}

func versionString() string {
	bi := buildInfo()
	s := "exgate " + bi.Version
	if len(bi.Revision) >= 12 {
		s += " " + bi.Revision[:12]
	} else if bi.Revision != "" {
		s += " " + bi.Revision
	}
	return s
}
