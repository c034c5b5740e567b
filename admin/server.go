package admin

import (
	"net/http"

	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
)

// NewServer returns the admin listener's server for h: short timeouts, it serves
// only small answers.
func NewServer(cfg *config.Config, h http.Handler, log *zap.Logger) *http.Server {
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
