package main

import (
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/netip"
	"time"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/proxy"
	"github.com/exgate/exgate/topk"
)

// adminTokenEnv names the variable holding the admin console's bearer
// token. Unset, the console is open to whoever reaches the admin listener
// (loopback by default) and reset is refused.
const adminTokenEnv = "EXGATE_ADMIN_TOKEN"

// reloadRecord is the last configuration reload and its outcome.
type reloadRecord struct {
	at      time.Time
	outcome string
}

// configHash is the SHA-256 of the configuration in force, as
// print-config would write it (defaults and overrides applied).
func configHash(cfg *config.Config) string {
	b, err := cfg.Marshal()
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// consoleOptions wires the operator console: the heavy-hitter tracker
// the gateway records into, the admin token, and the status only the
// process knows.
func (a *app) consoleOptions() *proxy.ConsoleOptions {
	token, _ := a.d.getenv(adminTokenEnv)
	return &proxy.ConsoleOptions{
		Token:  token,
		Top:    a.top,
		Logger: a.log.Named("admin"),
		Status: a.processStatus,
	}
}

func (a *app) processStatus() proxy.ProcessStatus {
	bi := buildInfo()
	st := proxy.ProcessStatus{
		Version: bi.Version, Revision: bi.Revision,
		ConfigFile: a.d.configPath,
		Started:    a.started,
		Listeners:  map[string]string{"traffic": a.addr, "admin": a.adminAd},
		Store:      proxy.StoreStatus{Mode: a.limits.Kind},
	}
	if h := a.cfgHash.Load(); h != nil {
		st.ConfigHash = *h
	}
	if r := a.lastReload.Load(); r != nil {
		at := r.at
		st.LastReload, st.ReloadOutcome = &at, r.outcome
	}
	if a.limits.Kind == config.BackendRedis {
		switch r := a.cfg.Limiter.Redis; {
		case r.MasterName != "":
			st.Store.Mode = "redis sentinel"
		case len(r.Addrs) > 1:
			st.Store.Mode = "redis cluster"
		default:
			st.Store.Mode = "redis standalone"
		}
	}
	if a.cat != nil {
		age := -1.0
		if d, ok := a.cat.Age(); ok {
			age = d.Seconds()
		}
		st.CatalogueAge = &age
	}
	return st
}

// newTracker returns the tracker of who hits the limits.
func newTracker(now func() time.Time) *topk.Tracker {
	return topk.NewTracker(topk.TrackerOptions{Now: now})
}

// loopbackAddr reports whether a bound host:port is on a loopback address.
func loopbackAddr(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}
