package proxy

import (
	"context"
	"net"
	"net/http"
	"net/netip"

	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
)

// NewServer returns the traffic server for h with the configured timeouts
// and header limit. net/http itself refuses a request whose headers exceed
// the limit by more than 4 KiB (with a plain-text 431) and a request it
// cannot parse (plain-text 400); every other refusal is exgate's JSON.
func NewServer(cfg *config.Config, h http.Handler, log *zap.Logger) *http.Server {
	if log == nil {
		log = zap.NewNop()
	}
	errLog, _ := zap.NewStdLogAt(log.Named("http"), zap.WarnLevel)
	var trusted []netip.Prefix
	for _, p := range cfg.ClientIP.TrustedProxies {
		trusted = append(trusted, p.Prefix)
	}
	return &http.Server{
		// The peer is worked out once per connection, not per request.
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, peerKey{}, newPeer(c.RemoteAddr().String(), trusted))
		},
		Addr:                         cfg.Listen,
		Handler:                      h,
		ReadHeaderTimeout:            cfg.Server.ReadHeaderTimeout,
		ReadTimeout:                  cfg.Server.ReadTimeout,
		WriteTimeout:                 cfg.Server.WriteTimeout,
		IdleTimeout:                  cfg.Server.IdleTimeout,
		MaxHeaderBytes:               int(cfg.Server.MaxHeaderBytes),
		DisableGeneralOptionsHandler: true,
		ErrorLog:                     errLog,
	}
}

// NewAdminServer returns the admin server for h: short timeouts, it serves
// only small answers.
func NewAdminServer(cfg *config.Config, h http.Handler, log *zap.Logger) *http.Server {
	if log == nil {
		log = zap.NewNop()
	}
	errLog, _ := zap.NewStdLogAt(log.Named("admin"), zap.WarnLevel)
	return &http.Server{
		Addr:              cfg.AdminListen,
		Handler:           h,
		ReadHeaderTimeout: cfg.Server.ReadHeaderTimeout,
		ReadTimeout:       cfg.Server.ReadTimeout,
		WriteTimeout:      cfg.Server.WriteTimeout,
		IdleTimeout:       cfg.Server.IdleTimeout,
		MaxHeaderBytes:    int(cfg.Server.MaxHeaderBytes),
		ErrorLog:          errLog,
	}
}
