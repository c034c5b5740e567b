package main

import (
	"context"
	"net/http"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/upstream"
)

// backendTLSFiles returns upstream.tls with its relative paths taken from
// the configuration file's directory.
func backendTLSFiles(cfg *config.Config, configPath string) config.BackendTLS {
	t := cfg.Upstream.TLS
	t.CAFile = fromConfigDir(configPath, t.CAFile)
	t.CertFile = fromConfigDir(configPath, t.CertFile)
	t.KeyFile = fromConfigDir(configPath, t.KeyFile)
	return t
}

// startBackendTLS makes tr dial the backends through upstream.tls when
// some instance is dialled over TLS (an https URL, dns.scheme https): the files are read now (a bad one refuses the start,
// naming its YAML path) and again every upstream.tls.reload_interval and
// on SIGHUP.
func (a *app) startBackendTLS(cfg *config.Config, tr *http.Transport) error {
	if !cfg.Upstream.DialsHTTPS() {
		return nil
	}
	ct, err := upstream.LoadClientTLS(backendTLSFiles(cfg, a.d.configPath), "upstream.tls", "", a.log.Named("upstream_tls"))
	if err != nil {
		return err
	}
	ct.OnReload = a.discovery.BackendTLSReload
	a.discovery.SetBackendCertNotAfter(ct.NotAfter())
	ct.Apply(tr)
	ctx, cancel := context.WithCancel(context.Background())
	a.backendTLS, a.stopBackendTLS = ct, cancel
	go ct.Watch(ctx, cfg.Upstream.TLS.ReloadInterval)
	return nil
}

// reloadBackendTLS reads upstream.tls's files again. A bad file keeps
// the last good ones (ClientTLS.Reload logs and counts it).
func (a *app) reloadBackendTLS() {
	if a.backendTLS != nil {
		_, _ = a.backendTLS.Reload(nil)
	}
}

// backendTLSNamedFiles lists upstream.tls's files, for check-config: its
// certificate authorities, and its client certificate and key.
func backendTLSNamedFiles(cfg *config.Config, configPath string) []namedFile {
	t := backendTLSFiles(cfg, configPath)
	var out []namedFile
	if t.CAFile != "" {
		out = append(out, namedFile{"upstream.tls.ca_file", t.CAFile, func() []error {
			return upstream.CheckClientTLS(config.BackendTLS{CAFile: t.CAFile}, "upstream.tls")
		}})
	}
	if t.CertFile != "" && t.KeyFile != "" {
		out = append(out, namedFile{"upstream.tls.cert_file", t.CertFile + ", " + t.KeyFile, func() []error {
			return upstream.CheckClientTLS(config.BackendTLS{CertFile: t.CertFile, KeyFile: t.KeyFile}, "upstream.tls")
		}})
	}
	return out
}
