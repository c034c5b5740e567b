package limiter

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/redistest"
	"github.com/exgate/exgate/ratelimit"
)

// TestRedisModesFromConfig: the client the configuration selects works as
// the store in each mode: standalone, Sentinel (master_name) and Cluster
// (several addresses).
func TestRedisModesFromConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	master := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, master, "exgate-master")
	cluster := redistest.StartCluster(t, 3)
	cases := []struct {
		name string
		rc   config.Redis
	}{
		{"standalone", config.Redis{Addrs: []string{master.Addr}}},
		{"sentinel", config.Redis{Addrs: []string{sentinel.Addr}, MasterName: "exgate-master"}},
		{"cluster", config.Redis{Addrs: cluster.Addrs}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.rc.Timeout = time.Second
			decideTwoOfThree(t, tc.rc, "modes:"+tc.name)
		})
	}
	// The Sentinel client really talks to the master it was told about.
	if n, _ := master.Do("EXISTS", "rate:modes:sentinel"); n.(int64) != 1 {
		t.Error("the sentinel-mode key is not on the master")
	}
}

// decideTwoOfThree builds the client rc selects and checks that it decides
// three requests on key under a burst of 2 as [true true false].
func decideTwoOfThree(t *testing.T, rc config.Redis, key string) {
	t.Helper()
	c, err := NewRedisClient(rc, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := ratelimit.NewRedis(c, ratelimit.RedisOptions{Timeout: time.Second})
	defer r.Close()
	l := ratelimit.Limit{Rate: 2, Period: time.Hour, Burst: 2}
	var got []bool
	for i := 0; i < 3; i++ {
		res, err := r.Allow(context.Background(), key, l)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, res.Allowed)
	}
	if fmt.Sprint(got) != "[true true false]" {
		t.Errorf("decisions %v, want [true true false]", got)
	}
}

// testPKI is a certificate authority with a server certificate for
// 127.0.0.1 and a client certificate, as PEM files in a directory.
type testPKI struct {
	ca, serverCert, serverKey, clientCert, clientKey, otherCA string
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	keyDER := func(k *ecdsa.PrivateKey) []byte {
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	serial := int64(1)
	issue := func(tmpl, parent *x509.Certificate, pub, signer any) *x509.Certificate {
		serial++
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
		if parent == nil {
			parent = tmpl
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := x509.ParseCertificate(der)
		return c
	}
	newCA := func(name string) (*x509.Certificate, *ecdsa.PrivateKey) {
		k := newKey()
		c := issue(&x509.Certificate{Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
			KeyUsage: x509.KeyUsageCertSign}, nil, &k.PublicKey, k)
		return c, k
	}
	ca, caKey := newCA("exgate test CA")
	other, _ := newCA("another CA")
	sk, ck := newKey(), newKey()
	srv := issue(&x509.Certificate{Subject: pkix.Name{CommonName: "redis"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}, ca, &sk.PublicKey, caKey)
	cli := issue(&x509.Certificate{Subject: pkix.Name{CommonName: "exgate"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}, ca, &ck.PublicKey, caKey)
	return testPKI{
		ca:         write("ca.pem", "CERTIFICATE", ca.Raw),
		otherCA:    write("other-ca.pem", "CERTIFICATE", other.Raw),
		serverCert: write("server.pem", "CERTIFICATE", srv.Raw),
		serverKey:  write("server-key.pem", "EC PRIVATE KEY", keyDER(sk)),
		clientCert: write("client.pem", "CERTIFICATE", cli.Raw),
		clientKey:  write("client-key.pem", "EC PRIVATE KEY", keyDER(ck)),
	}
}

// TestRedisTLS runs the Redis limiter against a real redis-server that
// speaks only TLS on its TLS port and asks for client certificates (its
// default), with the client NewRedisClient builds from the configuration.
func TestRedisTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	pki := newTestPKI(t)
	port := redistest.FreePort(t)
	redistest.Start(t, "--tls-port", strconv.Itoa(port),
		"--tls-cert-file", pki.serverCert, "--tls-key-file", pki.serverKey,
		"--tls-ca-cert-file", pki.ca, "--tls-auth-clients", "yes")
	addr := "127.0.0.1:" + strconv.Itoa(port)
	base := config.Redis{Addrs: []string{addr}, Timeout: time.Second, TLS: true,
		TLSCAFile: pki.ca, TLSCertFile: pki.clientCert, TLSKeyFile: pki.clientKey}

	t.Run("decisions over TLS", func(t *testing.T) {
		decideTwoOfThree(t, base, "tls")
	})

	refused := []struct {
		name string
		mod  func(*config.Redis)
	}{
		{"no client certificate", func(rc *config.Redis) { rc.TLSCertFile, rc.TLSKeyFile = "", "" }},
		{"another CA", func(rc *config.Redis) { rc.TLSCAFile = pki.otherCA }},
		{"the wrong server name", func(rc *config.Redis) { rc.TLSServerName = "redis.example" }},
		{"no TLS", func(rc *config.Redis) { *rc = config.Redis{Addrs: rc.Addrs, Timeout: time.Second} }},
	}
	for _, tc := range refused {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			rc := base
			tc.mod(&rc)
			c, err := NewRedisClient(rc, "")
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if err := c.Ping(ctx).Err(); err == nil {
				t.Fatal("PING answered")
			}
		})
	}

	bad := []struct {
		name, want string
		mod        func(*config.Redis)
	}{
		{"missing CA file", "limiter.redis.tls_ca_file", func(rc *config.Redis) { rc.TLSCAFile = filepath.Join(t.TempDir(), "none.pem") }},
		{"CA file without a certificate", "holds no PEM certificate", func(rc *config.Redis) { rc.TLSCAFile = pki.clientKey }},
		{"key of another certificate", "tls_cert_file", func(rc *config.Redis) { rc.TLSKeyFile = pki.serverKey }},
	}
	for _, tc := range bad {
		t.Run("at start: "+tc.name, func(t *testing.T) {
			rc := base
			tc.mod(&rc)
			if _, err := NewRedisClient(rc, ""); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}
