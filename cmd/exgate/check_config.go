package main

import (
	"flag"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/edge"
	"github.com/exgate/exgate/identity"
	"github.com/exgate/exgate/limiter"
)

// checkConfigCommand implements `exgate check-config [-files=false] FILE`:
// it reads FILE once — a regular file, or a pipe or device such as
// /dev/stdin ("-" too) or <(…) — and reports every problem in one pass,
// each named by its YAML path: the YAML's and the environment's
// (config.Check), and those of the files the configuration names
// (namedFiles), which are read unless -files=false; then, when there was
// no problem, what the configuration sizes (idempotencyCapacity); the
// warnings of settings that are valid but unsafe; and "ok" when there was
// no problem.
// It exits 1 on a problem, 2 on bad usage.
func checkConfigCommand(args []string, getenv func(string) (string, bool), stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check-config", flag.ContinueOnError)
	fs.SetOutput(stderr)
	files := fs.Bool("files", true, "also read the files the configuration names (false where they exist only where it will run, such as a ConfigMap checked before it is applied)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: exgate check-config [-files=false] FILE   (FILE - reads standard input)")
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	path := fs.Arg(0)
	var ch *config.Checked
	if path == "-" {
		data, err := io.ReadAll(io.LimitReader(stdin, config.MaxFileSize+1))
		if err != nil {
			fmt.Fprintln(stdout, "standard input:", err)
			return 1
		}
		ch, path = config.Check("standard input", data, getenv), ""
	} else {
		ch = config.CheckFile(path, getenv)
	}
	if ch.Config != nil {
		for _, f := range namedFiles(ch.Config, path) {
			switch {
			case ch.Has(f.key):
				// The key itself is wrong; its problem is reported.
			case !*files:
				fmt.Fprintf(stdout, "not read (-files=false): %s: %s\n", f.key, f.file)
			default:
				for _, err := range f.check() {
					addFileProblem(ch, f.key, err)
				}
			}
		}
	}
	if ch.Config != nil && len(ch.Problems()) == 0 {
		for _, l := range idempotencyCapacity(ch.Config) {
			fmt.Fprintln(stdout, l)
		}
	}
	if !ch.Report(stdout) {
		return 1
	}
	return 0
}

// namedFile is a file a configuration names: its YAML key, its path
// (relative ones taken from the configuration file's directory,
// fromConfigDir) and how to read and check it as the gateway will.
type namedFile struct {
	key, file string
	check     func() []error
}

// namedFiles lists the files cfg names that the gateway reads: the tokens
// and users files, the identity key files (PEM public keys and the JWKS
// file; secrets live in the environment of the gateways and are not
// checked here), the Redis TLS files and the traffic listener's
// certificates.
func namedFiles(cfg *config.Config, configPath string) []namedFile {
	var out []namedFile
	if cfg.TokensFile != "" {
		out = append(out, namedFile{"tokens_file", fromConfigDir(configPath, cfg.TokensFile), func() []error {
			_, err := loadTokens(cfg, configPath, readOnce{})
			return errorList(err)
		}})
	}
	if cfg.Identity.UsersFile != "" {
		out = append(out, namedFile{"identity.users_file", fromConfigDir(configPath, cfg.Identity.UsersFile), func() []error {
			_, err := loadUsers(cfg, configPath, readOnce{})
			return errorList(err)
		}})
	}
	j := cfg.Identity.JWT
	for i, k := range j.Keys {
		if k.PublicKeyFile == "" {
			continue
		}
		f := fromConfigDir(configPath, k.PublicKeyFile)
		out = append(out, namedFile{fmt.Sprintf("identity.jwt.keys[%d].public_key_file", i), f, func() []error {
			if err := identity.CheckPublicKeyFile(f, k.Algorithms); err != nil {
				return []error{fmt.Errorf("%s: %w", f, err)}
			}
			return nil
		}})
	}
	if j.JWKSFile != "" {
		f := fromConfigDir(configPath, j.JWKSFile)
		out = append(out, namedFile{"identity.jwt.jwks_file", f, func() []error {
			_, err := identity.ReadJWKSFile(f, j.JWKSAlgorithms)
			return errorList(err)
		}})
	}
	out = append(out, redisFiles(cfg, configPath)...)
	out = append(out, backendTLSNamedFiles(cfg, configPath)...)
	for i, c := range certificateFiles(cfg, configPath) {
		out = append(out, namedFile{fmt.Sprintf("server.tls.certificates[%d]", i), c.CertFile + ", " + c.KeyFile, func() []error {
			return edge.CheckCertificates([]config.Certificate{c})
		}})
	}
	return out
}

// redisFiles lists limiter.redis's TLS files, when TLS is on: its
// certificate authorities, and its client certificate and key.
func redisFiles(cfg *config.Config, configPath string) []namedFile {
	r := cfg.Limiter.Redis
	if !r.TLS {
		return nil
	}
	var out []namedFile
	if r.TLSCAFile != "" {
		ca := r
		ca.TLSCAFile, ca.TLSCertFile, ca.TLSKeyFile = fromConfigDir(configPath, r.TLSCAFile), "", ""
		out = append(out, namedFile{"limiter.redis.tls_ca_file", ca.TLSCAFile, func() []error {
			_, err := limiter.RedisTLSConfig(ca)
			return errorList(err)
		}})
	}
	if r.TLSCertFile != "" && r.TLSKeyFile != "" {
		kp := r
		kp.TLSCAFile, kp.TLSCertFile, kp.TLSKeyFile = "", fromConfigDir(configPath, r.TLSCertFile), fromConfigDir(configPath, r.TLSKeyFile)
		out = append(out, namedFile{"limiter.redis.tls_cert_file", kp.TLSCertFile + ", " + kp.TLSKeyFile, func() []error {
			_, err := limiter.RedisTLSConfig(kp)
			return errorList(err)
		}})
	}
	return out
}

// errorList is err as a list: none for nil.
func errorList(err error) []error {
	if err == nil {
		return nil
	}
	return []error{err}
}

// problemPath is the YAML path a file problem begins with, as the
// gateway's own messages name it ("identity.jwt.jwks_file: …").
var problemPath = regexp.MustCompile(`^([a-z_]+(?:\[\d+\])?(?:\.[a-z_]+(?:\[\d+\])?)*)(?:, [a-z_]+)?: `)

// addFileProblem records err, a problem of the file at key, under the
// YAML path it names (else key), so that it carries the line of its key.
func addFileProblem(ch *config.Checked, key string, err error) {
	msg := err.Error()
	if m := problemPath.FindStringSubmatch(msg); m != nil && strings.HasPrefix(m[1], strings.SplitN(key, ".", 2)[0]) {
		ch.AddProblem(m[1], msg[len(m[0]):])
		return
	}
	ch.AddProblem(key, msg)
}
