// Command exgate is the API gateway for the trading API: it canonicalises
// and routes every request, refuses what must not reach the backend, and
// forwards the rest.
//
// Usage:
//
//	exgate [-config FILE] [-dev] [-print-config] [-version]
//	exgate check-config [-files=false] FILE
//	exgate token-id [-config FILE] < tokens
//	exgate inspect [-admin URL] (-user ID | -account KEY | -token T | -token-id ID | -address IP) [-json]
//	exgate top (-admin URL | -dns NAME:PORT | -srv NAME)… [-window 1|5|15] [-n N]
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
//
// The package is split by concern (docs/architecture.md lists the
// files): main.go reads the flags and dispatches, app.go wires the parts
// of a gateway and runs it, reload.go puts a reloaded configuration in
// force.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
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

// run is main without the process: it dispatches to a subcommand or runs
// the gateway, and returns the exit code. ctx ends the gateway (a signal,
// in main).
func run(ctx context.Context, args []string, getenv func(string) (string, bool), stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "check-config":
			return checkConfigCommand(args[1:], getenv, os.Stdin, stdout, stderr)
		case "top":
			return topCommand(ctx, args[1:], getenv, stdout, stderr)
		case "inspect":
			return inspectCommand(ctx, args[1:], getenv, stdout, stderr)
		case "token-id":
			return tokenIDCommand(args[1:], getenv, os.Stdin, stdout, stderr)
		}
	}
	return gatewayCommand(ctx, args, getenv, stdout, stderr)
}

// gatewayCommand runs the gateway: it reads the flags and the
// configuration, builds the logger, starts the app and serves until ctx
// ends or a server fails.
func gatewayCommand(ctx context.Context, args []string, getenv func(string) (string, bool), stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("exgate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "YAML configuration `file` (default: built-in defaults)")
	dev := fs.Bool("dev", false, "development mode: also run the reference backend in this process, limits in memory (unless EXGATE_LIMITER_STORE=redis)")
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
		fmt.Fprintln(stdout, versionLine())
		return 0
	}

	var data []byte
	if *configPath != "" {
		var err error
		if data, err = config.ReadFile(*configPath); err != nil {
			fmt.Fprintf(stderr, "exgate: configuration errors:\n%v\n", err)
			return 2
		}
	}
	checked := config.Check(*configPath, data, getenv)
	if err := checked.Problems(); err != nil {
		fmt.Fprintf(stderr, "exgate: configuration errors:\n%v\n", err)
		return 2
	}
	cfg := checked.Config
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

	log, evidence, err := newLogger(cfg.Log, *dev, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "exgate:", err)
		return 2
	}
	if !*dev { // every line says which replica wrote it (one process in dev mode)
		name := zap.String("replica", replicaName(cfg))
		log, evidence = log.With(name), evidence.With(name)
	}
	defer func() { _ = log.Sync() }()
	defer redirectStdLog(log.Named("stdlib"))()
	redis.SetLogger(newRedisLogger(log.Named("redis"), time.Now))

	if *dev {
		getenv = devSecret(getenv, cfg.Limiter.KeySecretEnv)
	}
	a, err := start(cfg, deps{log: log, evidence: evidence, dev: *dev, getenv: getenv, configPath: *configPath,
		configData: data, warnings: checked.Warnings()})
	if err != nil {
		log.Error("cannot start", zap.Error(err))
		return stopped(evidence, 1, "cannot start: "+err.Error())
	}
	if *dev {
		printDevBanner(stdout, a)
	}
	code, why := a.wait(ctx)
	return stopped(evidence, code, why)
}

// stopped writes the process's last log line — its exit code and why it
// stops — and returns the code. A line at error level says the exit is
// not a clean stop.
func stopped(log *zap.Logger, code int, why string) int {
	lvl := zap.InfoLevel
	if code != 0 {
		lvl = zap.ErrorLevel
	}
	log.Log(lvl, "exgate stopped", zap.Int("exit_code", code), zap.String("reason", why))
	return code
}
