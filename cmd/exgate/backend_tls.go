package main

import (
	"context"
	"net/http"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/upstream"
)

// backendTLSBlock is one set of TLS settings services' instances are
// dialled with: upstream.tls, or a service's own tls block.
type backendTLSBlock struct {
	where    string // its YAML path
	files    config.BackendTLS
	services []string // the services dialled over TLS with it
	own      bool     // a service's own block, dialled over a Transport of its own
}

// backendTLSBlocks lists the TLS settings of cfg's services that dial
// https instances, upstream.tls first (when a service without a block
// of its own dials https), with their relative paths taken from the
// configuration file's directory.
func backendTLSBlocks(cfg *config.Config, configPath string) []backendTLSBlock {
	shared := backendTLSBlock{where: "upstream.tls"}
	var own []backendTLSBlock
	for _, name := range cfg.Upstream.ServiceNames() {
		s, _ := cfg.Upstream.Service(name)
		if !s.DialsHTTPS() {
			continue
		}
		if s.TLS == nil {
			shared.services = append(shared.services, name)
			continue
		}
		t, where := cfg.Upstream.ServiceTLS(name)
		own = append(own, backendTLSBlock{where: where, files: t, services: []string{name}, own: true})
	}
	shared.files = cfg.Upstream.TLS
	blocks := own
	if len(shared.services) > 0 {
		blocks = append([]backendTLSBlock{shared}, own...)
	}
	for i := range blocks {
		t := &blocks[i].files
		t.CAFile = fromConfigDir(configPath, t.CAFile)
		t.CertFile = fromConfigDir(configPath, t.CertFile)
		t.KeyFile = fromConfigDir(configPath, t.KeyFile)
	}
	return blocks
}

// startBackendTLS makes the Transports dial https instances through their
// service's TLS settings: tr, the fleet's, through upstream.tls; a
// service with a tls block of its own gets a Transport of its own (the
// pool settings of upstream), so that no connection dialled with one
// block's certificate carries another service's requests. The files are
// read now (a bad one refuses the start, naming its YAML path) and again
// every reload_interval and on SIGHUP.
func (a *app) startBackendTLS(cfg *config.Config, tr *http.Transport) error {
	ctx, cancel := context.WithCancel(context.Background())
	a.stopBackendTLS = cancel
	a.backendTLS, a.serviceTransports = map[string]*upstream.ClientTLS{}, map[string]http.RoundTripper{}
	for _, b := range backendTLSBlocks(cfg, a.d.configPath) {
		ct, err := upstream.LoadClientTLS(b.files, b.where, "", a.log.Named("upstream_tls"))
		if err != nil {
			return err
		}
		ct.OnReload = a.discovery.BackendTLS(b.services, ct.NotAfter())
		dial := tr
		if b.own {
			dial = upstream.NewTransport(cfg.Upstream)
			a.serviceTransports[b.services[0]] = dial
		}
		ct.Apply(dial)
		for _, name := range b.services {
			a.backendTLS[name] = ct
		}
		go ct.Watch(ctx, b.files.ReloadInterval)
	}
	return nil
}

// serviceTransport returns the Transport of service name when it has one
// of its own (a tls block of its own), else nil: the fleet's.
func (a *app) serviceTransport(name string) http.RoundTripper { return a.serviceTransports[name] }

// reloadBackendTLS reads every TLS block's files again. A bad file keeps
// the last good ones (ClientTLS.Reload logs and counts it).
func (a *app) reloadBackendTLS() {
	done := map[*upstream.ClientTLS]bool{}
	for _, ct := range a.backendTLS {
		if !done[ct] {
			done[ct] = true
			_, _ = ct.Reload(nil)
		}
	}
}

// backendTLSNamedFiles lists the backend TLS blocks' files, for
// check-config: their certificate authorities, and their client
// certificates and keys.
func backendTLSNamedFiles(cfg *config.Config, configPath string) []namedFile {
	var out []namedFile
	for _, b := range backendTLSBlocks(cfg, configPath) {
		t := b.files
		if t.CAFile != "" {
			out = append(out, namedFile{b.where + ".ca_file", t.CAFile, func() []error {
				return upstream.CheckClientTLS(config.BackendTLS{CAFile: t.CAFile}, b.where)
			}})
		}
		if t.CertFile != "" && t.KeyFile != "" {
			out = append(out, namedFile{b.where + ".cert_file", t.CertFile + ", " + t.KeyFile, func() []error {
				return upstream.CheckClientTLS(config.BackendTLS{CertFile: t.CertFile, KeyFile: t.KeyFile}, b.where)
			}})
		}
	}
	return out
}
