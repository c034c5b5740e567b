package main

import (
	"context"
	"crypto/sha256"
	"time"

	"go.uber.org/zap"

	"github.com/exgate/exgate/internal/poll"
)

// watchedFiles returns the files whose content the configuration in force
// depends on: the configuration file, the tokens file and the users file
// (relative ones taken from the configuration file's directory).
func (a *app) watchedFiles() []string {
	cfg := a.live.Load()
	files := []string{a.d.configPath}
	for _, f := range []string{cfg.TokensFile, cfg.Identity.UsersFile} {
		if f != "" {
			files = append(files, fromConfigDir(a.d.configPath, f))
		}
	}
	return files
}

// filesDigest is a digest of the content of files, in order, as read
// holds it or else as read now; a file that cannot be read counts by its
// error, so that it appearing or vanishing is a change too. Reading
// follows symbolic links, so a Kubernetes ConfigMap volume, which swaps
// its "..data" link to a new directory, reads as the new content.
func filesDigest(files []string, read readOnce) [sha256.Size]byte {
	h := sha256.New()
	for _, f := range files {
		b, err := read.read(f)
		if err != nil {
			b = []byte("\x00error: " + err.Error())
		}
		sum := sha256.Sum256(b)
		h.Write([]byte(f))
		h.Write(sum[:])
	}
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}

// watchFiles polls the watched files every interval and sends on changed
// when their content differs from the last reading (at first, the one
// taken at start), until ctx ends. The reload itself runs where SIGHUP's
// does (wait), one at a time.
func (a *app) watchFiles(ctx context.Context, interval time.Duration, changed chan<- struct{}) {
	last := a.startDigest
	poll.Every(ctx, interval, func() {
		files := a.watchedFiles()
		d := filesDigest(files, readOnce{})
		if d == last {
			return
		}
		last = d
		a.log.Info("configuration files changed; reloading", zap.Strings("files", files))
		select {
		case changed <- struct{}{}:
		default: // a reload is already pending; it reads the new content
		}
	})
}
