package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
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

// TestCheckConfigFromPipe: a configuration read from a pipe is read once
// and its files are checked all the same, relative ones from the working
// directory — through /dev/stdin, "-" and a process substitution — and a
// problem of the YAML does not hide those of the files: every problem is
// reported in one pass, each with its line.
func TestCheckConfigFromPipe(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	yaml := "identity:\n  verify: true\n  jwt:\n    keys: []\n    jwks_file: jwks.json\n    jwks_algorithms: [RS256]\n"
	if err := os.WriteFile(filepath.Join(dir, "exgate.yaml"), []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, cmdline := range []string{
		"cat exgate.yaml | exgate check-config /dev/stdin",
		"cat exgate.yaml | exgate check-config -",
		"exgate check-config <(cat exgate.yaml)",
		"exgate check-config exgate.yaml",
	} {
		t.Run(cmdline, func(t *testing.T) {
			cmd := exec.Command("bash", "-c", strings.ReplaceAll(cmdline, "exgate check-config", bin+" check-config"))
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			want := "identity.jwt.jwks_file: open jwks.json: no such file or directory (line 5)\n"
			if err == nil || string(out) != want {
				t.Fatalf("%s: %v\n%s\nwant exit 1 and %q", cmdline, err, out, want)
			}
		})
	}

	// A problem of the YAML, one of the environment and one of a file, in one pass.
	bad := yaml + "listen: [8080]\n"
	cmd := exec.Command(bin, "check-config", "-")
	cmd.Dir, cmd.Stdin = dir, strings.NewReader(bad)
	cmd.Env = append(os.Environ(), "EXGATE_LOG_LEVEL=loud")
	out, err := cmd.CombinedOutput()
	for _, want := range []string{
		"listen: want a string, got a sequence (line 7)",
		"EXGATE_LOG_LEVEL (log.level): want",
		"identity.jwt.jwks_file: open jwks.json: no such file or directory (line 5)",
	} {
		if err == nil || !strings.Contains(string(out), want) {
			t.Errorf("check-config of a file with three problems: %v\n%s\nlacks %q", err, out, want)
		}
	}

	// -files=false checks the YAML alone and says which files it did not read.
	cmd = exec.Command(bin, "check-config", "-files=false", "-")
	cmd.Dir, cmd.Stdin = dir, strings.NewReader(yaml)
	out, err = cmd.CombinedOutput()
	cfg := config.Default()
	cfg.Identity.Verify = true // the built-in routes' token limits count per verified account
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	want := "not read (-files=false): identity.jwt.jwks_file: jwks.json\n" + strings.Join(idempotencyCapacity(cfg), "\n") + "\nok\n"
	if err != nil || string(out) != want {
		t.Errorf("check-config -files=false: %v %q, want %q", err, out, want)
	}
}

// TestStartWarnsOfWideTrust: the gateway logs at start the warnings
// check-config prints, here a trusted proxy prefix of every address.
func TestStartWarnsOfWideTrust(t *testing.T) {
	bin := buildBinary(t)
	path := filepath.Join(t.TempDir(), "exgate.yaml")
	if err := os.WriteFile(path, []byte("listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\nclient_ip: { trusted_proxies: [0.0.0.0/0] }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-config", path)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "unsafe configuration: client_ip.trusted_proxies[0]: 0.0.0.0/0 trusts every address") {
				found <- sc.Text()
			}
		}
		close(found)
	}()
	select {
	case line, ok := <-found:
		if !ok {
			t.Fatal("exgate ended without the warning")
		}
		if !strings.Contains(line, `"level":"warn"`) {
			t.Errorf("warning logged as %s", line)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no warning of the trusted prefix within 30s of start")
	}
}
