package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/limiter"
)

// loadTiers reads the tokens file (token id → tier) and the users file
// (user id → tier) the configuration names, if any, through read.
func loadTiers(cfg *config.Config, configPath string, read readOnce) (tokens, users map[string]string, err error) {
	if tokens, err = loadTokens(cfg, configPath, read); err != nil {
		return nil, nil, err
	}
	if users, err = loadUsers(cfg, configPath, read); err != nil {
		return nil, nil, err
	}
	return tokens, users, nil
}

// readOnce reads files and keeps what it read, by path: the file watch's
// first digest is of the content in force, not of a second reading that
// a change in between would make newer.
type readOnce map[string][]byte

// read returns the content of the file at path, read now or before,
// within limiter.MaxTokensFileSize.
func (r readOnce) read(path string) ([]byte, error) {
	if b, ok := r[path]; ok {
		return b, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limiter.MaxTokensFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(b) > limiter.MaxTokensFileSize {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, limiter.MaxTokensFileSize)
	}
	r[path] = b
	return b, nil
}

// withResolvedFiles returns a copy of cfg whose files that are read
// where they are used (the Redis TLS files, the identity key files) are
// taken from the configuration file's directory (fromConfigDir). cfg
// itself keeps them as written, so that a reload compares like with like.
func withResolvedFiles(cfg *config.Config, configPath string) *config.Config {
	c := *cfg
	resolveRedisFiles(&c, configPath)
	resolveIdentityFiles(&c, configPath)
	return &c
}

// loadTokens reads the configuration's tokens file, if any, through
// read; a relative path is taken from the configuration file's directory.
func loadTokens(cfg *config.Config, configPath string, read readOnce) (map[string]string, error) {
	if cfg.TokensFile == "" {
		return nil, nil
	}
	path := fromConfigDir(configPath, cfg.TokensFile)
	data, err := read.read(path)
	if err == nil {
		var tokens map[string]string
		if tokens, err = limiter.ParseTokens(path, data, tierNames(cfg)); err == nil {
			return tokens, nil
		}
	}
	return nil, fmt.Errorf("tokens_file: %w", err)
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
// any, through read; a relative path is taken from the configuration
// file's directory.
func loadUsers(cfg *config.Config, configPath string, read readOnce) (map[string]string, error) {
	if cfg.Identity.UsersFile == "" {
		return nil, nil
	}
	path := fromConfigDir(configPath, cfg.Identity.UsersFile)
	data, err := read.read(path)
	if err == nil {
		var users map[string]string
		if users, err = limiter.ParseUsers(path, data, tierNames(cfg)); err == nil {
			return users, nil
		}
	}
	return nil, fmt.Errorf("identity.users_file: %w", err)
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
// configuration file when it is relative; from the working directory when
// the configuration came from a pipe or a device (/dev/stdin, <(…)),
// whose directory holds no files of it.
func fromConfigDir(configPath, path string) string {
	if path == "" || filepath.IsAbs(path) || !rereadable(configPath) {
		return path
	}
	return filepath.Join(filepath.Dir(configPath), path)
}

// rereadable reports whether the configuration at configPath is a
// regular file (through symbolic links), which can be read again on a
// reload, as opposed to none ("") or a pipe or device, which gives its
// content once.
func rereadable(configPath string) bool {
	if configPath == "" {
		return false
	}
	st, err := os.Stat(configPath)
	return err == nil && st.Mode().IsRegular()
}

// resolveRedisFiles makes the Redis TLS files of cfg relative to the
// configuration file's directory.
func resolveRedisFiles(cfg *config.Config, configPath string) {
	r := &cfg.Limiter.Redis
	r.TLSCAFile = fromConfigDir(configPath, r.TLSCAFile)
	r.TLSCertFile = fromConfigDir(configPath, r.TLSCertFile)
	r.TLSKeyFile = fromConfigDir(configPath, r.TLSKeyFile)
}
