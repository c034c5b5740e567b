package identity

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/exgate/exgate/config"
)

// MinSecretLen is the shortest HMAC secret accepted, in bytes.
const MinSecretLen = 16

// MinRSABits is the smallest RSA modulus accepted.
const MinRSABits = 2048

// maxKeyFileSize bounds a PEM or JWKS file.
const maxKeyFileSize = 1 << 20

// key is one verification key with the algorithms it may verify. Its
// material's type fixes its family: an HMAC secret is []byte and is never
// taken from a public key, so that no algorithm confusion is possible.
type key struct {
	kid      string
	algs     []string
	material any // []byte, *rsa.PublicKey, *ecdsa.PublicKey or ed25519.PublicKey
}

// allows reports whether the key verifies alg.
func (k *key) allows(alg string) bool { return slices.Contains(k.algs, alg) }

// keySet is an immutable set of keys, looked up by kid.
type keySet struct {
	byKID map[string][]*key // kid "" holds the keys without one
	n     int
}

func newKeySet(keys []*key) *keySet {
	s := &keySet{byKID: map[string][]*key{}, n: len(keys)}
	for _, k := range keys {
		s.byKID[k.kid] = append(s.byKID[k.kid], k)
	}
	return s
}

// StaticKeys reads the configured static keys: secrets from getenv, PEM
// files from the paths given (already resolved against the configuration
// file's directory). Each problem names the key's YAML path.
func StaticKeys(keys []config.JWTKey, getenv func(string) (string, bool)) ([]*key, error) {
	var out []*key
	var errs []error
	for i, kc := range keys {
		p := fmt.Sprintf("identity.jwt.keys[%d]", i)
		k := &key{kid: kc.ID, algs: slices.Clone(kc.Algorithms)}
		if kc.SecretEnv != "" {
			secret, _ := getenv(kc.SecretEnv)
			if len(secret) < MinSecretLen {
				errs = append(errs, fmt.Errorf("%s.secret_env: %s must hold an HMAC secret of at least %d bytes (it holds %d)",
					p, kc.SecretEnv, MinSecretLen, len(secret)))
				continue
			}
			k.material = []byte(secret)
		} else {
			pub, err := readPublicKey(kc.PublicKeyFile)
			if err == nil {
				err = checkAlgorithms(pub, k.algs)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s.public_key_file: %s: %w", p, kc.PublicKeyFile, err))
				continue
			}
			k.material = pub
		}
		out = append(out, k)
	}
	return out, errors.Join(errs...)
}

// CheckPublicKeyFile reads the PEM public key at path as StaticKeys does
// and checks that it can verify algs; it backs exgate check-config.
func CheckPublicKeyFile(path string, algs []string) error {
	pub, err := readPublicKey(path)
	if err == nil {
		err = checkAlgorithms(pub, algs)
	}
	return err
}

// readPublicKey reads a PEM public key: PKIX "PUBLIC KEY", PKCS #1
// "RSA PUBLIC KEY" or the key of a "CERTIFICATE". A private key is
// refused: the gateway never needs one.
func readPublicKey(path string) (any, error) {
	data, err := readSmallFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM block found")
	}
	var pub any
	switch block.Type {
	case "PUBLIC KEY":
		pub, err = x509.ParsePKIXPublicKey(block.Bytes)
	case "RSA PUBLIC KEY":
		pub, err = x509.ParsePKCS1PublicKey(block.Bytes)
	case "CERTIFICATE":
		var c *x509.Certificate
		if c, err = x509.ParseCertificate(block.Bytes); err == nil {
			pub = c.PublicKey
		}
	case "PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY", "ENCRYPTED PRIVATE KEY":
		return nil, fmt.Errorf("holds a private key (%s); give the public key only", block.Type)
	default:
		return nil, fmt.Errorf("PEM block %q is not a public key", block.Type)
	}
	if err != nil {
		return nil, err
	}
	return pub, nil
}

func readSmallFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > maxKeyFileSize {
		return nil, fmt.Errorf("larger than %d bytes", maxKeyFileSize)
	}
	buf := make([]byte, st.Size())
	_, err = f.ReadAt(buf, 0)
	if err != nil && st.Size() > 0 {
		return nil, err
	}
	return buf, nil
}

// compatible returns the algorithms of algs that pub can verify: RSA keys
// RS*/PS*, ECDSA keys the ES algorithm of their curve, Ed25519 keys
// EdDSA. HMAC algorithms never apply to a public key.
func compatible(pub any, algs []string) []string {
	var fit []string
	switch k := pub.(type) {
	case *rsa.PublicKey:
		fit = config.RSAAlgorithms
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256():
			fit = []string{"ES256"}
		case elliptic.P384():
			fit = []string{"ES384"}
		case elliptic.P521():
			fit = []string{"ES512"}
		}
	case ed25519.PublicKey:
		fit = config.EdDSAAlgorithms
	}
	var out []string
	for _, a := range algs {
		if slices.Contains(fit, a) {
			out = append(out, a)
		}
	}
	return out
}

// checkAlgorithms reports a static key that cannot verify every algorithm
// configured for it, or an RSA key too short to trust.
func checkAlgorithms(pub any, algs []string) error {
	if k, ok := pub.(*rsa.PublicKey); ok && k.N.BitLen() < MinRSABits {
		return fmt.Errorf("RSA key of %d bits; at least %d are needed", k.N.BitLen(), MinRSABits)
	}
	fit := compatible(pub, algs)
	for _, a := range algs {
		if !slices.Contains(fit, a) {
			return fmt.Errorf("a %s cannot verify %s", keyKind(pub), a)
		}
	}
	return nil
}

// keyKind names a public key's type for messages.
func keyKind(pub any) string {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		return fmt.Sprintf("%d-bit RSA key", k.N.BitLen())
	case *ecdsa.PublicKey:
		return "ECDSA " + k.Curve.Params().Name + " key"
	case ed25519.PublicKey:
		return "Ed25519 key"
	}
	return fmt.Sprintf("%T", pub)
}
