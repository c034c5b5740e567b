package admin

import (
	"context"
	"net"
	"net/http"

	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/edge"
	"github.com/exgate/exgate/proxy"
)

// NewServer returns the admin listener's server for h: short timeouts, it
// serves only small answers. Served on a listener whose connections are
// shared between client addresses (edge.ShareAdminConnections), it
// answers the first request of a connection past its address's share 503
// too_many_connections (Retry-After: 1), in the one error shape, and
// closes the connection.
func NewServer(cfg *config.Config, h http.Handler, log *zap.Logger) *http.Server {
	if log == nil {
		log = zap.NewNop()
	}
	errLog, _ := zap.NewStdLogAt(log.Named("admin"), zap.WarnLevel)
	return &http.Server{
		Addr:              cfg.AdminListen,
		Handler:           refusePastShare(h),
		ConnContext:       withConn,
		ReadHeaderTimeout: cfg.Server.ReadHeaderTimeout,
		ReadTimeout:       cfg.Server.ReadTimeout,
		WriteTimeout:      cfg.Server.WriteTimeout,
		IdleTimeout:       cfg.Server.IdleTimeout,
		MaxHeaderBytes:    int(cfg.Server.MaxHeaderBytes),
		ErrorLog:          errLog,
	}
}

// connKey keys a request's connection in its context.
type connKey struct{}

// withConn keeps c in the context of its requests, for refusePastShare.
func withConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// refusePastShare answers a request on a connection past its address's
// share 503 too_many_connections and closes the connection; it passes
// every other request to h.
func refusePastShare(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := r.Context().Value(connKey{}).(net.Conn); ok && edge.PastShare(c) {
			w.Header().Set("Connection", "close")
			proxy.WriteError(w, "", proxy.TooManyConnections())
			return
		}
		h.ServeHTTP(w, r)
	})
}
