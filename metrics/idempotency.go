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
	NameIdempotencyBackground    = "exgate_idempotency_store_background_total"
)

// IdempotencyWork is the work label of exgate_idempotency_store_background_total:
// what the Redis store did in the background (idempotency.Work).
type IdempotencyWork uint8

// Works of the store in the background.
const (
	// IdempotencyWorkFree: the free of a claim whose reply was lost.
	IdempotencyWorkFree IdempotencyWork = iota
	// IdempotencyWorkComplete: a completion retried.
	IdempotencyWorkComplete
	// IdempotencyWorkRelease: a release retried.
	IdempotencyWorkRelease
	numIdempotencyWorks
)

// String returns the work label value.
func (w IdempotencyWork) String() string {
	switch w {
	case IdempotencyWorkFree:
		return "free"
	case IdempotencyWorkComplete:
		return "complete"
	}
	return "release"
}

// IdempotencyWorkEnd is how a work in the background ended; a failure is
// labelled by its kind (timeout, full, other).
type IdempotencyWorkEnd uint8

// Ends of a work in the background.
const (
	// IdempotencyWorkDone: the claim was freed, or its answer recorded.
	IdempotencyWorkDone IdempotencyWorkEnd = iota
	// IdempotencyWorkNotHeld: the claim was not held by its holder.
	IdempotencyWorkNotHeld
	// IdempotencyWorkOverBudget: the settlement was not retried, for
	// want of room.
	IdempotencyWorkOverBudget
	// IdempotencyWorkFailed: the store failed; the claim stays held.
	IdempotencyWorkFailed
)

// numWorkResults counts the result label values: the ends before
// IdempotencyWorkFailed, then a failure's kinds.
const numWorkResults = int(IdempotencyWorkFailed) + int(numStoreErrorKinds)

// workResult returns the i-th result label value.
func workResult(i int) string {
	switch IdempotencyWorkEnd(i) {
	case IdempotencyWorkDone:
		return "done"
	case IdempotencyWorkNotHeld:
		return "not_held"
	case IdempotencyWorkOverBudget:
		return "over_budget"
	}
	return storeErrorKind(i - int(IdempotencyWorkFailed)).String()
}

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
	works    *prometheus.CounterVec

	// Children resolved once, by operation (and error kind).
	observers [numIdempotencyOps]prometheus.Observer
	failures  [numIdempotencyOps][numStoreErrorKinds]prometheus.Counter
	workEnds  [numIdempotencyWorks][numWorkResults]prometheus.Counter
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
	s.works = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameIdempotencyBackground,
		Help: "Works the Redis duplicate-protection store did in the background, by work (free: a claim whose reply was lost; complete, release: a settlement retried) and result (done; not_held; over_budget: not retried; timeout, full, other: failed, the claim stays held and its order's retries get 409).",
	}, []string{"work", "result"})
	if err := register(reg, []prometheus.Collector{s.duration, s.errs, s.bytes, s.maxBytes, s.full, s.runs, s.works}); err != nil {
		return nil, err
	}
	for o := range s.observers {
		op := IdempotencyStoreOp(o).String()
		s.observers[o] = s.duration.WithLabelValues(op)
		for k := range s.failures[o] {
			s.failures[o][k] = s.errs.WithLabelValues(op, storeErrorKind(k).String())
		}
	}
	for w := range s.workEnds {
		for r := range s.workEnds[w] {
			s.workEnds[w][r] = s.works.WithLabelValues(IdempotencyWork(w).String(), workResult(r))
		}
	}
	return s, nil
}

// IdempotencyStoreNames lists the duplicate-protection store's metric names.
func IdempotencyStoreNames() []string {
	return []string{NameIdempotencyStoreDuration, NameIdempotencyStoreErrors, NameIdempotencyStoreBytes, NameIdempotencyStoreMaxBytes, NameIdempotencyStoreFull, NameIdempotencyScriptRuns, NameIdempotencyBackground}
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

// Work counts one work of the store in the background, w, that ended as
// end; err is the failure of IdempotencyWorkFailed, labelled by its kind.
func (s *IdempotencyStore) Work(w IdempotencyWork, end IdempotencyWorkEnd, err error) {
	if s == nil || w >= numIdempotencyWorks || end > IdempotencyWorkFailed {
		return
	}
	r := int(end)
	if end == IdempotencyWorkFailed {
		r += int(classifyStoreError(err))
	}
	s.workEnds[w][r].Inc()
}
