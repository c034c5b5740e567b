package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// logBuffer is a goroutine-safe io.Writer collecting the logs.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitAddr waits for the "listening" log line and returns its address.
func waitAddr(t *testing.T, logs *logBuffer, done <-chan error) string {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		sc := bufio.NewScanner(strings.NewReader(logs.String()))
		for sc.Scan() {
			var line struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "listening" {
				return line.Addr
			}
		}
		select {
		case err := <-done:
			t.Fatalf("run returned early: %v; logs:\n%s", err, logs)
		case <-deadline:
			t.Fatalf("no listening line; logs:\n%s", logs)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func TestRunServesAndShutsDown(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		apiKey  string
		secret  string
		logWant string
	}{
		{"defaults", []string{"-listen", "127.0.0.1:0"}, "dev", "dev", "public development JWT secret"},
		{"flags", []string{"-listen", "127.0.0.1:0", "-secret", "s", "-credentials", "alice:pw,bob:pw2", "-v"}, "bob", "pw2", `"msg":"request"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("EXGATE_SIM_SECRET", "")
			t.Setenv("EXGATE_SIM_CREDENTIALS", "")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			logs := &logBuffer{}
			done := make(chan error, 1)
			go func() { done <- run(ctx, tt.args, logs) }()
			base := "http://" + waitAddr(t, logs, done)

			post := func(path, token, body string) (int, map[string]any) {
				req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Content-Type", "application/json")
				if token != "" {
					req.Header.Set("Authorization", "Bearer "+token)
				}
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer res.Body.Close()
				var out map[string]any
				if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
					t.Fatal(err)
				}
				return res.StatusCode, out
			}
			status, tok := post("/api/v1/usr/authenticate/", "", `{"api_key":"`+tt.apiKey+`","secret_key":"`+tt.secret+`"}`)
			if status != http.StatusOK {
				t.Fatalf("authenticate: %d %v", status, tok)
			}
			access, _ := tok["access"].(string)
			status, order := post("/api/v1/odr/orders/", access, `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.001"}`)
			if status != http.StatusCreated || order["state"] != "closed" {
				t.Fatalf("demo market order: %d %v", status, order)
			}
			res, err := http.Get(base + "/api/v1/mth/matches/BTC_USDT/")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if !strings.Contains(string(body), `"price":"65000.00"`) {
				t.Errorf("matches %s", body)
			}

			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("run: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("run did not return after cancel")
			}
			if !strings.Contains(logs.String(), tt.logWant) || !strings.Contains(logs.String(), `"msg":"stopped"`) {
				t.Errorf("logs lack %q or stopped:\n%s", tt.logWant, logs)
			}
		})
	}
}

func TestRunErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"-nope"}, "flag provided but not defined"},
		{"extra argument", []string{"serve"}, "unexpected arguments"},
		{"bad credentials", []string{"-credentials", "alice"}, "not api_key:secret_key"},
		{"bad address", []string{"-listen", "127.0.0.1:notaport"}, "notaport"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(context.Background(), tt.args, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("run(%q) = %v, want an error containing %q", tt.args, err, tt.want)
			}
		})
	}
	if err := run(context.Background(), []string{"-h"}, io.Discard); err != nil {
		t.Errorf("run -h: %v", err)
	}
}

// TestJWTKey: -jwt-key reads an RSA private key in PKCS #8 or PKCS #1
// PEM, -print-jwks prints the JWKS of its public key, and other files are
// refused with the reason.
func TestJWTKey(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pkcs8, _ := x509.MarshalPKCS8PrivateKey(key)
	files := map[string][]byte{
		"pkcs8.pem":  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}),
		"pkcs1.pem":  pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}),
		"public.pem": pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: must(x509.MarshalPKIXPublicKey(&key.PublicKey))}),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var first string
	for _, name := range []string{"pkcs8.pem", "pkcs1.pem"} {
		var out strings.Builder
		if err := run(context.Background(), []string{"-jwt-key", filepath.Join(dir, name), "-print-jwks"}, &out); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var set struct {
			Keys []struct{ Kty, Kid, Alg, Use, N, E, D string }
		}
		if err := json.Unmarshal([]byte(out.String()), &set); err != nil || len(set.Keys) != 1 {
			t.Fatalf("%s: -print-jwks printed %q: %v", name, out.String(), err)
		}
		k := set.Keys[0]
		if k.Kty != "RSA" || k.Alg != "RS256" || k.Use != "sig" || k.Kid == "" || k.N == "" || k.D != "" {
			t.Errorf("%s: key %+v", name, k)
		}
		if first == "" {
			first = out.String()
		} else if out.String() != first {
			t.Errorf("the two encodings of one key print different JWKS:\n%s\n%s", first, out.String())
		}
	}
	for _, tc := range []struct{ args []string }{
		{[]string{"-jwt-key", filepath.Join(dir, "public.pem")}},
		{[]string{"-jwt-key", filepath.Join(dir, "none.pem")}},
		{[]string{"-print-jwks"}},
	} {
		if err := run(context.Background(), tc.args, io.Discard); err == nil {
			t.Errorf("%v accepted", tc.args)
		}
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
