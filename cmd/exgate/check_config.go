package main

import (
	"bytes"
	"fmt"
	"io"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/identity"
	"github.com/exgate/exgate/limiter"
	"github.com/exgate/exgate/proxy"
)

// checkConfigCommand implements `exgate check-config FILE`: it reports
// every problem of the configuration at FILE by its YAML path
// (config.CheckFile), then reads the files the configuration names; it
// prints config.CheckFile's "ok" only when both are good.
func checkConfigCommand(args []string, getenv func(string) (string, bool), stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "usage: exgate check-config FILE")
		return 2
	}
	var report bytes.Buffer
	if !config.CheckFile(args[0], getenv, &report) {
		_, _ = io.Copy(stdout, &report)
		return 1
	}
	if err := checkNamedFiles(args[0], getenv); err != nil {
		fmt.Fprintln(stdout, err)
		return 1
	}
	_, _ = io.Copy(stdout, &report)
	return 0
}

// checkNamedFiles reads the files the valid configuration at path names:
// the tokens and users files, the Redis TLS files, the traffic listener's
// certificates and the identity key files (PEM public keys and the JWKS
// file; secrets live in the environment of the gateways and are not
// checked here).
func checkNamedFiles(path string, getenv func(string) (string, bool)) error {
	cfg, err := config.Load(path, getenv)
	if err != nil {
		return err
	}
	if _, _, err := loadTiers(cfg, path); err != nil {
		return err
	}
	resolveFiles(cfg, path)
	var files []config.JWTKey
	for _, k := range cfg.Identity.JWT.Keys {
		if k.PublicKeyFile != "" {
			files = append(files, k)
		}
	}
	if _, err := identity.StaticKeys(files, getenv); err != nil {
		return err
	}
	if f := cfg.Identity.JWT.JWKSFile; f != "" {
		if _, err := identity.ReadJWKSFile(f, cfg.Identity.JWT.JWKSAlgorithms); err != nil {
			return err
		}
	}
	if _, err = limiter.RedisTLSConfig(cfg.Limiter.Redis); err != nil {
		return err
	}
	if files := certificateFiles(cfg, path); len(files) > 0 {
		_, err = proxy.LoadCertificates(files, nil, nil)
	}
	return err
}
