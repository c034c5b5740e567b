package main

import (
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/netip"
	"os"
	"slices"
	"time"

	"github.com/exgate/exgate/admin"
	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/metrics"
	"github.com/exgate/exgate/topk"
)

// adminTokenEnv is the variable `exgate top` and `exgate inspect` read
// the admin token from unless -token-env names another; the gateway
// reads the one admin.token_env names (by default the same).
var adminTokenEnv = config.DefaultAdmin().TokenEnv

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

// adminOptions wires the admin listener's handler: readiness checks,
// metrics, pprof, and the operator console (the heavy-hitter tracker the
// gateway records into, the status only the process knows) behind the
// admin token and the Host allow-list. Without a token, the console and
// pprof are refused while the listener is bound beyond loopback.
func (a *app) adminOptions(cfg *config.Config) admin.Options {
	token, _ := a.d.getenv(cfg.Admin.TokenEnv)
	return admin.Options{
		Checks: a.readinessChecks(), Pprof: cfg.Admin.Pprof, Now: a.d.now,
		Metrics: metrics.Handler(a.d.reg),
		Console: &admin.ConsoleOptions{
			Top:     a.top,
			Limits:  a.limits.Enforcer,
			Metrics: a.metrics,
			Fleet:   a.fleet,
			Logger:  a.log.Named("admin"),
			Status:  a.processStatus,
			Replica: a.replica,
			Started: a.started,
		},
		Token: token, TokenEnv: cfg.Admin.TokenEnv,
		RequireToken: !loopbackAddr(a.adminAd),
		AllowedHosts: adminHosts(cfg),
	}
}

// replicaName is this process's name among the replicas: the replica
// setting, else the host name (in Kubernetes, the pod's name).
func replicaName(cfg *config.Config) string {
	if cfg.Replica != "" {
		return cfg.Replica
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "exgate"
}

// adminHosts are the names the console answers to besides addresses and
// localhost: admin.allowed_hosts, the host of admin_listen when it is a
// name, and the machine's host name (an operator's curl on the host).
func adminHosts(cfg *config.Config) []string {
	hosts := slices.Clone(cfg.Admin.AllowedHosts)
	if h, _, err := net.SplitHostPort(cfg.AdminListen); err == nil && h != "" {
		hosts = append(hosts, h)
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		hosts = append(hosts, h)
	}
	return hosts
}

func (a *app) processStatus() admin.ProcessStatus {
	bi := buildInfo()
	st := admin.ProcessStatus{
		Version: bi.Version, Revision: bi.Revision,
		ConfigFile: a.d.configPath,
		Started:    a.started,
		Listeners:  map[string]string{"traffic": a.addr, "admin": a.adminAd},
		Store:      admin.StoreStatus{Mode: a.limits.Kind},
	}
	if h := a.cfgHash.Load(); h != nil {
		st.ConfigHash = *h
	}
	if r := a.lastReload.Load(); r != nil {
		at := r.at
		st.LastReload, st.ReloadOutcome = &at, r.outcome
	}
	if a.limits.Kind == config.StoreRedis {
		st.Store.Mode = redisTopology(a.cfg.Limiter.Redis)
	}
	if a.dup != nil {
		st.Idempotency = a.dup.status()
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
