package identity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
)

// Identity is the verified account behind a token.
type Identity struct {
	// User is the user claim as the token carries it (a whole number in
	// decimal, or a string). It names the account in the users file; it
	// is never logged or used as a label.
	User string
	// Account is the account's key: an HMAC of User under the key secret
	// (see Options.AccountKey). Limits, duplicate protection and logs use
	// it instead of User.
	Account string
	// Tier is the tier the tier claim names, or "".
	Tier string
}

// Reason is why a token was refused, as the auth failure metric labels
// it. It never names a user or holds any part of a token.
type Reason string

// Reasons a token is refused.
const (
	ReasonMalformed     Reason = "malformed"     // not a JWT, bad JSON, a claim of the wrong type
	ReasonNoncanonical  Reason = "noncanonical"  // a JWT not in canonical base64url
	ReasonAlgorithm     Reason = "bad_algorithm" // an algorithm no key allows (none included)
	ReasonUnknownKey    Reason = "unknown_key"   // a kid no key set holds
	ReasonSignature     Reason = "bad_signature" // the signature does not verify
	ReasonExpired       Reason = "expired"       // exp passed, beyond the leeway
	ReasonNotYetValid   Reason = "not_yet_valid" // nbf ahead, beyond the leeway
	ReasonIssuedFuture  Reason = "issued_in_future"
	ReasonMissingClaim  Reason = "missing_claim" // no exp, or no user claim
	ReasonWrongType     Reason = "wrong_type"    // token_type is not access (a refresh token)
	ReasonWrongIssuer   Reason = "wrong_issuer"
	ReasonWrongAudience Reason = "wrong_audience"
)

// Reasons lists every Reason, for metrics that resolve their children
// once.
var Reasons = []Reason{ReasonMalformed, ReasonNoncanonical, ReasonAlgorithm, ReasonUnknownKey, ReasonSignature,
	ReasonExpired, ReasonNotYetValid, ReasonIssuedFuture, ReasonMissingClaim, ReasonWrongType, ReasonWrongIssuer,
	ReasonWrongAudience}

// Options are what a Verifier needs besides its configuration.
type Options struct {
	// Getenv reads the HMAC secrets. Nil means an empty environment.
	Getenv func(string) (string, bool)
	// AccountKey turns a user claim into the account's key (an HMAC under
	// the key secret, so that a user id never reaches Redis or logs).
	// Required.
	AccountKey func(user string) string
	// Client fetches the JWKS URL. Nil means a client with the configured
	// timeout and no proxy.
	Client *http.Client
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
	// Logger receives JWKS fetch failures. Nil means none.
	Logger *zap.Logger
	// OnFetch is told the outcome of every JWKS fetch. Nil means nothing.
	OnFetch func(ok bool)
	// OnCachedRefusal is told the reason of every refusal answered from
	// the cache of refused tokens. Nil means nothing.
	OnCachedRefusal func(Reason)
}

// Verifier verifies JWT access tokens with golang-jwt/jwt/v5 against
// explicitly configured keys and algorithms, and caches what it verified.
// It is safe for concurrent use.
type Verifier struct {
	cfg        config.JWT
	static     *keySet
	remote     *remoteJWKS // nil without a JWKS URL
	parser     *jwt.Parser
	methods    []string      // every algorithm some key allows
	cache      *cache        // nil when cache_size is 0
	refused    *refusedCache // nil when refused_cache_size is 0
	accountKey func(string) string
	onRefused  func(Reason) // Options.OnCachedRefusal
	now        func() time.Time
	leeway     int64
}

// New builds a Verifier: it reads the static keys and the JWKS file
// (paths already resolved), and fetches the JWKS URL once (a failure is
// logged; tokens fail as unknown_key until a fetch succeeds). Run keeps
// the JWKS URL fresh.
func New(cfg config.JWT, o Options) (*Verifier, error) {
	if o.AccountKey == nil {
		return nil, errors.New("identity: a Verifier needs an AccountKey function")
	}
	if o.Getenv == nil {
		o.Getenv = func(string) (string, bool) { return "", false }
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	keys, err := StaticKeys(cfg.Keys, o.Getenv)
	if err != nil {
		return nil, err
	}
	if cfg.JWKSFile != "" {
		fk, err := ReadJWKSFile(cfg.JWKSFile, cfg.JWKSAlgorithms)
		if err != nil {
			return nil, err
		}
		keys = append(keys, fk...)
	}
	algs := map[string]bool{}
	for _, k := range keys {
		for _, a := range k.algs {
			algs[a] = true
		}
	}
	if cfg.JWKSURL.URL != nil {
		for _, a := range cfg.JWKSAlgorithms {
			algs[a] = true
		}
	}
	methods := make([]string, 0, len(algs))
	for a := range algs {
		methods = append(methods, a)
	}
	slices.Sort(methods)
	popts := []jwt.ParserOption{
		jwt.WithValidMethods(methods), // never "none": no configured key allows it
		jwt.WithStrictDecoding(),
		jwt.WithJSONNumber(),
		jwt.WithLeeway(cfg.Leeway),
		jwt.WithTimeFunc(o.Now),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
	}
	if cfg.Issuer != "" {
		popts = append(popts, jwt.WithIssuer(cfg.Issuer))
	}
	if cfg.Audience != "" {
		popts = append(popts, jwt.WithAudience(cfg.Audience))
	}
	v := &Verifier{
		cfg: cfg, static: newKeySet(keys), parser: jwt.NewParser(popts...), methods: methods,
		accountKey: o.AccountKey, now: o.Now, leeway: int64(cfg.Leeway), onRefused: o.OnCachedRefusal,
	}
	if cfg.CacheSize > 0 {
		v.cache = newCache(cfg.CacheSize)
	}
	if cfg.RefusedCacheSize > 0 {
		v.refused = newRefusedCache(cfg.RefusedCacheSize)
	}
	if cfg.JWKSURL.URL != nil {
		client := o.Client
		if client == nil {
			client = &http.Client{Timeout: cfg.JWKSTimeout, Transport: &http.Transport{Proxy: nil}}
		}
		v.remote = &remoteJWKS{
			url: cfg.JWKSURL.String(), client: client, allowed: cfg.JWKSAlgorithms,
			refresh: cfg.JWKSRefresh, minInterval: cfg.JWKSMinInterval,
			now: o.Now, log: o.Logger.Named("jwks"), onFetch: o.OnFetch,
		}
		ctx, cancel := context.WithTimeout(context.Background(), cfg.JWKSTimeout)
		v.remote.fetchIfDue(ctx)
		cancel()
	}
	return v, nil
}

// ReadJWKSFile reads the keys of a JWKS file, allowed the algorithms of
// algs their types permit.
func ReadJWKSFile(path string, algs []string) ([]*key, error) {
	data, err := readSmallFile(path)
	if err != nil {
		return nil, fmt.Errorf("identity.jwt.jwks_file: %w", err)
	}
	keys, skipped, err := parseJWKS(data, algs)
	if err == nil && len(keys) == 0 {
		err = fmt.Errorf("%w (%d keys skipped: symmetric, private, for encryption, too short, or not allowed by jwks_algorithms)", errNoKeys, skipped)
	}
	if err != nil {
		return nil, fmt.Errorf("identity.jwt.jwks_file: %s: %w", path, err)
	}
	return keys, nil
}

// Run refreshes the JWKS URL until ctx ends. Without a JWKS URL it
// returns at once.
func (v *Verifier) Run(ctx context.Context) {
	if v.remote != nil {
		v.remote.run(ctx)
	}
}

// Verify returns the identity behind token, or why it is refused. Only
// the canonical spelling of a JWT (CanonicalJWS) verifies. A token
// verified before is answered from the cache until it expires; one
// refused before, from the cache of refusals while its refusal holds
// (refused.go).
func (v *Verifier) Verify(token string) (Identity, Reason) {
	now := v.now().UnixNano()
	if v.cache != nil {
		if id, ok := v.cache.get(token, now); ok {
			return id, ""
		}
	}
	if !IsJWS(token) {
		return Identity{}, ReasonMalformed // not a JWT at all
	}
	if !CanonicalJWS(token) {
		return Identity{}, ReasonNoncanonical
	}
	keys := v.keyGeneration()
	if r, ok := v.refusedBefore(token, keys, now); ok {
		return Identity{}, r
	}
	id, reason, claims := v.verify(token)
	if reason != "" {
		v.rememberRefusal(token, reason, claims, keys, now)
		return Identity{}, reason
	}
	if v.cache != nil {
		exp, _ := claims.GetExpirationTime() // required and checked by the parser
		until := exp.UnixNano() + v.leeway
		if until > now {
			v.cache.put(token, id, until, now)
		}
	}
	return id, ""
}

// verify checks token's signature and claims and returns its identity, or
// why it is refused, with the claims as far as they were read.
func (v *Verifier) verify(token string) (Identity, Reason, jwt.MapClaims) {
	claims := jwt.MapClaims{}
	t, err := v.parser.ParseWithClaims(token, claims, v.keyfunc)
	if err != nil {
		if t != nil && t.Method != nil && !slices.Contains(v.methods, t.Method.Alg()) {
			return Identity{}, ReasonAlgorithm, claims // none, or an algorithm no key allows
		}
		return Identity{}, reasonOf(err), claims
	}
	if v.cfg.TokenType != "" {
		if t, _ := claims[v.cfg.TokenTypeClaim].(string); t != v.cfg.TokenType {
			return Identity{}, ReasonWrongType, claims
		}
	}
	id := Identity{}
	switch u := claims[v.cfg.UserClaim].(type) {
	case nil:
		return Identity{}, ReasonMissingClaim, claims
	case string:
		if v.cfg.UserClaimType != config.UserClaimInteger {
			id.User = u
			break
		}
		n, ok := integerUser(u)
		if !ok {
			return Identity{}, ReasonMalformed, claims // no integer key: the backend finds no such user
		}
		id.User = n
	case json.Number:
		n, err := strconv.ParseInt(string(u), 10, 64)
		if err != nil {
			return Identity{}, ReasonMalformed, claims // 7.0, 1e3: not one spelling of an account
		}
		id.User = strconv.FormatInt(n, 10)
	default:
		return Identity{}, ReasonMalformed, claims
	}
	if id.User == "" || len(id.User) > 256 {
		return Identity{}, ReasonMalformed, claims
	}
	if v.cfg.TierClaim != "" {
		id.Tier, _ = claims[v.cfg.TierClaim].(string)
	}
	id.Account = v.accountKey(id.User)
	return id, "", claims
}

// Key errors, told apart in reasonOf.
var (
	errUnknownKey = errors.New("no key with this kid")
	errAlgorithm  = errors.New("no key allows this algorithm")
	errKID        = errors.New("kid is not a string")
)

// keyfunc picks the keys for a token: those with its kid (static keys
// first, then the JWKS, fetched again when it lacks the kid), or without
// a kid those without one (or the only key there is), then only those
// that allow the token's algorithm.
func (v *Verifier) keyfunc(t *jwt.Token) (any, error) {
	kid := ""
	if k, ok := t.Header["kid"]; ok {
		s, ok := k.(string)
		if !ok {
			return nil, errKID
		}
		kid = s
	}
	cands := v.candidates(kid)
	if len(cands) == 0 && kid != "" && v.remote != nil && v.remote.fetchIfDue(context.Background()) {
		cands = v.candidates(kid)
	}
	if len(cands) == 0 {
		return nil, errUnknownKey
	}
	alg := t.Method.Alg()
	var set []jwt.VerificationKey
	for _, k := range cands {
		if k.allows(alg) {
			set = append(set, k.material)
		}
	}
	switch len(set) {
	case 0:
		return nil, errAlgorithm
	case 1:
		return set[0], nil
	}
	return jwt.VerificationKeySet{Keys: set}, nil
}

func (v *Verifier) candidates(kid string) []*key {
	remote := emptyKeySet
	if v.remote != nil {
		remote = v.remote.keys()
	}
	c := append(v.static.byKID[kid][:len(v.static.byKID[kid]):len(v.static.byKID[kid])], remote.byKID[kid]...)
	if len(c) == 0 && kid == "" && v.static.n+remote.n == 1 {
		for _, ks := range v.static.byKID {
			c = ks
		}
		for _, ks := range remote.byKID {
			c = ks
		}
	}
	return c
}

// reasonOf classifies a golang-jwt error.
func reasonOf(err error) Reason {
	switch {
	case errors.Is(err, errUnknownKey):
		return ReasonUnknownKey
	case errors.Is(err, errAlgorithm):
		return ReasonAlgorithm
	case errors.Is(err, errKID), errors.Is(err, jwt.ErrTokenMalformed), errors.Is(err, jwt.ErrInvalidType):
		return ReasonMalformed
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return ReasonSignature
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return ReasonAlgorithm // an algorithm golang-jwt does not know
	case errors.Is(err, jwt.ErrTokenExpired):
		return ReasonExpired
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return ReasonNotYetValid
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return ReasonIssuedFuture
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return ReasonWrongIssuer
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return ReasonWrongAudience
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return ReasonMissingClaim
	}
	return ReasonMalformed
}
