package sim

import (
	"crypto"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/go-jose/go-jose/v4"
)

// jwksPath is where a Server signing with RS256 publishes its verifying
// key, as identity providers do.
const jwksPath = "/.well-known/jwks.json"

// rsaSigner is the RS256 key a Server signs tokens with
// (Options.SigningKey): its key id, the RFC 7638 thumbprint of its public
// key, and the JWKS of that public key.
type rsaSigner struct {
	key  *rsa.PrivateKey
	kid  string
	jwks []byte
}

// newRSASigner returns the signer of key.
func newRSASigner(key *rsa.PrivateKey) (*rsaSigner, error) {
	pub := jose.JSONWebKey{Key: &key.PublicKey, Algorithm: "RS256", Use: "sig"}
	tp, err := pub.Thumbprint(crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("sim: signing key: %w", err)
	}
	pub.KeyID = base64.RawURLEncoding.EncodeToString(tp)
	jwks, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{pub}})
	if err != nil {
		return nil, fmt.Errorf("sim: signing key: %w", err)
	}
	return &rsaSigner{key: key, kid: pub.KeyID, jwks: jwks}, nil
}

// JWKS returns the JSON Web Key Set (RFC 7517) of the key the server's
// tokens verify with, as GET /.well-known/jwks.json serves it: the public
// key of Options.SigningKey, for RS256, with its thumbprint as kid. With
// HS256 (no signing key) there is no public key to give, and it returns
// nil.
func (s *Server) JWKS() []byte {
	if s.rsa == nil {
		return nil
	}
	return s.rsa.jwks
}

// handleJWKS serves GET /.well-known/jwks.json: the verifying key, or 404
// when the server signs with a shared HS256 secret.
func (s *Server) handleJWKS(w http.ResponseWriter, _ *http.Request, _ string) {
	if s.rsa == nil {
		writeNotFound(w)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "max-age=300")
	_, _ = w.Write(s.rsa.jwks)
}
