package upstream

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/pemfile"
	"github.com/exgate/exgate/internal/poll"
)

// ClientTLS is how exgate dials a service's instances over TLS: TLS 1.2
// or later, their certificates checked against the configured
// certificate authorities (the system's when none) for the configured
// server name, exgate's client certificate presented when one is
// configured (mutual TLS), and HTTP/2 offered through ALPN unless turned
// off. The files are read again by Reload and Watch and, when their
// content changed and they load, used for the connections dialled from
// then on; established connections keep theirs, and a set that fails to
// load (a missing or half-written file, a key that does not match, an
// expired certificate) leaves the last good one in place, as the traffic
// listener's certificates do (edge.Certificates).
type ClientTLS struct {
	log   *zap.Logger
	where string // the YAML path of the settings, such as "upstream.tls"
	// serverName is the name certificates are checked for; "" is the
	// host dialled.
	serverName string
	http2      bool
	// OnReload, when set, is told the outcome of every reload that read
	// changed files, and the earliest expiry of the client certificate
	// in force (zero without one).
	OnReload func(ok bool, notAfter time.Time)

	cur atomic.Pointer[clientSet]
	// names holds the server name of instances found under a name (DNS),
	// by host:port (string → string).
	names sync.Map

	mu      sync.Mutex // serialises Reload
	files   config.BackendTLS
	lastBad pemfile.Digest // the last content that failed, not reported again by Watch
}

// clientSet is one loaded set of files.
type clientSet struct {
	roots    *x509.CertPool // nil: the system's
	cert     *tls.Certificate
	digest   pemfile.Digest
	notAfter time.Time
}

// LoadClientTLS reads the files of c, whose paths are used as they are
// (the caller resolves relative ones); where is the YAML path of c, which
// every error names. serverName is c.ServerName, or, when that is empty,
// the name the service's instances are found under (ServerName of a DNS
// name), or "" for the host of each instance's URL.
func LoadClientTLS(c config.BackendTLS, where, serverName string, log *zap.Logger) (*ClientTLS, error) {
	if log == nil {
		log = zap.NewNop()
	}
	if c.ServerName != "" {
		serverName = c.ServerName
	}
	ct := &ClientTLS{log: log, where: where, serverName: serverName, http2: c.HTTP2, files: c}
	set, err := loadClientSet(c, where, time.Now())
	if err != nil {
		return nil, err
	}
	ct.cur.Store(set)
	return ct, nil
}

// CheckClientTLS reads and parses the files of c as LoadClientTLS does
// and returns every problem (none when they load), each naming its YAML
// path below where; it backs exgate check-config.
func CheckClientTLS(c config.BackendTLS, where string) []error {
	var errs []error
	now := time.Now()
	if c.CAFile != "" {
		ca := config.BackendTLS{CAFile: c.CAFile}
		if _, err := loadClientSet(ca, where, now); err != nil {
			errs = append(errs, err)
		}
	}
	if c.CertFile != "" || c.KeyFile != "" {
		kp := config.BackendTLS{CertFile: c.CertFile, KeyFile: c.KeyFile}
		if _, err := loadClientSet(kp, where, now); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// loadClientSet reads and parses the files of c.
func loadClientSet(c config.BackendTLS, where string, now time.Time) (*clientSet, error) {
	digest, ca, cert, key, err := readClientFiles(c, where)
	if err != nil {
		return nil, err
	}
	set := &clientSet{digest: digest}
	if ca != nil {
		set.roots = x509.NewCertPool()
		if !set.roots.AppendCertsFromPEM(ca) {
			return nil, fmt.Errorf("%s.ca_file: %s holds no PEM certificate", where, c.CAFile)
		}
	}
	if cert == nil {
		return set, nil
	}
	kp, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("%s.cert_file: %s, %s: %w", where, c.CertFile, c.KeyFile, err)
	}
	leaf := kp.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(kp.Certificate[0]); err != nil {
			return nil, fmt.Errorf("%s.cert_file: %s: %w", where, c.CertFile, err)
		}
		kp.Leaf = leaf
	}
	if now.After(leaf.NotAfter) {
		return nil, fmt.Errorf("%s.cert_file: %s: certificate expired at %s", where, c.CertFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	if now.Before(leaf.NotBefore) {
		return nil, fmt.Errorf("%s.cert_file: %s: certificate not valid before %s", where, c.CertFile, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	set.cert, set.notAfter = &kp, leaf.NotAfter
	return set, nil
}

// readClientFiles reads the files c names (nil for those it does not)
// and digests them all.
func readClientFiles(c config.BackendTLS, where string) (d pemfile.Digest, ca, cert, key []byte, err error) {
	dg := pemfile.NewDigester()
	for _, f := range []struct {
		key, path string
		to        *[]byte
	}{{"ca_file", c.CAFile, &ca}, {"cert_file", c.CertFile, &cert}, {"key_file", c.KeyFile, &key}} {
		if f.path == "" {
			dg.Add(nil)
			continue
		}
		b, err := pemfile.Read(f.path)
		if err != nil {
			return d, nil, nil, nil, fmt.Errorf("%s.%s: %w", where, f.key, err)
		}
		dg.Add(b)
		*f.to = b
	}
	return dg.Sum(), ca, cert, key, nil
}

// Config returns the configuration of a connection to addr (host:port),
// from the files in force now. The server name is the configured one,
// else the name addr's instance was found under (NameInstances), else
// addr's host.
func (c *ClientTLS) Config(addr string) *tls.Config {
	set := c.cur.Load()
	tc := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: set.roots, ServerName: c.serverName}
	if tc.ServerName == "" {
		if n, ok := c.names.Load(addr); ok {
			tc.ServerName = n.(string)
		} else if host, _, err := net.SplitHostPort(addr); err == nil {
			tc.ServerName = host
		} else {
			tc.ServerName = addr
		}
	}
	if set.cert != nil {
		tc.Certificates = []tls.Certificate{*set.cert}
	}
	if c.http2 {
		tc.NextProtos = []string{"h2", "http/1.1"}
	}
	return tc
}

// NameInstances returns src with each instance it finds dialled for
// serverName, the name they were found under (ServerName of a DNS name),
// unless a server name is configured: an instance found by its address
// has a certificate for the service's name, not for the address.
func (c *ClientTLS) NameInstances(src Source, serverName string) Source {
	return sourceFunc(func(ctx context.Context, update func([]Endpoint)) {
		src.Run(ctx, func(eps []Endpoint) {
			for _, ep := range eps {
				c.names.Store(ep.URL.Host, serverName)
			}
			update(eps)
		})
	})
}

// sourceFunc is a function that is a Source.
type sourceFunc func(ctx context.Context, update func([]Endpoint))

// Run calls f.
func (f sourceFunc) Run(ctx context.Context, update func([]Endpoint)) { f(ctx, update) }

// Apply makes tr dial https instances through c: each connection is
// dialled by tr.DialContext, then its handshake made with Config, bounded
// by tr.TLSHandshakeTimeout. An instance that accepts HTTP/2 through ALPN
// gets it (tr must have ForceAttemptHTTP2 set, as NewTransport's has).
func (c *ClientTLS) Apply(tr *http.Transport) {
	dial := tr.DialContext
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	timeout := tr.TLSHandshakeTimeout
	tr.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		raw, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		conn := tls.Client(raw, c.Config(addr))
		hctx := ctx
		if timeout > 0 {
			var cancel context.CancelFunc
			hctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		if err := conn.HandshakeContext(hctx); err != nil {
			raw.Close()
			return nil, err
		}
		return conn, nil
	}
}

// NotAfter returns when the client certificate in force expires; zero
// without one.
func (c *ClientTLS) NotAfter() time.Time { return c.cur.Load().notAfter }

// Reload reads the files again, those of files when it is not nil (a
// reloaded configuration), and puts them in force when their content
// changed and they load. It reports whether a new set is now in force. A
// failure keeps the current set and is logged.
func (c *ClientTLS) Reload(files *config.BackendTLS) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.files
	if files != nil {
		f = *files
	}
	digest, _, _, _, err := readClientFiles(f, c.where)
	if err == nil && digest == c.cur.Load().digest {
		c.files = f
		return false, nil
	}
	var set *clientSet
	if err == nil {
		set, err = loadClientSet(f, c.where, time.Now())
	}
	if err != nil {
		c.lastBad = digest
		c.log.Error("backend TLS files not reloaded; dialling with the last good ones", zap.String("settings", c.where), zap.Error(err))
		c.observe(false, c.cur.Load().notAfter)
		return false, err
	}
	c.files = f
	c.cur.Store(set)
	c.log.Info("backend TLS files reloaded", zap.String("settings", c.where), zap.Bool("client_certificate", set.cert != nil), zap.Time("not_after", set.notAfter))
	c.observe(true, set.notAfter)
	return true, nil
}

// observe calls OnReload when it is set.
func (c *ClientTLS) observe(ok bool, notAfter time.Time) {
	if c.OnReload != nil {
		c.OnReload(ok, notAfter)
	}
}

// Watch reloads the files every interval until ctx ends. Unchanged files
// and the same bad content seen again are skipped silently.
func (c *ClientTLS) Watch(ctx context.Context, interval time.Duration) {
	poll.Every(ctx, interval, func() {
		c.mu.Lock()
		digest, _, _, _, err := readClientFiles(c.files, c.where)
		skip := err == nil && (digest == c.cur.Load().digest || digest == c.lastBad)
		c.mu.Unlock()
		if !skip {
			_, _ = c.Reload(nil)
		}
	})
}
