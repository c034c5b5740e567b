package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/limiter"
	"github.com/exgate/exgate/validate"
)

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

// reload reads the configuration file, the tokens file and the users file
// again and, when they are valid, puts the live settings (the reload tags
// of config: routes, limits, tiers, upstream.timeout, validation rules,
// overload, CORS…) in force: requests under way finish under the old ones;
// none is dropped. Restart-only settings keep their value from start, and
// the configuration in force must be valid with them. A bad file changes
// nothing. The log line names what changed and what waits for a restart
// (config.Reloaded). The certificate files are read again in any case.
func (a *app) reload() error {
	cfg, err := a.reloadConfig()
	a.reloadCertificates(cfg)
	a.reloadBackendTLS()
	return err
}

// reloadConfig is reload without the certificates; it returns the new
// configuration when it was swapped in.
func (a *app) reloadConfig() (*config.Config, error) {
	if a.d.configPath != "" && !rereadable(a.d.configPath) {
		return nil, fmt.Errorf("the configuration was read from %s, a pipe or device, which gives it once: restart exgate to change it", a.d.configPath)
	}
	cfg, err := config.Load(a.d.configPath, a.d.getenv)
	if err != nil {
		return nil, err
	}
	if a.d.dev {
		devOverrides(cfg)
		cfg.Upstream.URL, cfg.Upstream.URLs = a.cfg.Upstream.URL, nil
	}
	eff, live, restart := config.Reloaded(a.live.Load(), cfg)
	if on := len(a.cfg.Server.TLS.Certificates) > 0; on != (len(cfg.Server.TLS.Certificates) > 0) {
		// New certificate files are read on a reload; turning TLS on
		// or off takes a restart.
		eff.Server.TLS.Certificates = a.live.Load().Server.TLS.Certificates
		live = slices.DeleteFunc(live, func(path string) bool { return path == "server.tls.certificates" })
		restart = append(restart, "server.tls.certificates (turning TLS on or off)")
	}
	if err := eff.Validate(); err != nil {
		return nil, fmt.Errorf("with the settings fixed at start (%s): %w", strings.Join(restart, ", "), err)
	}
	tokens, users, err := loadTiers(eff, a.d.configPath, readOnce{})
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
