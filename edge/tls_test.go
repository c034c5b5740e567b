package edge

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/tlstest"
	"github.com/exgate/exgate/metrics"
)

// servedSerial does a TLS handshake with a listener serving certs and
// returns the serial number of the leaf served for serverName.
func servedSerial(t *testing.T, certs *Certificates, ca *tlstest.CA, serverName string) int64 {
	t.Helper()
	sc, cc := net.Pipe()
	defer sc.Close()
	defer cc.Close()
	srv := tls.Server(sc, certs.TLSConfig())
	go func() { _ = srv.Handshake() }()
	cli := tls.Client(cc, &tls.Config{RootCAs: ca.Pool, ServerName: serverName})
	_ = cli.SetDeadline(time.Now().Add(5 * time.Second))
	if err := cli.Handshake(); err != nil {
		t.Fatalf("handshake for %q: %v", serverName, err)
	}
	st := cli.ConnectionState()
	if st.Version < tls.VersionTLS12 {
		t.Fatalf("TLS version %x", st.Version)
	}
	return st.PeerCertificates[0].SerialNumber.Int64()
}

func newEdgeMetrics(t *testing.T) *metrics.Edge {
	t.Helper()
	m, err := metrics.NewEdge(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestCertificatesBySNI serves two certificates and checks each server
// name gets its own; an unknown name gets the first.
func TestCertificatesBySNI(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir)
	a := ca.Issue(dir, "a", []string{"a.example.test"}, tlstest.Options{})
	b := ca.Issue(dir, "b", []string{"b.example.test", "*.b.example.test"}, tlstest.Options{})
	certs, err := LoadCertificates([]config.Certificate{{CertFile: a.CertFile, KeyFile: a.KeyFile}, {CertFile: b.CertFile, KeyFile: b.KeyFile}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		want int64
	}{
		{"a.example.test", a.Serial},
		{"b.example.test", b.Serial},
		{"api.b.example.test", b.Serial},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := servedSerial(t, certs, ca, tc.name); got != tc.want {
				t.Fatalf("served serial %d, want %d", got, tc.want)
			}
		})
	}
	t.Run("unknown name gets the first", func(t *testing.T) {
		sc, cc := net.Pipe()
		defer sc.Close()
		defer cc.Close()
		go func() { _ = tls.Server(sc, certs.TLSConfig()).Handshake() }()
		cli := tls.Client(cc, &tls.Config{InsecureSkipVerify: true, ServerName: "other.test"})
		if err := cli.Handshake(); err != nil {
			t.Fatal(err)
		}
		if got := cli.ConnectionState().PeerCertificates[0].SerialNumber.Int64(); got != a.Serial {
			t.Fatalf("served %d, want the first (%d)", got, a.Serial)
		}
	})
	t.Run("TLS 1.1 refused", func(t *testing.T) {
		sc, cc := net.Pipe()
		defer sc.Close()
		defer cc.Close()
		go func() { _ = tls.Server(sc, certs.TLSConfig()).Handshake(); sc.Close() }()
		cli := tls.Client(cc, &tls.Config{RootCAs: ca.Pool, ServerName: "a.example.test", MaxVersion: tls.VersionTLS11})
		if err := cli.Handshake(); err == nil {
			t.Fatal("TLS 1.1 handshake succeeded")
		}
	})
}

// TestCertificatesReloadKeepsLastGood replaces the files with bad ones
// of every kind: each reload fails, is counted, and the last good
// certificate is still served; a good file then takes over.
func TestCertificatesReloadKeepsLastGood(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir)
	first := ca.Issue(dir, "first", []string{"api.example.test"}, tlstest.Options{})
	other := ca.Issue(dir, "other", []string{"api.example.test"}, tlstest.Options{})
	expired := ca.Issue(dir, "expired", []string{"api.example.test"}, tlstest.Options{NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	caPEM, err := os.ReadFile(ca.File)
	if err != nil {
		t.Fatal(err)
	}
	files := []config.Certificate{{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key")}}
	write := func(cert, key []byte) {
		t.Helper()
		if cert == nil {
			_ = os.Remove(files[0].CertFile)
		} else if err := os.WriteFile(files[0].CertFile, cert, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(files[0].KeyFile, key, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(first.CertPEM, first.KeyPEM)
	m := newEdgeMetrics(t)
	certs, err := LoadCertificates(files, nil, m)
	if err != nil {
		t.Fatal(err)
	}
	if changed, err := certs.Reload(nil); changed || err != nil {
		t.Fatalf("unchanged files: changed %v, err %v", changed, err)
	}
	bad := []struct {
		name      string
		cert, key []byte
		want      string
	}{
		{"missing certificate file", nil, first.KeyPEM, "cert_file"},
		{"not PEM", []byte("not a certificate"), first.KeyPEM, "certificates[0]"},
		{"half-written certificate", first.CertPEM[:len(first.CertPEM)/2], first.KeyPEM, "certificates[0]"},
		// The leaf whole, the chain's next certificate cut off: it used to
		// load as the leaf alone, served without its chain.
		{"chain half written", append(slices.Clip(other.CertPEM), caPEM[:len(caPEM)/2]...), other.KeyPEM, "cert_file"},
		{"key of another certificate", first.CertPEM, other.KeyPEM, "certificates[0]"},
		{"expired", expired.CertPEM, expired.KeyPEM, "expired"},
	}
	for i, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			write(tc.cert, tc.key)
			changed, err := certs.Reload(nil)
			if changed || err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("changed %v, err %v; want an error naming %q", changed, err, tc.want)
			}
			if got := servedSerial(t, certs, ca, "api.example.test"); got != first.Serial {
				t.Fatalf("serving %d after a bad file, want the last good %d", got, first.Serial)
			}
			if got := testutil.ToFloat64(m.CertReloadCounter(false)); got != float64(i+1) {
				t.Fatalf("failures counted %v, want %d", got, i+1)
			}
		})
	}
	write(other.CertPEM, other.KeyPEM)
	if changed, err := certs.Reload(nil); !changed || err != nil {
		t.Fatalf("good file: changed %v, err %v", changed, err)
	}
	if got := servedSerial(t, certs, ca, "api.example.test"); got != other.Serial {
		t.Fatalf("serving %d, want the new %d", got, other.Serial)
	}
	if got := testutil.ToFloat64(m.CertReloadCounter(true)); got != 1 {
		t.Fatalf("successes counted %v, want 1", got)
	}
}

// TestCertificatesWatchSecretVolume swaps a Kubernetes-style Secret
// volume (a "..data" symlink renamed over) and expects the poll to serve
// the new certificate; a bad swap is skipped and counted once.
func TestCertificatesWatchSecretVolume(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir)
	first := ca.Issue(dir, "first", []string{"api.example.test"}, tlstest.Options{})
	second := ca.Issue(dir, "second", []string{"api.example.test"}, tlstest.Options{})
	vol := tlstest.NewSecretVolume(t, t.TempDir(), first)
	m := newEdgeMetrics(t)
	certs, err := LoadCertificates([]config.Certificate{{CertFile: vol.CertFile(), KeyFile: vol.KeyFile()}}, nil, m)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	go certs.Watch(ctx, 20*time.Millisecond)

	vol.Swap(first.CertPEM, second.KeyPEM) // mismatched
	waitFor(t, "the bad swap counted", func() bool { return testutil.ToFloat64(m.CertReloadCounter(false)) == 1 })
	time.Sleep(100 * time.Millisecond) // several polls of the same bad content
	if got := testutil.ToFloat64(m.CertReloadCounter(false)); got != 1 {
		t.Fatalf("the same bad content counted %v times, want once", got)
	}
	if got := servedSerial(t, certs, ca, "api.example.test"); got != first.Serial {
		t.Fatalf("serving %d, want the last good %d", got, first.Serial)
	}
	vol.Swap(second.CertPEM, second.KeyPEM)
	waitFor(t, "the new certificate served", func() bool { return servedSerial(t, certs, ca, "api.example.test") == second.Serial })
	if certs.NotAfter().IsZero() {
		t.Fatal("no expiry recorded")
	}
}

// waitFor polls cond for up to 5 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestTLSHandshakeTimeout connects clients that stall in the TLS
// handshake — sending nothing, or half a ClientHello — and expects the
// server to close them after server.read_header_timeout, the bound of
// the handshake, while a normal client is served meanwhile.
func TestTLSHandshakeTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	certs, ca := apiCertificates(t)
	cfg := config.Default()
	cfg.Server.ReadHeaderTimeout = timeout
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil {
			t.Error("a request without TLS state")
		}
		w.WriteHeader(http.StatusNoContent)
	}), zap.NewNop(), nil)
	go func() { _ = ServeTraffic(srv, ln, certs) }()
	t.Cleanup(func() { _ = srv.Close() })

	for _, tc := range []struct {
		name string
		send []byte
	}{
		{"silent", nil},
		{"half a ClientHello", []byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			start := time.Now()
			if _, err := c.Write(tc.send); err != nil {
				t.Fatal(err)
			}
			normalClientServed(t, ln.Addr().String(), ca, timeout)
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, err = io.ReadAll(c)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("the stalled handshake was not closed within 5s")
			}
			if d := time.Since(start); d < timeout/2 {
				t.Fatalf("closed after %v, before half of the handshake timeout (%v)", d, timeout)
			}
		})
	}
}

// normalClientServed checks that a client that completes its handshake
// is served at addr while another's handshake stalls. The handshake
// timeout bounds every connection's, this client's too: one that a loaded
// machine kept past it (at load 28 with -race, up to 250 ms of the test's
// 300 were seen) is closed as it should be, and the client tries again; one
// closed sooner fails the test.
func normalClientServed(t *testing.T, addr string, ca *tlstest.CA, timeout time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool, ServerName: "api.example.test"}}, Timeout: 5 * time.Second}
		start := time.Now()
		res, err := client.Get("https://" + addr + "/")
		took := time.Since(start)
		client.CloseIdleConnections()
		if err == nil {
			res.Body.Close()
			return
		}
		if took < timeout || time.Now().After(deadline) {
			t.Fatalf("a normal client meanwhile: %v after %v (handshake timeout %v)", err, took, timeout)
		}
	}
}

// apiCertificates returns the certificates of one leaf for
// api.example.test and the new certificate authority that issued it, whose
// pool a client trusts.
func apiCertificates(t *testing.T) (*Certificates, *tlstest.CA) {
	t.Helper()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir)
	leaf := ca.Issue(dir, "api", []string{"api.example.test"}, tlstest.Options{})
	certs, err := LoadCertificates([]config.Certificate{{CertFile: leaf.CertFile, KeyFile: leaf.KeyFile}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return certs, ca
}

// TestCertificatesReloadedNamesWatched: a reloaded configuration naming
// other certificate files that do not load yet (not written yet, half
// written, the key of another certificate) keeps the last good
// certificates, and the poll serves the new files once they are fixed.
// Before, the poll kept reading the old files, which the configuration no
// longer named, and the fixed ones waited for another SIGHUP: the old
// certificate was served until it expired.
func TestCertificatesReloadedNamesWatched(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir)
	first := ca.Issue(dir, "first", []string{"api.example.test"}, tlstest.Options{})
	for _, tc := range []struct {
		name string
		// cert and key are the new files' content when the configuration
		// naming them is reloaded; nil: not there.
		cert, key func(next tlstest.Leaf) []byte
	}{
		{"not written yet", nil, nil},
		{"half written", func(l tlstest.Leaf) []byte { return l.CertPEM[:len(l.CertPEM)/2] }, func(l tlstest.Leaf) []byte { return l.KeyPEM }},
		{"the key of another certificate", func(l tlstest.Leaf) []byte { return l.CertPEM }, func(tlstest.Leaf) []byte { return first.KeyPEM }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sub := t.TempDir()
			next := ca.Issue(t.TempDir(), "next", []string{"api.example.test"}, tlstest.Options{})
			files := []config.Certificate{{CertFile: filepath.Join(sub, "next.crt"), KeyFile: filepath.Join(sub, "next.key")}}
			write := func(cert, key []byte) {
				t.Helper()
				for _, f := range []struct {
					path string
					b    []byte
				}{{files[0].CertFile, cert}, {files[0].KeyFile, key}} {
					if err := os.WriteFile(f.path, f.b, 0o600); err != nil {
						t.Fatal(err)
					}
				}
			}
			m := newEdgeMetrics(t)
			certs, err := LoadCertificates([]config.Certificate{{CertFile: first.CertFile, KeyFile: first.KeyFile}}, nil, m)
			if err != nil {
				t.Fatal(err)
			}
			if tc.cert != nil {
				write(tc.cert(next), tc.key(next))
			}
			if changed, err := certs.Reload(files); changed || err == nil {
				t.Fatalf("reload naming files that do not load: changed %v, err %v; want an error", changed, err)
			}
			if got := servedSerial(t, certs, ca, "api.example.test"); got != first.Serial {
				t.Fatalf("serving %d, want the last good %d", got, first.Serial)
			}
			write(next.CertPEM, next.KeyPEM)
			go certs.Watch(t.Context(), 10*time.Millisecond)
			waitFor(t, "the fixed files served", func() bool { return servedSerial(t, certs, ca, "api.example.test") == next.Serial })
		})
	}
}
