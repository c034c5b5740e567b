// Command exchange-sim runs exgate's reference exchange backend (package
// sim) as its own HTTP server, for demos and benchmarks.
//
// Usage:
//
//	exchange-sim [-listen 127.0.0.1:9000] [-secret KEY | -jwt-key FILE [-print-jwks]] [-credentials KEY:SECRET,...] [-delay D] [-v]
//
// The JWT key defaults to $EXGATE_SIM_SECRET, else to the public
// development key sim.DevSecret (HS256). With -jwt-key, tokens are signed
// with RS256 by the RSA private key in that PEM file (as SimpleJWT's
// ALGORITHM: RS256), and its public key is served as a JWKS at
// /.well-known/jwks.json; -print-jwks prints that JWKS and exits, for
// a gateway's identity.jwt.jwks_file. The credentials default to
// $EXGATE_SIM_CREDENTIALS, else to the single account dev:dev. -delay
// holds every answer that long (a slow instance, for fleet tests and
// benchmarks). SIGINT or SIGTERM shuts the server down gracefully.
package main

import (
	"context"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
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
	jwtKey := fs.String("jwt-key", "", "PEM `file` of an RSA private key: sign tokens with RS256 (instead of -secret's HS256) and serve its JWKS at /.well-known/jwks.json")
	printJWKS := fs.Bool("print-jwks", false, "print the JWKS of -jwt-key's public key and exit")
	verbose := fs.Bool("v", false, "log every request")
	delay := fs.Duration("delay", 0, "hold every answer this long: a slow instance")
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
	switch {
	case *jwtKey != "":
		key, err := readRSAKey(*jwtKey)
		if err != nil {
			return err
		}
		opts.SigningKey = key
	case *printJWKS:
		return errors.New("-print-jwks needs -jwt-key")
	case *secret != "":
		opts.Secret = []byte(*secret)
	default:
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

	server, err := sim.NewChecked(opts)
	if err != nil {
		return err
	}
	if *printJWKS {
		_, err := fmt.Fprintf(stdout, "%s\n", server.JWKS())
		return err
	}
	var handler http.Handler = server
	if *delay > 0 {
		handler = delayed(*delay, handler)
	}
	if *verbose {
		handler = accessLog(logger, handler)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	return serve(ctx, logger, ln, handler)
}

// serve serves handler on ln until ctx is done, then shuts the server down
// gracefully, giving requests in flight up to 10 seconds to finish.
func serve(ctx context.Context, logger *zap.Logger, ln net.Listener, handler http.Handler) error {
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

// readRSAKey reads an RSA private key from a PEM file: PKCS #8 ("PRIVATE
// KEY", as openssl genpkey writes it) or PKCS #1 ("RSA PRIVATE KEY").
func readRSAKey(path string) (*rsa.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("-jwt-key: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("-jwt-key: %s holds no PEM block", path)
	}
	var key any
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("-jwt-key: %s holds a %s, not an RSA private key", path, block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("-jwt-key: %s: %w", path, err)
	}
	rk, ok := key.(*rsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("-jwt-key: %s holds a %T, not an RSA private key", path, key)
	}
	return rk, nil
}

// delayed holds every request d (or until its client goes) before h
// answers it.
func delayed(d time.Duration, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			h.ServeHTTP(w, r)
		case <-r.Context().Done():
		}
	})
}
