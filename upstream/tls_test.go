package upstream

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/tlstest"
)

// mtlsBackend is a real TLS server on loopback that requires a client
// certificate signed by clientCA, and answers with the protocol and the
// client certificate's name it saw.
func mtlsBackend(t *testing.T, serverCA, clientCA *tlstest.CA, dir string, names ...string) *httptest.Server {
	t.Helper()
	if len(names) == 0 {
		names = []string{"backend.test", "127.0.0.1"}
	}
	leaf := serverCA.Issue(dir, "backend", names, tlstest.Options{})
	cert, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Proto+" "+r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clientCA.Pool}
	srv.EnableHTTP2 = true
	srv.Config.ErrorLog = nil
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// testTransport is a Transport set up as proxy.NewTransport's is, for
// what ClientTLS relies on.
func testTransport() *http.Transport {
	d := &net.Dialer{Timeout: 5 * time.Second}
	return &http.Transport{DialContext: d.DialContext, ForceAttemptHTTP2: true, TLSHandshakeTimeout: 10 * time.Second}
}

// get asks url through tr and returns the body, or the error.
func get(tr *http.Transport, url string) (string, error) {
	res, err := (&http.Client{Transport: tr, Timeout: time.Minute}).Get(url)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return string(b), err
}

func TestClientTLSMutual(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir)
	other := tlstest.NewCA(t, t.TempDir())
	srv := mtlsBackend(t, ca, ca, dir)
	client := ca.Issue(dir, "exgate", []string{"exgate-client"}, tlstest.Options{Client: true})
	foreign := other.Issue(dir, "foreign", []string{"foreign-client"}, tlstest.Options{Client: true})
	url := srv.URL + "/"
	for _, tt := range []struct {
		name       string
		c          config.BackendTLS
		serverName string
		want       string // the answer, or "error: " and what the error says
	}{
		{"mutual TLS over HTTP/2", config.BackendTLS{CAFile: ca.File, CertFile: client.CertFile, KeyFile: client.KeyFile, HTTP2: true}, "", "HTTP/2.0 exgate-client"},
		{"HTTP/2 off", config.BackendTLS{CAFile: ca.File, CertFile: client.CertFile, KeyFile: client.KeyFile}, "", "HTTP/1.1 exgate-client"},
		{"server name from the service", config.BackendTLS{CAFile: ca.File, CertFile: client.CertFile, KeyFile: client.KeyFile, HTTP2: true}, "backend.test", "HTTP/2.0 exgate-client"},
		{"no client certificate", config.BackendTLS{CAFile: ca.File, HTTP2: true}, "", "error: "},
		{"a client certificate of another CA", config.BackendTLS{CAFile: ca.File, CertFile: foreign.CertFile, KeyFile: foreign.KeyFile}, "", "error: "},
		{"the system's authorities", config.BackendTLS{CertFile: client.CertFile, KeyFile: client.KeyFile}, "", "error: tls: failed to verify certificate"},
		{"a server name the certificate is not for", config.BackendTLS{CAFile: ca.File, CertFile: client.CertFile, KeyFile: client.KeyFile, ServerName: "other.test"}, "", "error: tls: failed to verify certificate"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ct, err := LoadClientTLS(tt.c, "upstream.tls", tt.serverName, nil)
			if err != nil {
				t.Fatal(err)
			}
			tr := testTransport()
			ct.Apply(tr)
			defer tr.CloseIdleConnections()
			got, err := get(tr, url)
			if err != nil {
				got = "error: " + err.Error()
			}
			if want, ok := strings.CutPrefix(tt.want, "error: "); ok {
				if !strings.HasPrefix(got, "error: ") || !strings.Contains(got, want) {
					t.Fatalf("got %q, want an error saying %q", got, want)
				}
				return
			}
			if got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestClientTLSReload rotates the certificate authority and the client
// certificate under a running transport: new connections use the files
// once they load, and a bad file keeps the last good ones.
func TestClientTLSReload(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir)
	old := tlstest.NewCA(t, t.TempDir())
	srv := mtlsBackend(t, ca, ca, dir)
	url := srv.URL + "/"
	files := config.BackendTLS{CAFile: filepath.Join(dir, "backend-ca.crt"), CertFile: filepath.Join(dir, "client.crt"), KeyFile: filepath.Join(dir, "client.key"), HTTP2: true}
	write := func(path string, b []byte) {
		t.Helper()
		if err := os.WriteFile(path+".tmp", b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
	}
	caPEM := func(c *tlstest.CA) []byte {
		b, err := os.ReadFile(c.File)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	oldClient := old.Issue(t.TempDir(), "c", []string{"old-client"}, tlstest.Options{Client: true})
	newClient := ca.Issue(t.TempDir(), "c", []string{"new-client"}, tlstest.Options{Client: true})
	write(files.CAFile, caPEM(old))
	write(files.CertFile, oldClient.CertPEM)
	write(files.KeyFile, oldClient.KeyPEM)

	var reloads []bool
	ct, err := LoadClientTLS(files, "upstream.tls", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	ct.OnReload = func(ok bool, _ time.Time) { reloads = append(reloads, ok) }
	tr := testTransport()
	ct.Apply(tr)
	defer tr.CloseIdleConnections()
	if got, err := get(tr, url); err == nil {
		t.Fatalf("with the old CA and client certificate: %q, want a failed handshake", got)
	}

	write(files.CAFile, caPEM(ca))
	write(files.CertFile, newClient.CertPEM)
	write(files.KeyFile, newClient.KeyPEM)
	if changed, err := ct.Reload(nil); !changed || err != nil {
		t.Fatalf("Reload = %v, %v; want true, nil", changed, err)
	}
	if got, err := get(tr, url); err != nil || got != "HTTP/2.0 new-client" {
		t.Fatalf("after the reload: %q, %v; want HTTP/2.0 new-client", got, err)
	}
	if changed, err := ct.Reload(nil); changed || err != nil {
		t.Fatalf("Reload of unchanged files = %v, %v; want false, nil", changed, err)
	}

	// A bundle of authorities caught half written, its second (the
	// backend's) cut off: it used to load as the first alone, and every
	// new connection failed its handshake until the file was read again.
	write(files.CAFile, append(caPEM(old), caPEM(ca)[:len(caPEM(ca))/2]...))
	if _, err := ct.Reload(nil); err == nil || !strings.HasPrefix(err.Error(), "upstream.tls.ca_file: ") {
		t.Fatalf("Reload of a half-written CA bundle: %v, want an error naming upstream.tls.ca_file", err)
	}
	tr.CloseIdleConnections()
	if got, err := get(tr, url); err != nil || got != "HTTP/2.0 new-client" {
		t.Fatalf("after a half-written CA bundle, a new connection: %q, %v; want the last good files in use", got, err)
	}
	write(files.CAFile, caPEM(ca))

	write(files.KeyFile, oldClient.KeyPEM) // half a rotation: the key does not match
	if _, err := ct.Reload(nil); err == nil || !strings.HasPrefix(err.Error(), "upstream.tls.cert_file: ") {
		t.Fatalf("Reload of a mismatched key: %v, want an error naming upstream.tls.cert_file", err)
	}
	tr.CloseIdleConnections()
	if got, err := get(tr, url); err != nil || got != "HTTP/2.0 new-client" {
		t.Fatalf("after a bad reload, a new connection: %q, %v; want the last good files in use", got, err)
	}
	if want := []bool{true, false, false}; !slices.Equal(reloads, want) {
		t.Errorf("OnReload told %v, want %v", reloads, want)
	}
}

func TestCheckClientTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir)
	good := ca.Issue(dir, "good", []string{"exgate"}, tlstest.Options{Client: true})
	other := ca.Issue(dir, "other", []string{"exgate"}, tlstest.Options{Client: true})
	expired := ca.Issue(dir, "expired", []string{"exgate"}, tlstest.Options{Client: true, NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		c    config.BackendTLS
		want []string // each error's start
	}{
		{"good", config.BackendTLS{CAFile: ca.File, CertFile: good.CertFile, KeyFile: good.KeyFile}, nil},
		{"CA not PEM", config.BackendTLS{CAFile: notPEM}, []string{"upstream.tls.ca_file: " + notPEM + " holds no PEM certificate"}},
		{"CA missing", config.BackendTLS{CAFile: filepath.Join(dir, "missing.crt")}, []string{"upstream.tls.ca_file: open "}},
		{"key of another certificate", config.BackendTLS{CertFile: good.CertFile, KeyFile: other.KeyFile}, []string{"upstream.tls.cert_file: " + good.CertFile + ", " + other.KeyFile + ": tls: private key does not match"}},
		{"expired, and a bad CA: both", config.BackendTLS{CAFile: notPEM, CertFile: expired.CertFile, KeyFile: expired.KeyFile},
			[]string{"upstream.tls.ca_file: ", "upstream.tls.cert_file: " + expired.CertFile + ": certificate expired at "}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			errs := CheckClientTLS(tt.c, "upstream.tls")
			if len(errs) != len(tt.want) {
				t.Fatalf("CheckClientTLS = %v, want %d errors", errs, len(tt.want))
			}
			for i, err := range errs {
				if !strings.HasPrefix(err.Error(), tt.want[i]) {
					t.Errorf("error %d = %q, want it to start %q", i, err, tt.want[i])
				}
			}
			_, err := LoadClientTLS(tt.c, "upstream.tls", "", nil)
			if (err != nil) != (len(tt.want) > 0) {
				t.Errorf("LoadClientTLS: %v, want an error: %v", err, len(tt.want) > 0)
			}
		})
	}
}

// TestClientTLSNamesDiscoveredInstances: an instance found in DNS is
// dialled by its address, and its certificate is for the name it was
// found under, not for the address.
func TestClientTLSNamesDiscoveredInstances(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir)
	client := ca.Issue(dir, "exgate", []string{"exgate-client"}, tlstest.Options{Client: true})
	srv := mtlsBackend(t, ca, ca, dir, "backend.test")
	ct, err := LoadClientTLS(config.BackendTLS{CAFile: ca.File, CertFile: client.CertFile, KeyFile: client.KeyFile, HTTP2: true}, "upstream.tls", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := testTransport()
	ct.Apply(tr)
	defer tr.CloseIdleConnections()
	if got, err := get(tr, srv.URL+"/"); err == nil || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Fatalf("an address the certificate does not name: %q, %v; want a verification error", got, err)
	}
	u, _ := url.Parse(srv.URL)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	found := make(chan []Endpoint, 1)
	go ct.NameInstances(Static{{URL: u}}, "backend.test").Run(ctx, func(eps []Endpoint) { found <- eps })
	<-found
	if got, err := get(tr, srv.URL+"/"); err != nil || got != "HTTP/2.0 exgate-client" {
		t.Fatalf("an instance found under backend.test: %q, %v", got, err)
	}
}
