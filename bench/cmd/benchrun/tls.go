package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// The TLS scenario: GET markets over HTTPS with keep-alive connections,
// at exgate, NGINX and Caddy each terminating TLS in front of the same
// backend with the same certificate.
const (
	scTLS      = "tls-get-markets"
	tNginxTLS  = "nginx-tls"
	tCaddyTLS  = "caddy-tls"
	tExgateTLS = "exgate-tls"
)

// tlsPeers maps each TLS target to the same proxy serving plain HTTP, for
// the overhead table.
var tlsPeers = map[string]string{tNginxTLS: tNginx, tCaddyTLS: tCaddy, tExgateTLS: tExgateRedis}

// writeCertificate writes a self-signed ECDSA P-256 certificate for
// 127.0.0.1 and its key into dir, as PEM files.
func writeCertificate(dir string) (certFile, keyFile string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "exgate benchmark"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return "", "", err
	}
	// NGINX reads the key as root before its workers drop privileges.
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// startTLSTargets starts NGINX, Caddy (when installed) and exgate with
// Redis limits, each terminating TLS with one self-signed certificate in
// front of the backend, on addresses from next.
func startTLSTargets(ps *procs, e *env, next func() string, backendAddr string) error {
	dir := filepath.Join(e.work, "tls")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cert, key, err := writeCertificate(dir)
	if err != nil {
		return err
	}

	ndir := filepath.Join(e.work, tNginxTLS)
	if err := os.MkdirAll(ndir, 0o755); err != nil {
		return err
	}
	listen := next()
	var buf bytes.Buffer
	if err := nginxConfig.Execute(&buf, map[string]any{"Dir": ndir, "Backend": backendAddr, "Listen": listen, "Cert": cert, "Key": key}); err != nil {
		return err
	}
	conf := filepath.Join(ndir, "nginx.conf")
	if err := os.WriteFile(conf, buf.Bytes(), 0o644); err != nil {
		return err
	}
	p, err := ps.start(tNginxTLS, e.cpus, nil, "nginx", "-p", ndir, "-c", conf, "-e", filepath.Join(ndir, "error.log"))
	if err != nil {
		return err
	}
	e.targets[tNginxTLS] = &target{name: tNginxTLS, url: "https://" + listen, proxy: p}

	if caddy, err := exec.LookPath("caddy"); err == nil {
		cdir := filepath.Join(e.work, tCaddyTLS)
		if err := os.MkdirAll(cdir, 0o755); err != nil {
			return err
		}
		listen := next()
		buf.Reset()
		if err := caddyConfig.Execute(&buf, map[string]any{"Listen": listen, "Backend": backendAddr, "Cert": cert, "Key": key}); err != nil {
			return err
		}
		conf := filepath.Join(cdir, "Caddyfile")
		if err := os.WriteFile(conf, buf.Bytes(), 0o644); err != nil {
			return err
		}
		env := []string{"HOME=" + cdir, "XDG_DATA_HOME=" + cdir, "XDG_CONFIG_HOME=" + cdir}
		p, err := ps.start(tCaddyTLS, e.cpus, env, caddy, "run", "--config", conf, "--adapter", "caddyfile")
		if err != nil {
			return err
		}
		e.targets[tCaddyTLS] = &target{name: tCaddyTLS, url: "https://" + listen, proxy: p}
	}

	listen, admin := next(), next()
	buf.Reset()
	if err := exgateConfig.Execute(&buf, map[string]any{
		"Listen": listen, "Admin": admin, "Upstream": "http://" + backendAddr,
		"Backend": "redis", "Redis": e.redisAd, "Limits": true, "Rate": rateOff, "Cert": cert, "Key": key,
	}); err != nil {
		return err
	}
	path := filepath.Join(e.work, tExgateTLS+".yaml")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return err
	}
	p, err = ps.start(tExgateTLS, e.cpus, []string{"EXGATE_KEY_SECRET=" + keySecret}, filepath.Join(e.bins, "exgate"), "-config", path)
	if err != nil {
		return err
	}
	e.targets[tExgateTLS] = &target{name: tExgateTLS, url: "https://" + listen, proxy: p, admin: admin}
	return nil
}

// httpClient returns the benchmark's HTTP client: it accepts the
// self-signed certificate of the TLS targets (loopback only). Every
// client shares benchTransport and its keep-alive connections.
func httpClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: benchTransport}
}

// benchTransport is the Transport of every httpClient: one pool of
// keep-alive connections, so that the surge's scrapes of exgate's
// metrics, many a second, reuse theirs. A Transport per client left each
// scrape's connection open and idle (exgate closes it after
// server.idle_timeout, 2 minutes), and exgate's admin listener holds at
// most admin.max_connections (64) at once: the 65th scrape waited in the
// kernel's queue until its 5 s timeout failed the run.
var benchTransport = &http.Transport{
	TLSClientConfig:     &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the benchmark's own certificate, on loopback
	MaxIdleConnsPerHost: 4,
}

// tlsOverhead writes, per proxy, what TLS costs it: its req/s over TLS ÷
// over plain HTTP, and the proxy CPU per request of each, same run.
func tlsOverhead(p func(string, ...any), res *Results) {
	p("\nWhat terminating TLS costs each proxy (same run; plain HTTP from the GET markets scenario above):\n\n")
	p("| proxy | req/s TLS ÷ plain | proxy CPU µs/req plain | TLS | all CPU µs/req plain | TLS |\n")
	p("|---|--:|--:|--:|--:|--:|\n")
	for _, t := range []string{tNginxTLS, tCaddyTLS, tExgateTLS} {
		tr, pr := res.row(scTLS, t), res.row(scMarkets, tlsPeers[t])
		if tr == nil || pr == nil {
			continue
		}
		p("| %s | %s | %.1f | %.1f | %.1f | %.1f |\n", targetLabel(t), fmtRatio(ratio(tr, pr)),
			cpuOf(pr, roleProxy), cpuOf(tr, roleProxy), allCPU(pr), allCPU(tr))
	}
	if e, n, c := res.row(scTLS, tExgateTLS), res.row(scTLS, tNginxTLS), res.row(scTLS, tCaddyTLS); e != nil {
		p("\nOver TLS: exgate with Redis limits ÷ NGINX %s, ÷ Caddy %s (req/s).\n", fmtRatio(ratio(e, n)), fmtRatio(ratio(e, c)))
	}
}
