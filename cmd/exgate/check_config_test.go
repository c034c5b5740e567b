package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/exgate/exgate/internal/jwttest"
	"github.com/exgate/exgate/internal/tlstest"
)

// TestCheckConfigReadsCertificates runs check-config on configurations
// whose certificate files are good, missing, mismatched and expired.
func TestCheckConfigReadsCertificates(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir)
	good := ca.Issue(dir, "good", []string{"api.example.test"}, tlstest.Options{})
	other := ca.Issue(dir, "other", []string{"api.example.test"}, tlstest.Options{})
	expired := ca.Issue(dir, "expired", []string{"api.example.test"}, tlstest.Options{NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	for _, tc := range []struct {
		name, cert, key string
		want            string
	}{
		{"good, relative to the file", "good.crt", "good.key", "ok"},
		{"missing", "none.crt", "good.key", "server.tls.certificates[0].cert_file: open "},
		{"key of another certificate", filepath.Base(good.CertFile), filepath.Base(other.KeyFile), "server.tls.certificates[0]: "},
		{"expired", expired.CertFile, expired.KeyFile, "certificate expired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "exgate.yaml")
			yaml := "server:\n  tls:\n    certificates:\n      - {cert_file: " + tc.cert + ", key_file: " + tc.key + "}\n"
			if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			code := run(context.Background(), []string{"check-config", path}, func(string) (string, bool) { return "", false }, &out, &errb)
			if !strings.Contains(out.String(), tc.want) || (code == 0) != (tc.want == "ok") {
				t.Fatalf("exit %d, output %q; want %q", code, out.String(), tc.want)
			}
		})
	}
}

// TestCheckConfigReadsKeyFiles: check-config reads the PEM and JWKS files
// the identity section names and says which is wrong.
func TestCheckConfigReadsKeyFiles(t *testing.T) {
	dir := t.TempDir()
	k := mustRSA(t)
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("pub.pem", jwttest.PublicKeyPEM(t, &k.PublicKey))
	priv, _ := x509.MarshalPKCS8PrivateKey(k)
	write("priv.pem", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: priv}))
	write("jwks.json", []byte(`{"keys":[{"kty":"oct","k":"c2VjcmV0LXNlY3JldC1zZWNyZXQ","kid":"x"}]}`))
	for _, tc := range []struct{ name, identity, want string }{
		{"good", "{ verify: true, jwt: { keys: [{ algorithms: [RS256], public_key_file: pub.pem }] } }", "ok"},
		{"missing", "{ verify: true, jwt: { keys: [{ algorithms: [RS256], public_key_file: none.pem }] } }", "identity.jwt.keys[0].public_key_file: "},
		{"private key", "{ verify: true, jwt: { keys: [{ algorithms: [RS256], public_key_file: priv.pem }] } }", "holds a private key"},
		{"wrong algorithm", "{ verify: true, jwt: { keys: [{ algorithms: [ES256], public_key_file: pub.pem }] } }", "2048-bit RSA key cannot verify ES256"},
		{"JWKS without a usable key", "{ verify: true, jwt: { keys: [], jwks_file: jwks.json, jwks_algorithms: [RS256] } }", "identity.jwt.jwks_file: "},
		{"users file missing", "{ verify: true, users_file: users.yaml }", "identity.users_file: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "exgate.yaml")
			write("exgate.yaml", []byte("identity: "+tc.identity+"\n"))
			var out, errb bytes.Buffer
			code := run(t.Context(), []string{"check-config", path}, func(string) (string, bool) { return "", false }, &out, &errb)
			if !strings.Contains(out.String(), tc.want) || (code == 0) != (tc.want == "ok") {
				t.Fatalf("exit %d, output %q; want %q", code, out.String(), tc.want)
			}
		})
	}
}
