package edge

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/pemfile"
	"github.com/exgate/exgate/internal/poll"
	"github.com/exgate/exgate/metrics"
)

// Certificates holds the TLS certificates the traffic listener serves and
// swaps in new ones read from their PEM files without dropping a
// connection: a handshake uses the set current when it starts,
// established connections keep theirs. A set that fails to load (a
// missing or half-written file, a key that does not match, an expired
// certificate) leaves the last good set in place.
//
// Changes are found by reading the files and comparing their content, not
// their modification times: a Kubernetes Secret volume swaps a "..data"
// symlink, which inotify-style watches of the files themselves miss and
// which can leave modification times unchanged, while reading the paths
// again always follows the link. Reading a few KiB every
// server.tls.reload_interval costs nothing measurable.
type Certificates struct {
	log     *zap.Logger
	metrics *metrics.Edge

	cur atomic.Pointer[certSet]

	mu      sync.Mutex // serialises Reload
	files   []config.Certificate
	lastBad pemfile.Digest // digest of the last set that failed, not logged again
}

// certSet is one loaded set of certificates.
type certSet struct {
	certs    []*tls.Certificate
	digest   pemfile.Digest
	notAfter time.Time // earliest expiry
}

// LoadCertificates reads the certificate files. Errors name the entry's
// YAML path. m may be nil.
func LoadCertificates(files []config.Certificate, log *zap.Logger, m *metrics.Edge) (*Certificates, error) {
	if log == nil {
		log = zap.NewNop()
	}
	if len(files) == 0 {
		return nil, errors.New("server.tls.certificates: none configured")
	}
	c := &Certificates{log: log, metrics: m, files: files}
	digest, data, err := readCertFiles(files)
	if err != nil {
		return nil, err
	}
	set, err := parseCertSet(files, data, time.Now())
	if err != nil {
		return nil, err
	}
	set.digest = digest
	c.cur.Store(set)
	m.SetCertNotAfter(set.notAfter)
	return c, nil
}

// TLSConfig returns the server configuration: TLS 1.2 or later with Go's
// default cipher suites and curves, the certificate chosen per handshake
// by GetCertificate. net/http adds the ALPN protocols.
func (c *Certificates) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: c.GetCertificate,
	}
}

// GetCertificate returns the certificate for a handshake: the first of
// the current set that the client's server name and algorithms accept
// (tls.ClientHelloInfo.SupportsCertificate, the rule crypto/tls applies to
// tls.Config.Certificates), else the first.
func (c *Certificates) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	set := c.cur.Load()
	if len(set.certs) == 1 {
		return set.certs[0], nil
	}
	for _, cert := range set.certs {
		if hello.SupportsCertificate(cert) == nil {
			return cert, nil
		}
	}
	return set.certs[0], nil
}

// NotAfter returns the earliest expiry of the served certificates.
func (c *Certificates) NotAfter() time.Time { return c.cur.Load().notAfter }

// Reload reads the files again, from files when it is not nil (a
// reloaded configuration), and swaps them in when their content changed
// and they load. It reports whether a new set is now served. A failure
// keeps the current set, is logged and counted; the same bad content is
// not reported twice in a row by Watch. Files named by a reloaded
// configuration are watched from then on even when they fail to load
// (not there yet, half written): Watch serves them once they are fixed,
// as it does the files it already watched, rather than keep reading the
// old ones, which the configuration no longer names, until the next
// SIGHUP.
func (c *Certificates) Reload(files []config.Certificate) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if files == nil {
		files = c.files
	}
	digest, data, err := readCertFiles(files)
	cur := c.cur.Load()
	if err == nil && digest == cur.digest {
		c.files = files
		return false, nil
	}
	var set *certSet
	if err == nil {
		set, err = parseCertSet(files, data, time.Now())
	}
	if err != nil {
		c.lastBad, c.files = digest, files
		c.metrics.CertReload(false)
		c.log.Error("TLS certificates not reloaded; serving the last good ones", zap.Error(err))
		return false, err
	}
	set.digest = digest
	c.files = files
	c.cur.Store(set)
	c.metrics.CertReload(true)
	c.metrics.SetCertNotAfter(set.notAfter)
	c.log.Info("TLS certificates reloaded", zap.Int("certificates", len(set.certs)), zap.Time("not_after", set.notAfter))
	return true, nil
}

// Watch reloads the files every interval until ctx ends. Unchanged files
// and the same bad content seen again are skipped silently.
func (c *Certificates) Watch(ctx context.Context, interval time.Duration) {
	poll.Every(ctx, interval, func() {
		c.mu.Lock()
		digest, _, err := readCertFiles(c.files)
		skip := err == nil && (digest == c.cur.Load().digest || digest == c.lastBad)
		c.mu.Unlock()
		if !skip {
			_, _ = c.Reload(nil)
		}
	})
}

// readCertFiles reads every file of files and returns their contents
// (certificate, key, certificate, key, …) and one digest of them all.
// An unreadable file's error names its YAML path.
func readCertFiles(files []config.Certificate) (pemfile.Digest, [][]byte, error) {
	d := pemfile.NewDigester()
	data := make([][]byte, 0, 2*len(files))
	for i, f := range files {
		for _, p := range []struct{ key, path string }{{"cert_file", f.CertFile}, {"key_file", f.KeyFile}} {
			b, err := pemfile.Read(p.path)
			if err != nil {
				return pemfile.Digest{}, nil, fmt.Errorf("server.tls.certificates[%d].%s: %w", i, p.key, err)
			}
			d.Add(b)
			data = append(data, b)
		}
	}
	return d.Sum(), data, nil
}

// CheckCertificates reads and parses each pair of files as
// LoadCertificates does, and returns the problem of every pair that is
// not good (none when all are), each naming its YAML path; it backs exgate
// check-config, which reports every problem at once.
func CheckCertificates(files []config.Certificate) []error {
	var errs []error
	now := time.Now()
	for i, f := range files {
		one := []config.Certificate{f}
		_, data, err := readCertFiles(one)
		if err == nil {
			_, err = parseCertSet(one, data, now)
		}
		if err != nil {
			// The problem names the pair as the first of one; it is pair i.
			errs = append(errs, fmt.Errorf("server.tls.certificates[%d]%s", i, strings.TrimPrefix(err.Error(), "server.tls.certificates[0]")))
		}
	}
	return errs
}

// parseCertSet parses data (certificate, key, … as readCertFiles returns
// it) into a set: each pair must hold a certificate chain and the key of
// its leaf, and no leaf may have expired or be not yet valid at now.
func parseCertSet(files []config.Certificate, data [][]byte, now time.Time) (*certSet, error) {
	set := &certSet{certs: make([]*tls.Certificate, 0, len(files))}
	for i := range files {
		cert, err := tls.X509KeyPair(data[2*i], data[2*i+1])
		if err != nil {
			return nil, fmt.Errorf("server.tls.certificates[%d]: %s, %s: %w", i, files[i].CertFile, files[i].KeyFile, err)
		}
		leaf := cert.Leaf
		if leaf == nil {
			if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
				return nil, fmt.Errorf("server.tls.certificates[%d].cert_file: %w", i, err)
			}
			cert.Leaf = leaf
		}
		if now.After(leaf.NotAfter) {
			return nil, fmt.Errorf("server.tls.certificates[%d].cert_file: %s: certificate expired at %s", i, files[i].CertFile, leaf.NotAfter.UTC().Format(time.RFC3339))
		}
		if now.Before(leaf.NotBefore) {
			return nil, fmt.Errorf("server.tls.certificates[%d].cert_file: %s: certificate not valid before %s", i, files[i].CertFile, leaf.NotBefore.UTC().Format(time.RFC3339))
		}
		if set.notAfter.IsZero() || leaf.NotAfter.Before(set.notAfter) {
			set.notAfter = leaf.NotAfter
		}
		set.certs = append(set.certs, &cert)
	}
	return set, nil
}
