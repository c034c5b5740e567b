package config

import (
	"reflect"
	"slices"
	"time"
)

// Identity says who a request counts as: the bearer token string
// (opaque tokens, the default) or the account of a JWT access token
// verified at the edge. docs/identity.md describes both.
type Identity struct {
	// Verify turns on verification of JWT access tokens at the edge: a
	// token that does not verify is answered 401 token_not_valid before
	// any limit or the backend, and limits with key "account" and
	// duplicate protection count per verified account. Default false
	// (tokens are opaque: counted per token string, with the token-spray
	// guard).
	Verify bool `yaml:"verify"`
	// JWT configures the verification.
	JWT JWT `yaml:"jwt"`
	// UsersFile is the path of a YAML file mapping user ids (as the user
	// claim carries them) to tier names, reloaded on SIGHUP; relative to
	// the configuration file. Default "" (tiers only from the tier claim).
	UsersFile string `yaml:"users_file" reload:"live"`
}

// JWT configures how access tokens are verified. The defaults verify
// what djangorestframework-simplejwt issues: HS256 with a shared secret,
// the account in "user_id", "token_type": "access".
type JWT struct {
	// Keys are the static verification keys. Each allows its algorithms
	// explicitly. Default: one HS256 key whose secret is in
	// EXGATE_JWT_SECRET.
	Keys []JWTKey `yaml:"keys"`
	// JWKSFile is the path of a JWKS document (RFC 7517) holding public
	// keys, read at start; relative to the configuration file.
	// Default "".
	JWKSFile string `yaml:"jwks_file"`
	// JWKSURL is the address of a JWKS document, fetched at start, every
	// JWKSRefresh and when a token names an unknown key id. Default "".
	JWKSURL URL `yaml:"jwks_url"`
	// JWKSAlgorithms are the algorithms allowed with keys of the JWKS (each
	// key further restricted to its own type and "alg"). Required with a
	// JWKS. Default: none.
	JWKSAlgorithms []string `yaml:"jwks_algorithms"`
	// JWKSRefresh is how often the JWKS URL is fetched again. Default 5m.
	JWKSRefresh time.Duration `yaml:"jwks_refresh"`
	// JWKSMinInterval is the least time between two fetches, so that a
	// flood of unknown key ids cannot storm the issuer. Default 30s.
	JWKSMinInterval time.Duration `yaml:"jwks_min_interval"`
	// JWKSTimeout bounds one fetch. Default 5s.
	JWKSTimeout time.Duration `yaml:"jwks_timeout"`
	// Leeway is the clock skew allowed on exp, nbf and iat. Default 30s.
	Leeway time.Duration `yaml:"leeway"`
	// Issuer, when set, is the iss every token must carry. Default "".
	Issuer string `yaml:"issuer"`
	// Audience, when set, must be among the aud of every token.
	// Default "".
	Audience string `yaml:"audience"`
	// UserClaim names the claim holding the account (a number or a
	// string). Default "user_id".
	UserClaim string `yaml:"user_claim"`
	// UserClaimType says how the backend keys its users, so that exgate
	// reads a string user claim as the backend does: "string" (user
	// names, UUIDs: a string is its own account) or "integer" (Django's
	// default integer primary key: a string is read as Python's int()
	// reads it, "01" and "+1" being the account 1, and one it cannot
	// read is refused). A number claim is the account of its decimal
	// either way. Default "string".
	UserClaimType string `yaml:"user_claim_type"`
	// TokenTypeClaim names the claim holding the token's type.
	// Default "token_type".
	TokenTypeClaim string `yaml:"token_type_claim"`
	// TokenType is the type an access token must have, so that a refresh
	// token is refused; "" does not check. Default "access".
	TokenType string `yaml:"token_type"`
	// TierClaim names a claim holding the account's tier; "" reads no
	// tier from tokens. Default "".
	TierClaim string `yaml:"tier_claim"`
	// CacheSize bounds the cache of verified tokens (each kept until it
	// expires). Default 100000.
	CacheSize int `yaml:"cache_size"`
	// RefusedCacheSize bounds the cache of refused tokens: a token
	// refused for a reason the same token cannot outgrow (a bad
	// signature, an algorithm or key id no key allows, an expired or
	// malformed token) is answered from it, without its signature being
	// checked again, for at most a minute (docs/identity.md). Default
	// 10000.
	RefusedCacheSize int `yaml:"refused_cache_size"`
}

// JWTKey is one static verification key: an HMAC secret from the
// environment or a PEM public key from a file, never both.
type JWTKey struct {
	// ID is the key id ("kid") tokens name it by; "" matches tokens that
	// name none. Default "".
	ID string `yaml:"kid"`
	// Algorithms are the algorithms this key verifies: HS256/384/512 for a
	// secret; RS256/384/512 or PS256/384/512 for an RSA key; ES256, ES384
	// or ES512 for an ECDSA key of the matching curve; EdDSA for an
	// Ed25519 key. Required.
	Algorithms []string `yaml:"algorithms"`
	// SecretEnv names the environment variable holding an HMAC secret
	// (at least 16 bytes). Default "".
	SecretEnv string `yaml:"secret_env"`
	// PublicKeyFile is the path of a PEM public key (PKIX "PUBLIC KEY",
	// "RSA PUBLIC KEY" or a certificate); relative to the configuration
	// file. Default "".
	PublicKeyFile string `yaml:"public_key_file"`
}

// JWT algorithm families.
var (
	HMACAlgorithms  = []string{"HS256", "HS384", "HS512"}
	RSAAlgorithms   = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}
	ECAlgorithms    = []string{"ES256", "ES384", "ES512"}
	EdDSAAlgorithms = []string{"EdDSA"}
)

// DefaultJWTSecretEnv is the variable the default key's secret is read
// from.
const DefaultJWTSecretEnv = "EXGATE_JWT_SECRET"

// DefaultIdentity returns the identity defaults: opaque tokens; when
// verification is turned on, SimpleJWT's HS256 access tokens.
func DefaultIdentity() Identity {
	return Identity{JWT: JWT{
		Keys:             []JWTKey{{Algorithms: []string{"HS256"}, SecretEnv: DefaultJWTSecretEnv}},
		JWKSRefresh:      5 * time.Minute,
		JWKSMinInterval:  30 * time.Second,
		JWKSTimeout:      5 * time.Second,
		Leeway:           30 * time.Second,
		UserClaim:        "user_id",
		UserClaimType:    UserClaimString,
		TokenTypeClaim:   "token_type",
		TokenType:        "access",
		CacheSize:        100000,
		RefusedCacheSize: 10000,
	}}
}

// Values of identity.jwt.user_claim_type.
const (
	UserClaimString  = "string"
	UserClaimInteger = "integer"
)

// countAccounts, with verification on and the built-in route table, makes
// the spec's per-token limits count per account: the built-in table is
// the spec's, and with verified tokens the spec's "token" is the account
// behind it. A route table given in the file is taken as written.
func (c *Config) countAccounts() {
	if !c.Identity.Verify || !reflect.DeepEqual(c.Routes, Default().Routes) {
		return
	}
	for i := range c.Routes {
		for j := range c.Routes[i].Limits {
			if l := &c.Routes[i].Limits[j]; l.Key == KeyToken {
				l.Key = KeyAccount
				if l.Name == KeyToken {
					l.Name = KeyAccount
				}
			}
		}
	}
}

// check reports problems in the identity section at p; how tokens_file
// and the routes' limits fit verification is checked across sections.
func (id *Identity) check(col *collector, p path) {
	j, jp := id.JWT, p.key("jwt")
	if id.Verify {
		if len(j.Keys) == 0 && j.JWKSFile == "" && j.JWKSURL.URL == nil {
			col.addf(jp.key("keys"), "%s needs a key: keys, jwks_file or jwks_url", p.key("verify"))
		}
		if j.UserClaim == "" {
			col.addf(jp.key("user_claim"), "required, such as \"user_id\"")
		}
		if j.TokenType != "" && j.TokenTypeClaim == "" {
			col.addf(jp.key("token_type_claim"), "required with %s, such as \"token_type\"", jp.key("token_type"))
		}
	}
	col.oneOf(jp.key("user_claim_type"), j.UserClaimType, UserClaimString, UserClaimInteger)
	j.check(col, jp)
}

// check reports problems in the JWT settings at p.
func (j *JWT) check(col *collector, p path) {
	public := slices.Concat(RSAAlgorithms, ECAlgorithms, EdDSAAlgorithms)
	for i, k := range j.Keys {
		kp := p.key("keys").index(i)
		switch {
		case k.SecretEnv == "" && k.PublicKeyFile == "":
			col.addf(kp, "give secret_env (an HMAC secret) or public_key_file (a PEM public key)")
		case k.SecretEnv != "" && k.PublicKeyFile != "":
			col.addf(kp, "give secret_env or public_key_file, not both")
		case k.SecretEnv != "":
			col.envName(kp.key("secret_env"), k.SecretEnv)
			checkAlgorithms(col, kp.key("algorithms"), k.Algorithms, HMACAlgorithms)
		default:
			checkAlgorithms(col, kp.key("algorithms"), k.Algorithms, public)
		}
	}
	if j.JWKSFile != "" || j.JWKSURL.URL != nil {
		checkAlgorithms(col, p.key("jwks_algorithms"), j.JWKSAlgorithms, public)
	}
	col.positive(p.key("jwks_refresh"), j.JWKSRefresh)
	col.positive(p.key("jwks_min_interval"), j.JWKSMinInterval)
	col.positive(p.key("jwks_timeout"), j.JWKSTimeout)
	if j.JWKSMinInterval > j.JWKSRefresh {
		col.addf(p.key("jwks_min_interval"), "must not exceed %s (%s), got %s", p.key("jwks_refresh"), j.JWKSRefresh, j.JWKSMinInterval)
	}
	if j.Leeway < 0 || j.Leeway > 5*time.Minute {
		col.addf(p.key("leeway"), "must be from 0 to 5m, got %s", j.Leeway)
	}
	if j.CacheSize < 0 {
		col.addf(p.key("cache_size"), "must not be negative (0 turns the cache off), got %d", j.CacheSize)
	}
	if j.RefusedCacheSize < 0 {
		col.addf(p.key("refused_cache_size"), "must not be negative (0 turns the cache off), got %d", j.RefusedCacheSize)
	}
}

// checkAlgorithms checks a list of JWT algorithms against the allowed
// family.
func checkAlgorithms(col *collector, p path, algs, allowed []string) {
	if len(algs) == 0 {
		col.addf(p, "required: list the algorithms explicitly, such as [%s]", allowed[0])
		return
	}
	for i, a := range algs {
		if !slices.Contains(allowed, a) {
			col.oneOf(p.index(i), a, allowed...)
		}
	}
}
