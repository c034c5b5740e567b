package identity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-jose/go-jose/v4"
	"go.uber.org/zap"
)

// parseJWKS reads a JWKS document (RFC 7517) with go-jose: the public
// signature keys it holds, each allowed the algorithms of allowed that its
// type (and its own "alg", when given) permit. Symmetric keys, keys with
// private parts, encryption keys, RSA keys under MinRSABits and keys of
// unknown types are skipped and counted: a JWKS is public, and HMAC
// secrets come only from the environment.
func parseJWKS(data []byte, allowed []string) (keys []*key, skipped int, err error) {
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, 0, fmt.Errorf("not a JWKS document: %v", err)
	}
	for _, raw := range doc.Keys {
		var private struct {
			D, P, Q, K *json.RawMessage
		}
		if json.Unmarshal(raw, &private) != nil || private.D != nil || private.P != nil || private.Q != nil || private.K != nil {
			skipped++
			continue
		}
		var jwk jose.JSONWebKey
		if err := jwk.UnmarshalJSON(raw); err != nil || !jwk.IsPublic() || (jwk.Use != "" && jwk.Use != "sig") {
			skipped++
			continue
		}
		algs := compatible(jwk.Key, allowed)
		if jwk.Algorithm != "" {
			algs = compatible(jwk.Key, []string{jwk.Algorithm})
			if len(algs) == 1 && !slices.Contains(allowed, algs[0]) {
				algs = nil
			}
		}
		if len(algs) == 0 || checkAlgorithms(jwk.Key, algs) != nil {
			skipped++
			continue
		}
		keys = append(keys, &key{kid: jwk.KeyID, algs: algs, material: jwk.Key})
	}
	return keys, skipped, nil
}

// remoteJWKS is a JWKS document fetched from a URL: at start, every
// refresh, and when a token names a key id it does not hold, but never
// twice within minInterval. A failed fetch keeps the last good set.
type remoteJWKS struct {
	url         string
	client      *http.Client
	allowed     []string
	refresh     time.Duration
	minInterval time.Duration
	now         func() time.Time
	log         *zap.Logger
	onFetch     func(ok bool)

	set       atomic.Pointer[keySet]
	gen       atomic.Uint64 // counts the sets stored, each after it is stored
	mu        sync.Mutex    // serialises fetches
	lastFetch time.Time     // guarded by mu
	fetchedAt atomic.Int64  // lastFetch in unix ns, read without mu
	failing   atomic.Bool
}

// maxJWKSBytes bounds a JWKS response.
const maxJWKSBytes = 1 << 20

// keys returns the current key set (empty before the first good fetch).
func (r *remoteJWKS) keys() *keySet {
	if s := r.set.Load(); s != nil {
		return s
	}
	return emptyKeySet
}

var emptyKeySet = newKeySet(nil)

// fetchIfDue fetches the document unless a fetch started within
// minInterval. Callers that arrive during a fetch wait for it and then
// use its result. It reports whether it fetched.
func (r *remoteJWKS) fetchIfDue(ctx context.Context) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if !r.lastFetch.IsZero() && now.Sub(r.lastFetch) < r.minInterval {
		return false
	}
	r.lastFetch = now
	r.fetchedAt.Store(now.UnixNano())
	err := r.fetch(ctx)
	r.failing.Store(err != nil)
	if r.onFetch != nil {
		r.onFetch(err == nil)
	}
	if err != nil {
		r.log.Warn("JWKS fetch failed; keeping the last good key set", zap.String("url", r.url), zap.Error(err))
	}
	return true
}

func (r *remoteJWKS) fetch(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	res, err := r.client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", res.StatusCode)
	}
	data, err := io.ReadAll(io.LimitReader(res.Body, maxJWKSBytes+1))
	if err != nil {
		return err
	}
	if len(data) > maxJWKSBytes {
		return fmt.Errorf("larger than %d bytes", maxJWKSBytes)
	}
	keys, skipped, err := parseJWKS(data, r.allowed)
	if err != nil {
		return err
	}
	if len(keys) == 0 {
		return fmt.Errorf("no usable key (%d skipped)", skipped)
	}
	r.set.Store(newKeySet(keys))
	r.gen.Add(1) // after the store: a reader of this generation sees this set
	return nil
}

// generation counts the key sets fetched: a refusal decided under one
// generation may not hold under the next.
func (r *remoteJWKS) generation() uint64 { return r.gen.Load() }

// fetchDue reports whether a token naming an unknown key id at now (unix
// ns) would make the set be fetched again.
func (r *remoteJWKS) fetchDue(now int64) bool {
	at := r.fetchedAt.Load()
	return at == 0 || now-at >= int64(r.minInterval)
}

// run refreshes the set every refresh (every minInterval while fetches
// fail) until ctx ends.
func (r *remoteJWKS) run(ctx context.Context) {
	for {
		wait := r.refresh
		if r.failing.Load() {
			wait = r.minInterval
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		r.fetchIfDue(ctx)
	}
}

// errNoKeys is what a JWKS file without a usable key gives.
var errNoKeys = errors.New("no usable key")
