// Package pemfile reads the PEM files exgate is given (certificates,
// keys, certificate authorities) within a size no real one reaches, and
// digests what it read, for the watchers that notice a changed file by
// reading it again.
package pemfile

import (
	"crypto/sha256"
	"fmt"
	"hash"
	"io"
	"os"
	"strconv"
)

// MaxSize bounds a file read; real chains are a few KiB.
const MaxSize = 1 << 20

// Read reads the file at path, of at most MaxSize bytes.
func Read(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxSize {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, MaxSize)
	}
	return b, nil
}

// Digest is a SHA-256 of several files' contents.
type Digest [sha256.Size]byte

// Digester sums files' contents into one Digest. Its zero value is not
// ready; use NewDigester.
type Digester struct{ h hash.Hash }

// NewDigester returns a Digester holding nothing.
func NewDigester() Digester { return Digester{h: sha256.New()} }

// Add sums b, prefixed with its length, so that bytes moved from one
// file to the next change the digest.
func (d Digester) Add(b []byte) {
	var lenBuf [8]byte
	d.h.Write(strconv.AppendInt(lenBuf[:0], int64(len(b)), 10))
	d.h.Write(b)
}

// Sum returns the digest of everything added.
func (d Digester) Sum() Digest {
	var out Digest
	d.h.Sum(out[:0])
	return out
}
