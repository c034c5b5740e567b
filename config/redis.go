package config

import (
	"net"
	"strconv"
	"strings"
	"time"
)

// Redis configures the Redis store. Secrets are read from the environment
// variables named here, never from the file.
type Redis struct {
	// Addrs lists Redis addresses: one means standalone, several mean
	// Cluster, unless MasterName is set (Sentinel). Default: none.
	Addrs []string `yaml:"addrs"`
	// MasterName selects Sentinel mode. Default "".
	MasterName string `yaml:"master_name"`
	// DB is the database number (standalone and Sentinel). Default 0.
	DB int `yaml:"db"`
	// Username is the ACL user name. Default "".
	Username string `yaml:"username"`
	// PasswordEnv names the environment variable holding the password.
	// Default "EXGATE_REDIS_PASSWORD".
	PasswordEnv string `yaml:"password_env"`
	// TLS enables TLS to Redis. Default false.
	TLS bool `yaml:"tls"`
	// TLSCAFile is a PEM file of the certificate authorities that sign
	// Redis's certificate; "" means the system's. A relative path is taken
	// from the configuration file's directory. Requires TLS. Default "".
	TLSCAFile string `yaml:"tls_ca_file"`
	// TLSCertFile and TLSKeyFile are the PEM certificate and key exgate
	// presents to Redis, which asks for one unless tls-auth-clients is no.
	// Both or neither; relative paths as TLSCAFile. Requires TLS.
	// Default "".
	TLSCertFile string `yaml:"tls_cert_file"`
	TLSKeyFile  string `yaml:"tls_key_file"`
	// TLSServerName is the name Redis's certificate must be valid for;
	// "" means the host of the address dialled. Requires TLS. Default "".
	TLSServerName string `yaml:"tls_server_name"`
	// Timeout is the deadline of every Redis call. Default 25ms.
	Timeout time.Duration `yaml:"timeout"`
}

// DefaultRedis returns the Redis defaults: no addresses (no Redis), the
// password in EXGATE_REDIS_PASSWORD, a call deadline short enough that a
// slow store costs a request little.
func DefaultRedis() Redis {
	return Redis{PasswordEnv: "EXGATE_REDIS_PASSWORD", Timeout: 25 * time.Millisecond}
}

// check reports problems in the Redis settings at p (limiter.redis).
func (r *Redis) check(col *collector, p path) {
	for i, a := range r.Addrs {
		checkDialAddr(col, p.key("addrs").index(i), a)
	}
	col.envName(p.key("password_env"), r.PasswordEnv)
	if r.Timeout <= 0 || r.Timeout > time.Second {
		col.addf(p.key("timeout"), "must be greater than 0 and at most 1s, got %s", r.Timeout)
	}
	if !r.TLS {
		for _, f := range []struct{ key, value string }{
			{"tls_ca_file", r.TLSCAFile},
			{"tls_cert_file", r.TLSCertFile},
			{"tls_key_file", r.TLSKeyFile},
			{"tls_server_name", r.TLSServerName},
		} {
			if f.value != "" {
				col.addf(p.key(f.key), "requires %s: true", p.key("tls"))
			}
		}
	}
	if (r.TLSCertFile == "") != (r.TLSKeyFile == "") {
		if r.TLSCertFile == "" {
			col.addf(p.key("tls_cert_file"), "required with %s", p.key("tls_key_file"))
		} else {
			col.addf(p.key("tls_key_file"), "required with %s", p.key("tls_cert_file"))
		}
	}
	if r.DB < 0 {
		col.addf(p.key("db"), "must not be negative, got %d", r.DB)
	} else if r.DB != 0 && len(r.Addrs) > 1 && r.MasterName == "" {
		col.addf(p.key("db"), "must be 0 with Redis Cluster (several addrs and no master_name), got %d", r.DB)
	}
}

// checkDialAddr checks an address to connect to: a non-empty host and a
// port from 1 to 65535.
func checkDialAddr(col *collector, p path, a string) {
	host, port, err := net.SplitHostPort(a)
	if err != nil || host == "" {
		col.addf(p, "want host:port such as \"127.0.0.1:6379\", got %q", a)
		return
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n < 1 {
		col.addf(p, "port %q must be a number from 1 to 65535", port)
	}
	if strings.ContainsAny(host, " \t/") {
		col.addf(p, "host %q is not a host name or IP address", host)
	}
}
