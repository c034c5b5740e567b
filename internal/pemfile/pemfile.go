// Package pemfile reads the PEM files exgate is given (certificates,
// keys, certificate authorities) within a size no real one reaches, and
// digests what it read, for the watchers that notice a changed file by
// reading it again.
package pemfile

import (
	"bytes"
	"crypto/sha256"
	"encoding/pem"
	"fmt"
	"hash"
	"io"
	"os"
	"strconv"
)

// MaxSize bounds a file read; real chains are a few KiB.
const MaxSize = 1 << 20

// Read reads the file at path, of at most MaxSize bytes, every PEM block
// in it whole (Whole).
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
	if err := Whole(b); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}

// Whole reports an error when a PEM block begun in b does not decode: cut
// off (a file caught half written) or malformed. Go's readers of PEM
// (tls.X509KeyPair, x509.CertPool.AppendCertsFromPEM) skip such a block
// and keep the blocks before it, so a chain cut in its second certificate
// loads as its leaf alone, and a bundle of authorities cut in its second
// as its first alone: served, or trusted, until the file is read again.
// A line starting "-----BEGIN " starts a block, as pem.Decode reads one.
func Whole(b []byte) error {
	begun := bytes.Count(b, []byte("\n-----BEGIN "))
	if bytes.HasPrefix(b, []byte("-----BEGIN ")) {
		begun++
	}
	n := 0
	for rest := b; ; n++ {
		var blk *pem.Block
		if blk, rest = pem.Decode(rest); blk == nil {
			break
		}
	}
	if n < begun {
		return fmt.Errorf("%d of its %d PEM blocks do not decode: cut off (the file half written?) or malformed", begun-n, begun)
	}
	return nil
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
