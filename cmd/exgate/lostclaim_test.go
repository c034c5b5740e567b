package main

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/idempotency"
	"github.com/exgate/exgate/internal/redistest"
	"github.com/exgate/exgate/metrics"
	"github.com/exgate/exgate/sim"
)

// heldFrees is a go-redis hook that holds each free of a lost claim (the
// finish script run with "lost") for hold before sending it: a free
// still under way when the gateway shuts down.
type heldFrees struct{ hold time.Duration }

func (h heldFrees) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h heldFrees) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		for _, a := range cmd.Args() {
			if a == "lost" {
				time.Sleep(h.hold)
				break
			}
		}
		return next(ctx, cmd)
	}
}

func (h heldFrees) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestShutdownWaitsForLostClaimFrees: an order whose claim's reply never
// came back is refused 503 and never sent, and its claim is freed in the
// background (idempotency's freeLost) so that the retry the 503 asks for,
// with the same identifier, is placed. A gateway shut down while that
// free is under way waits for it before closing its Redis client, the
// limiter's or duplicate protection's own: before, the client was closed
// under the free, and the claim of an order never sent stayed, the retry
// (on another replica, or after the restart) refused 409
// request_in_progress and then outcome_unknown for the whole retention.
func TestShutdownWaitsForLostClaimFrees(t *testing.T) {
	srv := redistest.Start(t)
	bs := httptest.NewServer(sim.New(sim.Options{}))
	t.Cleanup(bs.Close)
	for _, tc := range []struct {
		name, prefix string
		mut          func(*config.Config)
	}{
		{"claim riding with the limits, the limiter's client", "shutjoined:", func(*config.Config) {}},
		{"claim on its own, duplicate protection's own client", "shutown:", func(cfg *config.Config) {
			cfg.Limiter.Store, cfg.Idempotency.Store = config.StoreMemory, config.StoreRedis
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := tc.prefix
			cfg := replicaConfig(t, bs.URL, []string{srv.Addr}, 1, func(cfg *config.Config) {
				cfg.Idempotency.KeyPrefix = prefix
				tc.mut(cfg)
			})
			a, err := start(cfg, deps{log: zap.NewNop(), now: time.Now, getenv: secretEnv})
			if err != nil {
				t.Fatal(err)
			}
			stopped := false
			t.Cleanup(func() {
				if !stopped {
					_ = a.shutdown()
				}
			})
			waitCatalogue(t, a)
			url := "http://" + a.addr
			token := authenticate(t, url)
			// The claim's free is held well within its deadline
			// (idempotency.timeout, 2s here).
			h := &redistest.LostReply{}
			a.idem.AddHook(heldFrees{hold: 500 * time.Millisecond})
			a.idem.AddHook(h)
			if code, _, b := order(t, url, token, "warm", "0.001"); code != 201 { // the scripts are loaded
				t.Fatalf("first order: %d %s", code, b)
			}
			h.Arm()
			if code, _, b := order(t, url, token, "lost", "0.001"); code != 503 {
				t.Fatalf("order whose claim's reply was lost: %d %s, want 503", code, b)
			}
			stopped = true
			if err := a.shutdown(); err != nil {
				t.Fatal(err)
			}
			keys, err := srv.Do("KEYS", prefix+"{*}lost")
			if err != nil {
				t.Fatal(err)
			}
			if len(keys.([]any)) != 0 {
				t.Errorf("the claim of the order refused, never sent, is still held after the shutdown: %v", keys)
			}
		})
	}
}

// TestReportWork: what duplicate protection's Redis store did in the
// background is counted by work and result, and a work that leaves a
// claim held — a free or a retried settlement that failed, a settlement
// not retried — is logged with its request's id, never the account or
// the identifier; a work done, or with nothing to do, is not.
func TestReportWork(t *testing.T) {
	timeout := fmt.Errorf("idempotency: redis free: %w", context.DeadlineExceeded)
	for _, tc := range []struct {
		name   string
		b      idempotency.Background
		series string // its labels, sorted
		logged bool
	}{
		{"free done", idempotency.Background{Work: idempotency.WorkFree, RequestID: "r1"}, "result=done,work=free", false},
		{"free found nothing", idempotency.Background{Work: idempotency.WorkFree, RequestID: "r1", Err: idempotency.ErrClaimLost}, "result=not_held,work=free", false},
		{"free timed out", idempotency.Background{Work: idempotency.WorkFree, RequestID: "r1", Err: timeout}, "result=timeout,work=free", true},
		{"completion failed", idempotency.Background{Work: idempotency.WorkComplete, RequestID: "r1", Err: errors.New("connection refused")}, "result=other,work=complete", true},
		{"release not retried", idempotency.Background{Work: idempotency.WorkRelease, RequestID: "r1", Err: idempotency.ErrRetryBudget}, "result=over_budget,work=release", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m, err := metrics.NewDuplicateStore(reg)
			if err != nil {
				t.Fatal(err)
			}
			core, logs := observer.New(zapcore.DebugLevel)
			reportWork(zap.New(core), m)(tc.b)
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			var counted []string
			for _, mf := range mfs {
				if mf.GetName() != metrics.NameIdempotencyBackground {
					continue
				}
				for _, s := range mf.GetMetric() {
					if s.GetCounter().GetValue() == 0 {
						continue
					}
					var labels []string
					for _, l := range s.GetLabel() {
						labels = append(labels, l.GetName()+"="+l.GetValue())
					}
					counted = append(counted, fmt.Sprintf("%s %v", strings.Join(labels, ","), s.GetCounter().GetValue()))
				}
			}
			if want := []string{tc.series + " 1"}; !slices.Equal(counted, want) {
				t.Errorf("counted %v, want %v", counted, want)
			}
			lines := logs.All()
			if !tc.logged {
				if len(lines) != 0 {
					t.Errorf("logged %v, want nothing", lines)
				}
				return
			}
			if len(lines) != 1 || lines[0].ContextMap()["request_id"] != "r1" || lines[0].ContextMap()["work"] != tc.b.Work.String() {
				t.Fatalf("logged %v, want one line naming request r1 and the work", lines)
			}
			for k := range lines[0].ContextMap() {
				if k != "request_id" && k != "work" && k != "error" {
					t.Errorf("the line has a field %q: only the request id, the work and the error", k)
				}
			}
		})
	}
}
