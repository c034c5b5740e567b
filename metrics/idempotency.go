package metrics

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Names of the duplicate-protection store's metrics.
const (
	NameIdempotencyStoreDuration = "exgate_idempotency_store_duration_seconds"
	NameIdempotencyStoreErrors   = "exgate_idempotency_store_errors_total"
	NameIdempotencyStoreBytes    = "exgate_idempotency_store_bytes"
	NameIdempotencyStoreMaxBytes = "exgate_idempotency_store_max_bytes"
	NameIdempotencyStoreFull     = "exgate_idempotency_store_full"
	NameIdempotencyScriptRuns    = "exgate_idempotency_store_script_runs_total"
)

// IdempotencyStoreOp is the operation label of the duplicate-protection
// store's metrics: which call of idempotency.Store was made.
type IdempotencyStoreOp uint8

// Duplicate-protection store operations.
const (
	// IdempotencyOpClaim: Claim, made before an order with an identifier is
	// sent; its failure refuses the order.
	IdempotencyOpClaim IdempotencyStoreOp = iota
	// IdempotencyOpComplete: Complete, recording the backend's answer.
	IdempotencyOpComplete
	// IdempotencyOpRelease: Release, freeing an identifier whose order was
	// not placed.
	IdempotencyOpRelease
	// IdempotencyOpMarkUnknown: MarkUnknown, after a timeout or a lost
	// answer.
	IdempotencyOpMarkUnknown
	numIdempotencyOps
)

// String returns the operation label value.
func (o IdempotencyStoreOp) String() string {
	switch o {
	case IdempotencyOpClaim:
		return "claim"
	case IdempotencyOpComplete:
		return "complete"
	case IdempotencyOpRelease:
		return "release"
	default:
		return "mark_unknown"
	}
}

// IdempotencyStore is the set of collectors of duplicate protection's store:
// how long each call takes and which fail. It is registered only where
// duplicate protection runs (NewDuplicateStore); every method is safe on
// a nil *IdempotencyStore and then does nothing.
type IdempotencyStore struct {
	duration *prometheus.HistogramVec
	errs     *prometheus.CounterVec
	bytes    prometheus.Gauge
	maxBytes prometheus.Gauge
	full     prometheus.Gauge
	runs     *scriptRuns

	// Children resolved once, by operation (and error kind).
	observers [numIdempotencyOps]prometheus.Observer
	failures  [numIdempotencyOps][numStoreErrorKinds]prometheus.Counter
}

// NewDuplicateStore builds the duplicate-protection store's collectors and
// registers them on reg. Like New, it unregisters what it registered when
// one fails.
func NewDuplicateStore(reg prometheus.Registerer) (*IdempotencyStore, error) {
	if reg == nil {
		return nil, errors.New("metrics: nil Registerer")
	}
	s := &IdempotencyStore{}
	s.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    NameIdempotencyStoreDuration,
		Help:    "Duration of calls to the duplicate-protection store, failed ones included, by operation (claim, complete, release, mark_unknown).",
		Buckets: IdempotencyStoreBuckets(),
	}, []string{"operation"})
	s.errs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameIdempotencyStoreErrors,
		Help: "Failed calls to the duplicate-protection store, by operation and kind (timeout, full, other); a failed claim refuses the order with 503.",
	}, []string{"operation", "kind"})
	s.bytes = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: NameIdempotencyStoreBytes,
		Help: "Bytes the duplicate-protection store holds, at its last check: the memory store's entries, or Redis's used_memory (of its fullest master).",
	})
	s.maxBytes = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: NameIdempotencyStoreMaxBytes,
		Help: "The duplicate-protection store's bound on bytes: idempotency.memory.max_bytes, or Redis's maxmemory (0: none).",
	})
	s.full = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: NameIdempotencyStoreFull,
		Help: "1 while the duplicate-protection store takes no new identifier for lack of room (orders with a new identifier get 503 duplicate_protection_full), else 0.",
	})
	s.runs = &scriptRuns{desc: prometheus.NewDesc(NameIdempotencyScriptRuns,
		"Redis script runs of duplicate protection's store, by script: claim (a claim sent on its own, not riding in the limits' round trip) and finish (a run that records responses, releases claims or marks them unknown; one run carries the finishes of a round trip).",
		[]string{"script"}, nil)}
	if err := register(reg, []prometheus.Collector{s.duration, s.errs, s.bytes, s.maxBytes, s.full, s.runs}); err != nil {
		return nil, err
	}
	for o := range s.observers {
		op := IdempotencyStoreOp(o).String()
		s.observers[o] = s.duration.WithLabelValues(op)
		for k := range s.failures[o] {
			s.failures[o][k] = s.errs.WithLabelValues(op, storeErrorKind(k).String())
		}
	}
	return s, nil
}

// IdempotencyStoreNames lists the duplicate-protection store's metric names.
func IdempotencyStoreNames() []string {
	return []string{NameIdempotencyStoreDuration, NameIdempotencyStoreErrors, NameIdempotencyStoreBytes, NameIdempotencyStoreMaxBytes, NameIdempotencyStoreFull, NameIdempotencyScriptRuns}
}

// ScriptRunSource reports the script runs a Redis store has sent:
// claims of its own and finish runs.
type ScriptRunSource interface {
	ScriptRuns() (claims, finishes uint64)
}

// SetScriptRuns makes src the source of the script-run counters; without
// one (a memory store) they have no series.
func (s *IdempotencyStore) SetScriptRuns(src ScriptRunSource) {
	if s == nil || src == nil {
		return
	}
	s.runs.src.Store(&src)
}

// scriptRuns collects a ScriptRunSource's counts.
type scriptRuns struct {
	desc *prometheus.Desc
	src  atomic.Pointer[ScriptRunSource]
}

// Describe implements prometheus.Collector.
func (r *scriptRuns) Describe(ch chan<- *prometheus.Desc) { ch <- r.desc }

// Collect implements prometheus.Collector.
func (r *scriptRuns) Collect(ch chan<- prometheus.Metric) {
	src := r.src.Load()
	if src == nil {
		return
	}
	claims, finishes := (*src).ScriptRuns()
	ch <- prometheus.MustNewConstMetric(r.desc, prometheus.CounterValue, float64(claims), "claim")
	ch <- prometheus.MustNewConstMetric(r.desc, prometheus.CounterValue, float64(finishes), "finish")
}

// SetRoom records the store's last check: the bytes it holds, its bound
// (0: none) and whether it takes no new identifier.
func (s *IdempotencyStore) SetRoom(bytes, maxBytes int64, full bool) {
	if s == nil {
		return
	}
	s.bytes.Set(float64(bytes))
	s.maxBytes.Set(float64(maxBytes))
	f := 0.0
	if full {
		f = 1
	}
	s.full.Set(f)
}

// IdempotencyStoreBuckets are the duration buckets of the store's calls,
// around its default deadline (idempotency.timeout, 100 ms).
func IdempotencyStoreBuckets() []float64 {
	return []float64{.0001, .00025, .0005, .001, .002, .005, .01, .025, .05, .075, .1, .25, .5, 1}
}

// Observe records one store call of operation op that took d; err is its
// failure, or nil. Answers that are not failures of the store (the claim
// is no longer held, the store or the account is full) are passed as nil
// by the caller.
func (s *IdempotencyStore) Observe(op IdempotencyStoreOp, d time.Duration, err error) {
	if s == nil || op >= numIdempotencyOps {
		return
	}
	s.observers[op].Observe(d.Seconds())
	if err != nil {
		s.failures[op][classifyStoreError(err)].Inc()
	}
}
