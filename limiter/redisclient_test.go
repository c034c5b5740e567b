package limiter

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/idempotency"
	"github.com/exgate/exgate/internal/redistest"
	"github.com/exgate/exgate/internal/tlstest"
	"github.com/exgate/exgate/ratelimit"
)

// TestRedisModesFromConfig: the client the configuration selects works as
// the store in each mode: standalone, Sentinel (master_name) and Cluster
// (several addresses).
func TestRedisModesFromConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	master := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, master, "exgate-master")
	cluster := redistest.StartCluster(t, 3)
	cases := []struct {
		name string
		rc   config.Redis
	}{
		{"standalone", config.Redis{Addrs: []string{master.Addr}}},
		{"sentinel", config.Redis{Addrs: []string{sentinel.Addr}, MasterName: "exgate-master"}},
		{"cluster", config.Redis{Addrs: cluster.Addrs}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.rc.Timeout = time.Second
			decideTwoOfThree(t, tc.rc, "modes:"+tc.name)
		})
	}
	// The Sentinel client really talks to the master it was told about.
	if n, _ := master.Do("EXISTS", "rate:modes:sentinel"); n.(int64) != 1 {
		t.Error("the sentinel-mode key is not on the master")
	}
}

// decideTwoOfThree builds the client rc selects and checks that it decides
// three requests on key under a burst of 2 as [true true false].
func decideTwoOfThree(t *testing.T, rc config.Redis, key string) {
	t.Helper()
	c, err := NewRedisClient(rc, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := ratelimit.NewRedis(c, ratelimit.RedisOptions{Timeout: testStoreTimeout})
	defer r.Close()
	l := ratelimit.Limit{Rate: 2, Period: time.Hour, Burst: 2}
	var got []bool
	for i := 0; i < 3; i++ {
		res, err := r.Allow(context.Background(), key, l)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, res.Allowed)
	}
	if fmt.Sprint(got) != "[true true false]" {
		t.Errorf("decisions %v, want [true true false]", got)
	}
}

// testPKI is a certificate authority with a server certificate for
// 127.0.0.1 and a client certificate, as PEM files in a directory, and the
// certificate of another CA.
type testPKI struct {
	ca, serverCert, serverKey, clientCert, clientKey, otherCA string
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir, otherDir := t.TempDir(), t.TempDir()
	ca := tlstest.NewCA(t, dir)
	srv := ca.Issue(dir, "server", []string{"127.0.0.1"}, tlstest.Options{})
	cli := ca.Issue(dir, "client", []string{"exgate"}, tlstest.Options{Client: true})
	return testPKI{
		ca:         ca.File,
		otherCA:    tlstest.NewCA(t, otherDir).File,
		serverCert: srv.CertFile,
		serverKey:  srv.KeyFile,
		clientCert: cli.CertFile,
		clientKey:  cli.KeyFile,
	}
}

// TestRedisTLS runs the Redis limiter against a real redis-server that
// speaks only TLS on its TLS port and asks for client certificates (its
// default), with the client NewRedisClient builds from the configuration.
func TestRedisTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	pki := newTestPKI(t)
	addr := redistest.StartTLS(t, "--tls-cert-file", pki.serverCert, "--tls-key-file", pki.serverKey,
		"--tls-ca-cert-file", pki.ca, "--tls-auth-clients", "yes").TLSAddr
	base := config.Redis{Addrs: []string{addr}, Timeout: time.Second, TLS: true,
		TLSCAFile: pki.ca, TLSCertFile: pki.clientCert, TLSKeyFile: pki.clientKey}

	t.Run("decisions over TLS", func(t *testing.T) {
		decideTwoOfThree(t, base, "tls")
	})

	refused := []struct {
		name string
		mod  func(*config.Redis)
	}{
		{"no client certificate", func(rc *config.Redis) { rc.TLSCertFile, rc.TLSKeyFile = "", "" }},
		{"another CA", func(rc *config.Redis) { rc.TLSCAFile = pki.otherCA }},
		{"the wrong server name", func(rc *config.Redis) { rc.TLSServerName = "redis.example" }},
		{"no TLS", func(rc *config.Redis) { *rc = config.Redis{Addrs: rc.Addrs, Timeout: time.Second} }},
	}
	for _, tc := range refused {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			rc := base
			tc.mod(&rc)
			c, err := NewRedisClient(rc, "")
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if err := c.Ping(ctx).Err(); err == nil {
				t.Fatal("PING answered")
			}
		})
	}

	bad := []struct {
		name, want string
		mod        func(*config.Redis)
	}{
		{"missing CA file", "limiter.redis.tls_ca_file", func(rc *config.Redis) { rc.TLSCAFile = filepath.Join(t.TempDir(), "none.pem") }},
		{"CA file without a certificate", "holds no PEM certificate", func(rc *config.Redis) { rc.TLSCAFile = pki.clientKey }},
		{"key of another certificate", "tls_cert_file", func(rc *config.Redis) { rc.TLSKeyFile = pki.serverKey }},
	}
	for _, tc := range bad {
		t.Run("at start: "+tc.name, func(t *testing.T) {
			rc := base
			tc.mod(&rc)
			if _, err := NewRedisClient(rc, ""); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

// TestRedisClusterFirstCallsOneDeadline: every call exgate makes on a
// Cluster client NewRedisClient built is bounded by its own deadline,
// the first one of the client included, with every master stopped: the
// duplicate-protection store's own claim, complete, release and
// mark-unknown, the readiness ping, and the limiter's round trip. (The
// Cluster client otherwise fetches COMMAND on its first command, from
// random nodes, under a 5s deadline of its own: the test asserts that no
// COMMAND is sent, counted by a hook on every node's client.) Each call
// is made on a fresh client whose slot map is loaded, as a replica's is
// once its limiter has run, while the masters are stopped.
func TestRedisClusterFirstCallsOneDeadline(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	cl := redistest.StartCluster(t, 3)
	const timeout = 200 * time.Millisecond
	rc := config.Redis{Addrs: cl.Addrs, Timeout: timeout}
	o := idempotency.Options{Timeout: timeout, InFlightTimeout: time.Minute, Retention: time.Hour}
	key := idempotency.Key{Account: "first-call", Identifier: "order-1"}
	var fp idempotency.Fingerprint
	newClient := func(t *testing.T, h redis.Hook) redis.UniversalClient {
		c, err := NewRedisClient(rc, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		c.(*redis.ClusterClient).OnNewNode(func(n *redis.Client) { n.AddHook(h) })
		if _, err := c.(*redis.ClusterClient).MasterForKey(context.Background(), "any"); err != nil {
			t.Fatal(err) // the slot map loaded
		}
		return c
	}
	// held is a claim taken before the masters stop, by another client.
	held := func(t *testing.T, id string) idempotency.Claim {
		k := key
		k.Identifier = id
		c, err := idempotency.NewRedis(newClient(t, &commandFetches{}), o).Claim(context.Background(), k, fp)
		if err != nil || c.Outcome != idempotency.Claimed {
			t.Fatalf("claim before the masters stop: %v %v", c.Outcome, err)
		}
		return c
	}
	cases := []struct {
		name string
		call func(t *testing.T, c redis.UniversalClient) func(context.Context) error
	}{
		{"duplicate protection's claim", func(t *testing.T, c redis.UniversalClient) func(context.Context) error {
			s := idempotency.NewRedis(c, o)
			return func(ctx context.Context) error { _, err := s.Claim(ctx, key, fp); return err }
		}},
		{"duplicate protection's complete", func(t *testing.T, c redis.UniversalClient) func(context.Context) error {
			cl, s := held(t, "complete"), idempotency.NewRedis(c, o)
			return func(ctx context.Context) error {
				return s.Complete(ctx, cl, idempotency.Record{Status: 201, Body: []byte("{}")})
			}
		}},
		{"duplicate protection's release", func(t *testing.T, c redis.UniversalClient) func(context.Context) error {
			cl, s := held(t, "release"), idempotency.NewRedis(c, o)
			return func(ctx context.Context) error { return s.Release(ctx, cl) }
		}},
		{"duplicate protection's mark unknown", func(t *testing.T, c redis.UniversalClient) func(context.Context) error {
			cl, s := held(t, "unknown"), idempotency.NewRedis(c, o)
			return func(ctx context.Context) error { return s.MarkUnknown(ctx, cl) }
		}},
		{"readiness ping", func(t *testing.T, c redis.UniversalClient) func(context.Context) error {
			return func(ctx context.Context) error {
				ctx, cancel := context.WithTimeout(ctx, timeout)
				defer cancel()
				return c.Ping(ctx).Err()
			}
		}},
		{"limiter", func(t *testing.T, c redis.UniversalClient) func(context.Context) error {
			r := ratelimit.NewRedis(c, ratelimit.RedisOptions{Timeout: timeout})
			t.Cleanup(func() { _ = r.Close() })
			return func(ctx context.Context) error {
				_, err := r.Allow(ctx, "first-call", ratelimit.Limit{Rate: 2, Period: time.Hour, Burst: 2})
				return err
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var fetches commandFetches
			call := tc.call(t, newClient(t, &fetches))
			for _, s := range cl.Servers {
				s.Freeze()
			}
			start := time.Now()
			err := call(context.Background())
			d := time.Since(start)
			for _, s := range cl.Servers {
				s.Thaw()
			}
			if err == nil {
				t.Errorf("with every master stopped: no error")
			}
			if n := fetches.n.Load(); n != 0 {
				t.Errorf("%s, every master stopped: the client fetched the command table %d times, under a deadline of its own", tc.name, n)
			}
			t.Logf("%s, every master stopped, on a fresh client: failed after %v (deadline %v): %v", tc.name, d, timeout, err)
		})
	}
}

// commandFetches is a go-redis hook counting the COMMAND calls (the
// command table's fetch) of the clients it is added to.
type commandFetches struct{ n atomic.Int64 }

func (h *commandFetches) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *commandFetches) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "command" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *commandFetches) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// testStoreTimeout is the Redis deadline of tests that do not test a
// deadline: only a hang reaches it, where a round trip over a second
// under a loaded suite would be decided by the store-error path.
const testStoreTimeout = time.Minute
