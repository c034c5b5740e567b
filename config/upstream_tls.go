package config

import "time"

// BackendTLS is how exgate dials a service's instances over TLS (an
// https URL, or dns.scheme https): the certificate authorities their
// certificates are checked against, the client certificate exgate
// presents to them (mutual TLS), the name their certificates must be
// valid for, and whether HTTP/2 is offered. The files are read again
// every ReloadInterval and on SIGHUP, like the traffic listener's
// certificates; a set that fails to load keeps the last good one.
type BackendTLS struct {
	// CAFile is a PEM file of the certificate authorities that sign the
	// instances' certificates (a private CA); "" means the system's. A
	// relative path is taken from the configuration file's directory.
	// Default "".
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are the PEM certificate chain and key exgate
	// presents to instances that ask for one (mutual TLS). Both or
	// neither. Default "".
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName is the name the instances' certificates must be valid
	// for, sent as SNI; "" means the host of the URL, or dns.name (or
	// dns.srv's target) for instances found through DNS. Default "".
	ServerName string `yaml:"server_name"`
	// HTTP2 offers HTTP/2 through ALPN; an instance that accepts it gets
	// its requests multiplexed on few connections, one that does not
	// gets HTTP/1.1. Default true.
	HTTP2 bool `yaml:"http2"`
	// ReloadInterval is how often the files are read again and, when
	// their content changed, used for new connections (established ones
	// keep theirs); 0 turns polling off (SIGHUP still reloads). Default
	// 10s.
	ReloadInterval time.Duration `yaml:"reload_interval"`
}

// defaultBackendTLS returns the backend TLS defaults: the system's
// authorities, no client certificate, HTTP/2 offered, files reread every
// 10s.
func defaultBackendTLS() BackendTLS {
	return BackendTLS{HTTP2: true, ReloadInterval: 10 * time.Second}
}

// fillDefaults gives a service's own tls block upstream.tls's defaults
// before the file's values are read over them.
func (t *BackendTLS) fillDefaults() { *t = defaultBackendTLS() }

// Files reports whether t names a file to read (a CA, or a client
// certificate and key).
func (t *BackendTLS) Files() bool { return t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" }

// check reports problems in the backend TLS settings at p; https says
// whether the service it belongs to dials over TLS.
func (t *BackendTLS) check(col *collector, p path, https bool) {
	if (t.CertFile == "") != (t.KeyFile == "") {
		if t.CertFile == "" {
			col.addf(p.key("cert_file"), "required with %s", p.key("key_file"))
		} else {
			col.addf(p.key("key_file"), "required with %s", p.key("cert_file"))
		}
	}
	if !https && (t.Files() || t.ServerName != "") {
		col.addf(p, "set, but the service's instances are dialled over plain HTTP: use an https URL (or dns.scheme: https)")
	}
	if t.ReloadInterval != 0 && t.ReloadInterval < time.Second {
		col.addf(p.key("reload_interval"), "must be at least 1s (0 turns polling off), got %s", t.ReloadInterval)
	}
}
