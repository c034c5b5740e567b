package limiter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/ratelimit"
)

// Store is the started rate-limit store that configuration selects, and
// the Enforcer applying the rules with it, built by Open.
type Store struct {
	// Enforcer applies Rules with this store.
	Enforcer *Enforcer
	// Kind is config.StoreRedis or config.StoreMemory.
	Kind string
	// Client is the Redis client, or nil for the memory store.
	Client redis.UniversalClient
	// Redis is the Redis store, or nil for the memory store.
	Redis *ratelimit.Redis
	// Memory is the memory store, or nil for the Redis store.
	Memory *ratelimit.Memory
	// Deny is the deny cache in front of Redis, or nil.
	Deny *ratelimit.DenyCache
}

// OpenOptions are the dependencies of Open.
type OpenOptions struct {
	// Getenv reads the key secret and the Redis password. Nil means an
	// empty environment.
	Getenv func(string) (string, bool)
	// Logger receives warnings. Nil means none.
	Logger *zap.Logger
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
	// Observe is passed to the Redis store (ratelimit.RedisOptions.Observe).
	Observe func(d time.Duration, n int, err error)
	// SharedKeys says token ids are shared with other replicas beyond the
	// limits (duplicate protection in Redis keys orders by them), so the
	// key secret is required whatever the limit store.
	SharedKeys bool
	// ClaimFunc is passed to the Redis store
	// (ratelimit.RedisOptions.ClaimFunc): duplicate protection's claim,
	// when it shares the limiter's client, so that an order's claim rides
	// in the round trip of its limits.
	ClaimFunc string
}

// StoreKind returns the limit store cfg selects (config.StoreRedis or
// config.StoreMemory): its limiter.store, or redis when that is empty
// and Redis addresses are set, else memory.
func StoreKind(cfg *config.Config) string { return cfg.LimiterStore() }

// Open builds the limit store that cfg selects and its Enforcer. The
// Redis store requires the key secret (every replica must derive the
// same keys); the memory store makes a random one when it is not set.
// Open does not wait for Redis: a store that is down is a store failure,
// handled per route by on_store_error, and Ping tells readiness.
func Open(cfg *config.Config, o OpenOptions) (*Store, error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = func(string) (string, bool) { return "", false }
	}
	log := o.Logger
	if log == nil {
		log = zap.NewNop()
	}
	lc := cfg.Limiter
	b := &Store{Kind: StoreKind(cfg)}

	secret, _ := getenv(lc.KeySecretEnv)
	switch {
	case secret != "" && len(secret) < MinSecretLen:
		return nil, fmt.Errorf("limiter.key_secret_env: %s must hold at least %d bytes", lc.KeySecretEnv, MinSecretLen)
	case secret == "" && b.Kind != config.StoreRedis && o.SharedKeys:
		return nil, fmt.Errorf("limiter.key_secret_env: %s is not set; replicas sharing duplicate protection through Redis key orders by token id and must all use the same secret (at least %d bytes)", lc.KeySecretEnv, MinSecretLen)
	case secret == "" && b.Kind == config.StoreRedis:
		return nil, fmt.Errorf("limiter.key_secret_env: %s is not set; replicas sharing limits through Redis must all use the same secret (at least %d bytes)", lc.KeySecretEnv, MinSecretLen)
	}
	key := []byte(secret)
	if secret == "" {
		key = RandomSecret()
		log.Warn("key secret not set: token ids are random per process (fine for one memory-backed instance)",
			zap.String("variable", lc.KeySecretEnv))
	}
	keyer, err := NewKeyer(key)
	if err != nil {
		return nil, err
	}

	eo := EnforcerOptions{Keyer: keyer, Logger: log, Now: o.Now, LocalMaxKeys: lc.MaxKeys}
	switch b.Kind {
	case config.StoreRedis:
		password, _ := getenv(lc.Redis.PasswordEnv)
		b.Client, err = NewRedisClient(lc.Redis, password)
		if err != nil {
			return nil, err
		}
		b.Redis = ratelimit.NewRedis(b.Client, ratelimit.RedisOptions{Timeout: lc.Redis.Timeout, Observe: o.Observe, Now: o.Now, ClaimFunc: o.ClaimFunc})
		eo.Store = b.Redis
		if lc.DenyCacheKeys > 0 {
			b.Deny = ratelimit.NewDenyCache(b.Redis, lc.DenyCacheKeys, o.Now)
			eo.Store = b.Deny
		}
	default:
		b.Memory = ratelimit.NewMemory(ratelimit.MemoryOptions{Now: o.Now, MaxKeys: lc.MaxKeys})
		eo.Store = b.Memory
		eo.Local = b.Memory
	}
	b.Enforcer, err = NewEnforcer(eo)
	if err != nil {
		_ = b.Close()
		return nil, err
	}
	return b, nil
}

// Ping reports whether the store answers; the memory store always does.
func (b *Store) Ping(ctx context.Context) error {
	if b.Client == nil {
		return nil
	}
	return b.Client.Ping(ctx).Err()
}

// Close stops the Redis store and closes the client.
func (b *Store) Close() error {
	var errs []error
	if b.Redis != nil {
		errs = append(errs, b.Redis.Close())
	}
	if b.Client != nil {
		errs = append(errs, b.Client.Close())
	}
	return errors.Join(errs...)
}
