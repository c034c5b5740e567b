package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestEdgeSettings checks the TLS, HTTP/2 and PROXY protocol settings:
// defaults, what loads, and every problem named by its YAML path.
func TestEdgeSettings(t *testing.T) {
	d := Default().Server
	if len(d.TLS.Certificates) != 0 || d.TLS.ReloadInterval != 10*time.Second || !d.HTTP2.Enabled ||
		d.HTTP2.MaxConcurrentStreams != 100 || len(d.ProxyProtocol.TrustedPeers) != 0 || d.ProxyProtocol.Policy != ProxyRequired {
		t.Fatalf("defaults: %+v %+v %+v", d.TLS, d.HTTP2, d.ProxyProtocol)
	}
	tests := []struct {
		name  string
		yaml  string
		env   map[string]string
		errs  []string
		check func(t *testing.T, s Server)
	}{
		{name: "full",
			yaml: "server:\n  tls:\n    certificates:\n      - {cert_file: a.crt, key_file: a.key}\n      - {cert_file: /b.crt, key_file: /b.key}\n    reload_interval: 0s\n" +
				"  http2: {enabled: false, max_concurrent_streams: 250}\n  proxy_protocol: {trusted_peers: [10.0.0.0/16, 192.0.2.7], policy: optional}\n",
			check: func(t *testing.T, s Server) {
				want := []Certificate{{"a.crt", "a.key"}, {"/b.crt", "/b.key"}}
				if !slices.Equal(s.TLS.Certificates, want) || s.TLS.ReloadInterval != 0 || s.HTTP2.Enabled || s.HTTP2.MaxConcurrentStreams != 250 {
					t.Errorf("got %+v %+v", s.TLS, s.HTTP2)
				}
				if len(s.ProxyProtocol.TrustedPeers) != 2 || s.ProxyProtocol.TrustedPeers[1].String() != "192.0.2.7/32" || s.ProxyProtocol.Policy != ProxyOptional {
					t.Errorf("got %+v", s.ProxyProtocol)
				}
			}},
		{name: "environment",
			yaml: "server: {tls: {certificates: [{cert_file: a.crt, key_file: a.key}]}}\n",
			env: map[string]string{"EXGATE_SERVER_TLS_CERTIFICATES_0_CERT_FILE": "/run/tls.crt",
				"EXGATE_SERVER_PROXY_PROTOCOL_TRUSTED_PEERS": "10.1.0.0/16,10.2.0.0/16", "EXGATE_SERVER_HTTP2_MAX_CONCURRENT_STREAMS": "50"},
			check: func(t *testing.T, s Server) {
				if s.TLS.Certificates[0].CertFile != "/run/tls.crt" || len(s.ProxyProtocol.TrustedPeers) != 2 || s.HTTP2.MaxConcurrentStreams != 50 {
					t.Errorf("got %+v %+v %+v", s.TLS, s.ProxyProtocol, s.HTTP2)
				}
			}},
		{name: "problems",
			yaml: "server:\n  tls:\n    certificates:\n      - {cert_file: a.crt}\n      - {key_file: b.key}\n    reload_interval: 100ms\n" +
				"  http2: {max_concurrent_streams: 0}\n  proxy_protocol: {policy: always}\n",
			errs: []string{
				"server.tls.certificates[0].key_file: required (line 4)",
				"server.tls.certificates[1].cert_file: required (line 5)",
				"server.tls.reload_interval: must be at least 1s (0 turns polling off), got 100ms (line 6)",
				"server.http2.max_concurrent_streams: must be from 1 to 1000, got 0 (line 7)",
				`server.proxy_protocol.policy: want "required" or "optional", got "always" (line 8)`,
			}},
		{name: "bad prefix",
			yaml: "server: {proxy_protocol: {trusted_peers: [10.0.0.0/33]}}\n",
			errs: []string{"server.proxy_protocol.trusted_peers[0]: "}},
		{name: "unknown key",
			yaml: "server: {tls: {cert_file: a.crt}}\n",
			errs: []string{`server.tls.cert_file: unknown key "cert_file"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv := func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }
			c, err := Parse("test.yaml", []byte(tt.yaml), getenv)
			got := errorStrings(t, err)
			if len(got) != len(tt.errs) {
				t.Fatalf("problems:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tt.errs, "\n  "))
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tt.errs[i]) {
					t.Errorf("problem %q, want %q", got[i], tt.errs[i])
				}
			}
			if err == nil && tt.check != nil {
				tt.check(t, c.Server)
			}
		})
	}
}
