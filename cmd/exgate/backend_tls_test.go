package main

import (
	"bytes"
	"crypto/tls"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/tlstest"
	"github.com/exgate/exgate/sim"
)

// mtlsSim is the reference backend served over TLS (HTTP/2 offered) with
// a client certificate of ca required, recording the protocol and the
// client certificate's name of each request.
type mtlsSim struct {
	srv        *httptest.Server
	mu         sync.Mutex
	proto, cn  string
	handshakes int
}

func startMTLSSim(t *testing.T, ca *tlstest.CA, dir string) *mtlsSim {
	t.Helper()
	leaf := ca.Issue(dir, "backend", []string{"backend.test"}, tlstest.Options{})
	cert, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	m := &mtlsSim{}
	h := sim.New(sim.Options{})
	m.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		m.proto, m.cn = r.Proto, r.TLS.PeerCertificates[0].Subject.CommonName
		m.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	m.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool}
	m.srv.EnableHTTP2 = true
	m.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	m.srv.StartTLS()
	t.Cleanup(m.srv.Close)
	return m
}

func (m *mtlsSim) last() (proto, cn string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.proto, m.cn
}

// replaceFile writes b to path as a Secret volume's update lands: whole,
// through a rename.
func replaceFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// TestBackendMutualTLS runs exgate in front of the reference backend
// served over TLS that requires a client certificate of a private CA:
// exgate verifies the backend against the CA for upstream.tls.server_name,
// presents its client certificate, speaks HTTP/2 to it, and picks up a
// rotated client certificate from its files without a restart. Without a
// client certificate the backend refuses the handshake and the client
// gets exgate's JSON 502.
func TestBackendMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir)
	backend := startMTLSSim(t, ca, dir)
	a1 := ca.Issue(t.TempDir(), "c", []string{"exgate-a"}, tlstest.Options{Client: true})
	a2 := ca.Issue(t.TempDir(), "c", []string{"exgate-b"}, tlstest.Options{Client: true})
	certFile, keyFile := filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	replaceFile(t, certFile, a1.CertPEM)
	replaceFile(t, keyFile, a1.KeyPEM)

	gateway := func(t *testing.T, withCert bool) *app {
		cfg := config.Default()
		cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
		cfg.Server.DrainDelay = 0
		cfg.Upstream.URL = config.MustURL(backend.srv.URL)
		cfg.Upstream.TLS.CAFile, cfg.Upstream.TLS.ServerName = ca.File, "backend.test"
		cfg.Upstream.TLS.ReloadInterval = time.Second
		if withCert {
			cfg.Upstream.TLS.CertFile, cfg.Upstream.TLS.KeyFile = certFile, keyFile
		}
		return startApp(t, cfg, deps{log: zap.NewNop(), now: time.Now})
	}
	t.Run("mutual TLS, HTTP/2, rotation", func(t *testing.T) {
		a := gateway(t, true)
		url := "http://" + a.addr + "/api/v1/mkt/markets/"
		if code, _, body := call(t, "GET", url, ""); code != 200 {
			t.Fatalf("GET markets: %d %s", code, body)
		}
		if proto, cn := backend.last(); proto != "HTTP/2.0" || cn != "exgate-a" {
			t.Fatalf("the backend saw %s from %q, want HTTP/2.0 from exgate-a", proto, cn)
		}
		replaceFile(t, certFile, a2.CertPEM)
		replaceFile(t, keyFile, a2.KeyPEM)
		// Established connections keep their certificate; the backend
		// drops them until a new one presents the rotated certificate.
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
			backend.srv.CloseClientConnections()
			if code, _, body := call(t, "GET", url, ""); code != 200 && code != 502 {
				t.Fatalf("GET markets during the rotation: %d %s", code, body)
			}
			if _, cn := backend.last(); cn == "exgate-b" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the rotated client certificate was not presented within a minute")
			}
		}
		if got := scrapeAdmin(t, a.adminAd); !strings.Contains(got, `exgate_upstream_tls_reloads_total{result="success",service="default"} 1`) {
			t.Errorf("metrics do not count the reload:\n%s", grepLines(got, "exgate_upstream_tls"))
		}
	})
	t.Run("no client certificate", func(t *testing.T) {
		a := gateway(t, false)
		code, _, body := call(t, "GET", "http://"+a.addr+"/api/v1/mkt/markets/", "")
		if code != 502 || !bytes.Contains(body, []byte(`"code":"bad_gateway"`)) {
			t.Fatalf("GET markets without a client certificate: %d %s, want 502 bad_gateway", code, body)
		}
	})
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestBackendTLSFilesChecked: check-config reads upstream.tls's files and
// names the bad one by its YAML path, and exgate refuses to start with
// it.
func TestBackendTLSFilesChecked(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir)
	ca.Issue(dir, "good", []string{"exgate"}, tlstest.Options{Client: true})
	ca.Issue(dir, "other", []string{"exgate"}, tlstest.Options{Client: true})
	if err := os.WriteFile(filepath.Join(dir, "bad-ca.crt"), []byte("not PEM\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, tls, want string }{
		{"good, relative to the file", "{ca_file: ca.crt, cert_file: good.crt, key_file: good.key}", "ok"},
		{"CA not PEM", "{ca_file: bad-ca.crt}", "upstream.tls.ca_file: " + filepath.Join(dir, "bad-ca.crt") + " holds no PEM certificate"},
		{"key of another certificate", "{cert_file: good.crt, key_file: other.key}", "upstream.tls.cert_file: "},
		{"key without a certificate", "{key_file: good.key}", "upstream.tls.cert_file: required with upstream.tls.key_file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "exgate.yaml")
			yaml := "upstream:\n  url: https://backend.test:9443\n  tls: " + tc.tls + "\n"
			if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			code := run(t.Context(), []string{"check-config", path}, func(string) (string, bool) { return "", false }, &out, &errb)
			if !strings.Contains(out.String(), tc.want) || (code == 0) != (tc.want == "ok") {
				t.Fatalf("exit %d, output %q; want %q", code, out.String(), tc.want)
			}
		})
	}
	t.Run("a service's own block", func(t *testing.T) {
		path := filepath.Join(dir, "exgate.yaml")
		yaml := "upstream:\n  url: https://backend.test:9443\n  tls: {ca_file: ca.crt}\n  services:\n    md: {urls: ['https://md.test'], tls: {ca_file: bad-ca.crt}}\n"
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		code := run(t.Context(), []string{"check-config", path}, func(string) (string, bool) { return "", false }, &out, &errb)
		if want := "upstream.services.md.tls.ca_file: " + filepath.Join(dir, "bad-ca.crt") + " holds no PEM certificate"; code == 0 || !strings.Contains(out.String(), want) {
			t.Fatalf("exit %d, output %q; want %q", code, out.String(), want)
		}
	})
	t.Run("start refused", func(t *testing.T) {
		cfg := config.Default()
		cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
		cfg.Upstream.URL = config.MustURL("https://127.0.0.1:1")
		cfg.Upstream.TLS.CAFile = filepath.Join(dir, "bad-ca.crt")
		if a, err := start(cfg, deps{log: zap.NewNop(), now: time.Now}); err == nil {
			_ = a.shutdown()
			t.Fatal("started with a CA file that holds no certificate")
		} else if !strings.HasPrefix(err.Error(), "upstream.tls.ca_file: ") {
			t.Fatalf("start: %v, want the error to name upstream.tls.ca_file", err)
		}
	})
	t.Run("plain http", func(t *testing.T) {
		_, err := config.Parse("exgate.yaml", []byte("upstream:\n  url: http://backend.test:9000\n  tls: {server_name: backend.test}\n"), func(string) (string, bool) { return "", false })
		if err == nil || !strings.Contains(err.Error(), "upstream.tls: set, but") {
			t.Fatalf("tls settings with an http URL: %v, want refused", err)
		}
	})
}

// TestBackendTLSPerService runs two services whose instances are signed
// by two private CAs and ask for client certificates of their own CA:
// the default service is dialled through upstream.tls, the market-data
// service through its own tls block, each presenting its own client
// certificate over a Transport of its own. Without the service's block
// the market-data instance is dialled with upstream.tls, whose CA does
// not sign it: 502, and the default service is unaffected.
func TestBackendTLSPerService(t *testing.T) {
	dirA, dirB := t.TempDir(), t.TempDir()
	caA, caB := tlstest.NewCA(t, dirA), tlstest.NewCA(t, dirB)
	core, md := startMTLSSim(t, caA, dirA), startMTLSSim(t, caB, dirB)
	clientA := caA.Issue(dirA, "client", []string{"exgate-core"}, tlstest.Options{Client: true})
	clientB := caB.Issue(dirB, "client", []string{"exgate-md"}, tlstest.Options{Client: true})

	gateway := func(t *testing.T, ownBlock bool) *app {
		cfg := config.Default()
		cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
		cfg.Server.DrainDelay = 0
		cfg.Upstream.URL = config.MustURL(core.srv.URL)
		cfg.Upstream.TLS.CAFile, cfg.Upstream.TLS.ServerName = caA.File, "backend.test"
		cfg.Upstream.TLS.CertFile, cfg.Upstream.TLS.KeyFile = clientA.CertFile, clientA.KeyFile
		svc := config.Service{URLs: []config.URL{config.MustURL(md.srv.URL)}, HealthCheck: config.DefaultHealthCheck(),
			Outlier: config.DefaultOutlier(), PanicThreshold: 50}
		if ownBlock {
			own := cfg.Upstream.TLS
			own.CAFile, own.CertFile, own.KeyFile = caB.File, clientB.CertFile, clientB.KeyFile
			svc.TLS = &own
		}
		cfg.Upstream.Services = map[string]config.Service{"md": svc}
		for i := range cfg.Routes {
			if cfg.Routes[i].Name == "list_markets" {
				cfg.Routes[i].Service = "md"
			}
		}
		return startApp(t, cfg, deps{log: zap.NewNop(), now: time.Now})
	}
	get := func(t *testing.T, a *app, path string) (int, []byte) {
		code, _, body := call(t, "GET", "http://"+a.addr+path, "")
		return code, body
	}
	t.Run("each service its own CA and client certificate", func(t *testing.T) {
		a := gateway(t, true)
		for _, c := range []struct {
			path    string
			backend *mtlsSim
			cn      string
		}{{"/api/v1/mkt/markets/", md, "exgate-md"}, {"/api/v1/mkt/currencies/", core, "exgate-core"}, {"/api/v1/mkt/markets/", md, "exgate-md"}} {
			if code, body := get(t, a, c.path); code != 200 {
				t.Fatalf("GET %s: %d %s", c.path, code, body)
			}
			if _, cn := c.backend.last(); cn != c.cn {
				t.Errorf("GET %s: the backend saw client certificate %q, want %q", c.path, cn, c.cn)
			}
		}
		got := scrapeAdmin(t, a.adminAd)
		for _, svc := range []string{"default", "md"} {
			if !strings.Contains(got, `exgate_upstream_tls_client_certificate_not_after_timestamp_seconds{service="`+svc+`"} `) {
				t.Errorf("no client certificate expiry for service %s:\n%s", svc, grepLines(got, "exgate_upstream_tls"))
			}
		}
	})
	t.Run("without its block: upstream.tls", func(t *testing.T) {
		a := gateway(t, false)
		// exgate's check of the instance's certificate fails in the
		// handshake, before anything is sent (upstream.NothingSent).
		if code, body := get(t, a, "/api/v1/mkt/markets/"); code != 503 || !bytes.Contains(body, []byte(`"code":"upstream_unavailable"`)) {
			t.Errorf("GET markets at an instance upstream.tls's CA does not sign: %d %s, want 503 upstream_unavailable", code, body)
		}
		if code, body := get(t, a, "/api/v1/mkt/currencies/"); code != 200 {
			t.Errorf("GET currencies at the default service: %d %s", code, body)
		}
	})
}
