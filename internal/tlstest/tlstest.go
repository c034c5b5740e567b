// Package tlstest issues certificates for tests: a throwaway certificate
// authority whose leaf certificates are written as PEM files, the way an
// operator (or cert-manager) gives them to exgate.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a certificate authority made for one test.
type CA struct {
	// Pool trusts the CA, for Go clients.
	Pool *x509.CertPool
	// File is the CA certificate's PEM file, for curl --cacert.
	File string

	t      testing.TB
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	serial atomic.Int64
}

// NewCA makes a CA and writes its certificate into dir.
func NewCA(t testing.TB, dir string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "exgate test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &CA{Pool: x509.NewCertPool(), File: filepath.Join(dir, "ca.crt"), t: t, cert: cert, key: key}
	ca.Pool.AddCert(cert)
	ca.serial.Store(1)
	writePEM(t, ca.File, "CERTIFICATE", der)
	return ca
}

// Leaf is an issued certificate's files.
type Leaf struct {
	CertFile, KeyFile string
	// Serial tells leaves apart: the certificate a client was served has
	// x509.Certificate.SerialNumber equal to it.
	Serial int64
	// CertPEM and KeyPEM are the files' content.
	CertPEM, KeyPEM []byte
}

// Options change an issued certificate.
type Options struct {
	// NotBefore and NotAfter default to an hour ago and a day from now.
	NotBefore, NotAfter time.Time
	// Client makes a client certificate (for mutual TLS, such as exgate's
	// to Redis) instead of a server certificate.
	Client bool
}

// Issue writes a certificate for names (DNS names, or IP addresses; the
// first is also its common name) and its key as dir/prefix.crt and
// dir/prefix.key.
func (ca *CA) Issue(dir, prefix string, names []string, o Options) Leaf {
	t := ca.t
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if o.NotBefore.IsZero() {
		o.NotBefore = time.Now().Add(-time.Hour)
	}
	if o.NotAfter.IsZero() {
		o.NotAfter = time.Now().Add(24 * time.Hour)
	}
	serial := ca.serial.Add(1)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: names[0]},
		NotBefore:    o.NotBefore,
		NotAfter:     o.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if o.Client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	l := Leaf{
		CertFile: filepath.Join(dir, prefix+".crt"), KeyFile: filepath.Join(dir, prefix+".key"), Serial: serial,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
	}
	writeFile(t, l.CertFile, l.CertPEM)
	writeFile(t, l.KeyFile, l.KeyPEM)
	return l
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	writeFile(t, path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))
}

func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// SecretVolume lays out dir as Kubernetes lays out a Secret volume:
// dir/tls.crt and dir/tls.key are symlinks through dir/..data, a symlink to
// a timestamped directory. Swap replaces the content atomically as the
// kubelet does, by renaming a new ..data link over the old one.
type SecretVolume struct {
	Dir string
	t   testing.TB
}

// NewSecretVolume makes the layout in dir (created when missing),
// holding l.
func NewSecretVolume(t testing.TB, dir string, l Leaf) *SecretVolume {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	v := &SecretVolume{Dir: dir, t: t}
	v.Swap(l.CertPEM, l.KeyPEM)
	for _, f := range []string{"tls.crt", "tls.key"} {
		if err := os.Symlink(filepath.Join("..data", f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

// CertFile and KeyFile are the paths exgate is configured with.
func (v *SecretVolume) CertFile() string { return filepath.Join(v.Dir, "tls.crt") }

// KeyFile is the key's path.
func (v *SecretVolume) KeyFile() string { return filepath.Join(v.Dir, "tls.key") }

// Swap atomically replaces both files' content.
func (v *SecretVolume) Swap(certPEM, keyPEM []byte) {
	t := v.t
	t.Helper()
	ts := filepath.Join(v.Dir, "..ts"+time.Now().Format("150405.000000000"))
	if err := os.Mkdir(ts, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(ts, "tls.crt"), certPEM)
	writeFile(t, filepath.Join(ts, "tls.key"), keyPEM)
	tmp := filepath.Join(v.Dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.Dir, "..data")); err != nil {
		t.Fatal(err)
	}
}
