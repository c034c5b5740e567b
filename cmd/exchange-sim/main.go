// Command exchange-sim runs exgate's reference exchange backend (package
// sim) as its own HTTP server, for demos and benchmarks.
//
// Usage:
//
//	exchange-sim [-listen 127.0.0.1:9000] [-secret KEY] [-credentials KEY:SECRET,...] [-v]
//
// The JWT key defaults to $EXGATE_SIM_SECRET, else to the public
// development key sim.DevSecret. The credentials default to
// $EXGATE_SIM_CREDENTIALS, else to the single account dev:dev. SIGINT or
// SIGTERM shuts the server down gracefully.
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
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/exgate/exgate/sim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "exchange-sim:", err)
		os.Exit(1)
	}
}

// run parses args, serves the simulator until ctx is done, then shuts it
// down gracefully. Logs and usage go to stdout. The listener's address is
// logged with the message "listening" and the field "addr".
func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("exchange-sim", flag.ContinueOnError)
	fs.SetOutput(stdout)
	listen := fs.String("listen", "127.0.0.1:9000", "address to serve on")
	secret := fs.String("secret", "", "HS256 key for JWTs (default $EXGATE_SIM_SECRET, else the public dev key)")
	credentials := fs.String("credentials", "", "accounts as api_key:secret_key,... (default $EXGATE_SIM_CREDENTIALS, else dev:dev)")
	verbose := fs.Bool("v", false, "log every request")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}

	logger := zap.New(zapcore.NewCore(
		zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()),
		zapcore.Lock(zapcore.AddSync(stdout)),
		zap.InfoLevel,
	))
	defer func() { _ = logger.Sync() }()

	var opts sim.Options
	if *secret == "" {
		*secret = os.Getenv("EXGATE_SIM_SECRET")
	}
	if *secret != "" {
		opts.Secret = []byte(*secret)
	} else {
		logger.Warn("using the public development JWT secret; set -secret or EXGATE_SIM_SECRET")
	}
	if *credentials == "" {
		*credentials = os.Getenv("EXGATE_SIM_CREDENTIALS")
	}
	if *credentials != "" {
		creds, err := parseCredentials(*credentials)
		if err != nil {
			return err
		}
		opts.Credentials = creds
	}

	var handler http.Handler = sim.New(opts)
	if *verbose {
		handler = accessLog(logger, handler)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          zap.NewStdLog(logger),
	}
	logger.Info("listening", zap.String("addr", ln.Addr().String()))
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	logger.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return err
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	logger.Info("stopped")
	return nil
}

// parseCredentials parses "api_key:secret_key,...".
func parseCredentials(s string) (map[string]string, error) {
	creds := make(map[string]string)
	for pair := range strings.SplitSeq(s, ",") {
		key, secret, ok := strings.Cut(strings.TrimSpace(pair), ":")
		if !ok || key == "" || secret == "" {
			return nil, fmt.Errorf("credentials: %q is not api_key:secret_key", pair)
		}
		creds[key] = secret
	}
	return creds, nil
}

// statusWriter records the status code written through it.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// accessLog logs one line per request handled by next.
func accessLog(logger *zap.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r)
		logger.Info("request",
			zap.String("method", r.Method),
			zap.String("path", r.URL.Path),
			zap.Int("status", sw.status),
			zap.Duration("duration", time.Since(start)),
		)
	})
}
