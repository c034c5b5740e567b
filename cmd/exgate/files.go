package main

import (
	"fmt"
	"path/filepath"
	"slices"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/limiter"
)

// loadTiers reads the tokens file (token id → tier) and the users file
// (user id → tier) the configuration names, if any.
func loadTiers(cfg *config.Config, configPath string) (tokens, users map[string]string, err error) {
	if tokens, err = loadTokens(cfg, configPath); err != nil {
		return nil, nil, err
	}
	if users, err = loadUsers(cfg, configPath); err != nil {
		return nil, nil, err
	}
	return tokens, users, nil
}

// resolveFiles makes the files cfg names that are read where they are
// used (the Redis TLS files, the identity key files) relative to the
// configuration file's directory.
func resolveFiles(cfg *config.Config, configPath string) {
	resolveRedisFiles(cfg, configPath)
	resolveIdentityFiles(cfg, configPath)
}

// loadTokens reads the configuration's tokens file, if any; a relative
// path is taken from the configuration file's directory.
func loadTokens(cfg *config.Config, configPath string) (map[string]string, error) {
	if cfg.TokensFile == "" {
		return nil, nil
	}
	path := fromConfigDir(configPath, cfg.TokensFile)
	tokens, err := limiter.LoadTokens(path, tierNames(cfg))
	if err != nil {
		return nil, fmt.Errorf("tokens_file: %w", err)
	}
	return tokens, nil
}

// certificateFiles returns the traffic listener's certificate files,
// relative paths taken from the configuration file's directory.
func certificateFiles(cfg *config.Config, configPath string) []config.Certificate {
	files := make([]config.Certificate, len(cfg.Server.TLS.Certificates))
	for i, c := range cfg.Server.TLS.Certificates {
		files[i] = config.Certificate{CertFile: fromConfigDir(configPath, c.CertFile), KeyFile: fromConfigDir(configPath, c.KeyFile)}
	}
	return files
}

// loadUsers reads the configuration's users file (user id → tier), if
// any; a relative path is taken from the configuration file's directory.
func loadUsers(cfg *config.Config, configPath string) (map[string]string, error) {
	if cfg.Identity.UsersFile == "" {
		return nil, nil
	}
	users, err := limiter.LoadUsers(fromConfigDir(configPath, cfg.Identity.UsersFile), tierNames(cfg))
	if err != nil {
		return nil, fmt.Errorf("identity.users_file: %w", err)
	}
	return users, nil
}

// tierNames returns the configured tiers, sorted.
func tierNames(cfg *config.Config) []string {
	tiers := make([]string, 0, len(cfg.Tiers))
	for t := range cfg.Tiers {
		tiers = append(tiers, t)
	}
	slices.Sort(tiers)
	return tiers
}

// resolveIdentityFiles makes the identity key files of cfg relative to
// the configuration file's directory.
func resolveIdentityFiles(cfg *config.Config, configPath string) {
	j := &cfg.Identity.JWT
	j.Keys = slices.Clone(j.Keys)
	for i := range j.Keys {
		j.Keys[i].PublicKeyFile = fromConfigDir(configPath, j.Keys[i].PublicKeyFile)
	}
	j.JWKSFile = fromConfigDir(configPath, j.JWKSFile)
}

// fromConfigDir returns path, taken from the directory of the
// configuration file when it is relative.
func fromConfigDir(configPath, path string) string {
	if path == "" || filepath.IsAbs(path) || configPath == "" {
		return path
	}
	return filepath.Join(filepath.Dir(configPath), path)
}

// resolveRedisFiles makes the Redis TLS files of cfg relative to the
// configuration file's directory.
func resolveRedisFiles(cfg *config.Config, configPath string) {
	r := &cfg.Limiter.Redis
	r.TLSCAFile = fromConfigDir(configPath, r.TLSCAFile)
	r.TLSCertFile = fromConfigDir(configPath, r.TLSCertFile)
	r.TLSKeyFile = fromConfigDir(configPath, r.TLSKeyFile)
}
