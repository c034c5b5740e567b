// Command exgate is the API gateway for the trading API: it canonicalises
// and routes every request, refuses what must not reach the backend, and
// forwards the rest.
//
// Usage:
//
//	exgate [-config FILE] [-dev] [-print-config] [-version]
//	exgate check-config FILE
//
// With no file, exgate runs with the built-in defaults (the trading API's
// limits table); EXGATE_<PATH> environment variables override any scalar.
// -dev also starts the reference backend in this process, on a free
// loopback port, with in-memory state.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/proxy"
	"github.com/exgate/exgate/sim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
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
		if !config.CheckFile(args[1], getenv, stdout) {
			return 1
		}
		return 0
	}

	fs := flag.NewFlagSet("exgate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "YAML configuration `file` (default: built-in defaults)")
	dev := fs.Bool("dev", false, "development mode: also run the reference backend in this process, limits in memory")
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
		// The backend is started below; limits stay in this process.
		cfg.Limiter.Backend = config.BackendMemory
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

	log, err := newLogger(cfg.Log.Level, *dev, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "exgate:", err)
		return 2
	}
	defer func() { _ = log.Sync() }()

	a, err := start(cfg, deps{log: log, now: time.Now, dev: *dev})
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
	log *zap.Logger
	now func() time.Time
	dev bool
}

// app is a started gateway: listeners bound and serving.
type app struct {
	cfg      *config.Config
	log      *zap.Logger
	gw       *proxy.Gateway
	srv      *http.Server
	admin    *http.Server
	backend  *http.Server // dev mode only
	addr     string       // bound traffic address
	adminAd  string       // bound admin address
	backAddr string       // dev backend address
	errc     chan error
}

// start binds every listener and starts serving. In dev mode it first
// starts the reference backend on a free loopback port and points the
// upstream at it.
func start(cfg *config.Config, d deps) (*app, error) {
	a := &app{cfg: cfg, log: d.log, errc: make(chan error, 3)}
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
	gw, err := proxy.New(cfg, proxy.Options{Logger: d.log.Named("gateway"), Now: d.now})
	if err != nil {
		a.closeBackend()
		return nil, err
	}
	a.gw = gw
	a.srv = proxy.NewServer(cfg, gw, d.log)
	a.admin = proxy.NewAdminServer(cfg, gw.AdminHandler(), d.log)

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
	go a.serve("gateway", a.srv, ln)
	go a.serve("admin", a.admin, aln)
	d.log.Info("exgate started",
		zap.String("listen", a.addr), zap.String("admin_listen", a.adminAd),
		zap.String("upstream", cfg.Upstream.URL.String()), zap.Int("routes", len(cfg.Routes)),
		zap.String("version", versionString()))
	if limitsConfigured(cfg) {
		d.log.Info("rate limits are configured; this build validates them but does not enforce them yet")
	}
	return a, nil
}

func (a *app) serve(name string, s *http.Server, ln net.Listener) {
	if err := s.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		a.errc <- fmt.Errorf("%s: %w", name, err)
	}
}

func (a *app) closeBackend() {
	if a.backend != nil {
		_ = a.backend.Close()
	}
}

// wait serves until ctx ends or a server fails, then shuts down: /readyz
// turns 503, the listeners close, in-flight requests get up to
// server.shutdown_timeout to finish. It returns the exit code.
func (a *app) wait(ctx context.Context) int {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
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
			a.log.Warn("SIGHUP ignored: configuration reload is not supported by this build; restart to apply changes")
		}
	}
	if err := a.shutdown(); err != nil {
		a.log.Error("shutdown incomplete", zap.Error(err))
		code = 1
	}
	return code
}

// shutdown drains and stops every server.
func (a *app) shutdown() error {
	a.gw.SetDraining()
	ctx, cancel := context.WithTimeout(context.Background(), a.cfg.Server.ShutdownTimeout)
	defer cancel()
	err := a.srv.Shutdown(ctx)
	_ = a.admin.Shutdown(ctx)
	if a.backend != nil {
		_ = a.backend.Shutdown(ctx)
	}
	a.gw.CloseIdleConnections()
	return err
}

func limitsConfigured(cfg *config.Config) bool {
	for _, r := range cfg.Routes {
		if len(r.Limits) > 0 {
			return true
		}
	}
	return false
}

// newLogger builds the process logger: JSON on stderr, or a console
// encoder in dev mode.
func newLogger(level string, dev bool, w io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
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
	core := zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), lvl)
	return zap.New(core, zap.ErrorOutput(zapcore.Lock(zapcore.AddSync(w)))), nil
}

func versionString() string {
	v, rev := "devel", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				rev = " " + s.Value[:12]
			}
		}
	}
	return "exgate " + v + rev
}
