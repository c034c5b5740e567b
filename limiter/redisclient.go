package limiter

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/exgate/exgate/config"
	"github.com/redis/go-redis/v9"
)

// NewRedisClient returns the client the configuration selects: standalone
// for one address, Cluster for several, Sentinel when master_name is set.
// Every command is bounded by the configured timeout, through the context
// as well as the socket, and is never retried (a retried script could
// count a request twice). With tls, the files it names are read now, so a
// missing or malformed one is an error at start, not at the first
// request.
//
// A Cluster client is built with DisableRoutingPolicies: otherwise its
// first command (and every command until one succeeds) first fetches the
// command table (COMMAND) from up to three random nodes, one after the
// other, under a deadline of its own (5s, each node's read bounded by the
// read timeout) whatever the command's context, and every command waits
// for that fetch behind one lock. With one node stopped, a call of
// duplicate protection or of the readiness check could wait three read
// timeouts past its deadline. exgate's commands need none of the table:
// they are routed by their first key (EVALSHA's and EVAL's are known
// without it), keyless ones (PING) to a master.
func NewRedisClient(rc config.Redis, password string) (redis.UniversalClient, error) {
	tc, err := RedisTLSConfig(rc)
	if err != nil {
		return nil, err
	}
	o := &redis.UniversalOptions{
		Addrs:                 rc.Addrs,
		MasterName:            rc.MasterName,
		DB:                    rc.DB,
		Username:              rc.Username,
		Password:              password,
		DialTimeout:           max(10*rc.Timeout, 500*time.Millisecond),
		ReadTimeout:           max(4*rc.Timeout, 100*time.Millisecond),
		WriteTimeout:          max(4*rc.Timeout, 100*time.Millisecond),
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
		DialerRetries:         1, // a refused dial fails at once, not after 5 tries inside the deadline
		PoolSize:              32,
		MinIdleConns:          2,
		ClientName:            "exgate",
		TLSConfig:             tc,
	}
	if o.MasterName == "" && len(o.Addrs) > 1 {
		co := o.Cluster()
		co.DisableRoutingPolicies = true
		return redis.NewClusterClient(co), nil
	}
	return redis.NewUniversalClient(o), nil
}

// RedisTLSConfig returns the TLS configuration of rc: nil without tls;
// else TLS 1.2 or later, Redis's certificate verified against tls_ca_file
// (the system's authorities when empty) for tls_server_name (when empty:
// the host of the one address, or, with several addresses or Sentinel,
// the host each connection dials), and the client certificate of
// tls_cert_file and tls_key_file when set. Paths are used as they are:
// the caller resolves relative ones.
func RedisTLSConfig(rc config.Redis) (*tls.Config, error) {
	if !rc.TLS {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: rc.TLSServerName}
	if tc.ServerName == "" && len(rc.Addrs) == 1 && rc.MasterName == "" {
		if host, _, err := net.SplitHostPort(rc.Addrs[0]); err == nil {
			tc.ServerName = host
		}
	}
	if rc.TLSCAFile != "" {
		pem, err := os.ReadFile(rc.TLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("limiter.redis.tls_ca_file: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("limiter.redis.tls_ca_file: %s holds no PEM certificate", rc.TLSCAFile)
		}
	}
	if rc.TLSCertFile != "" || rc.TLSKeyFile != "" {
		cert, err := tls.LoadX509KeyPair(rc.TLSCertFile, rc.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("limiter.redis.tls_cert_file, tls_key_file: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
