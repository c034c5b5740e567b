package metrics

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Names of the duplicate-protection store's metrics.
const (
	NameDuplicateStoreDuration = "exgate_idempotency_store_duration_seconds"
	NameDuplicateStoreErrors   = "exgate_idempotency_store_errors_total"
)

// DuplicateStoreOp is the operation label of the duplicate-protection
// store's metrics: which call of idempotency.Store was made.
type DuplicateStoreOp uint8

// Duplicate-protection store operations.
const (
	// DuplicateClaim: Claim, made before an order with an identifier is
	// sent; its failure refuses the order.
	DuplicateClaim DuplicateStoreOp = iota
	// DuplicateComplete: Complete, recording the backend's answer.
	DuplicateComplete
	// DuplicateRelease: Release, freeing an identifier whose order was
	// not placed.
	DuplicateRelease
	// DuplicateMarkUnknown: MarkUnknown, after a timeout or a lost
	// answer.
	DuplicateMarkUnknown
	numDuplicateStoreOps
)

// String returns the operation label value.
func (o DuplicateStoreOp) String() string {
	switch o {
	case DuplicateClaim:
		return "claim"
	case DuplicateComplete:
		return "complete"
	case DuplicateRelease:
		return "release"
	default:
		return "mark_unknown"
	}
}

// DuplicateStore is the set of collectors of duplicate protection's store:
// how long each call takes and which fail. It is registered only where
// duplicate protection runs (NewDuplicateStore); every method is safe on
// a nil *DuplicateStore and then does nothing.
type DuplicateStore struct {
	duration *prometheus.HistogramVec
	errs     *prometheus.CounterVec

	// Children resolved once, by operation (and error kind).
	observers [numDuplicateStoreOps]prometheus.Observer
	failures  [numDuplicateStoreOps][numStoreErrorKinds]prometheus.Counter
}

// NewDuplicateStore builds the duplicate-protection store's collectors and
// registers them on reg. Like New, it unregisters what it registered when
// one fails.
func NewDuplicateStore(reg prometheus.Registerer) (*DuplicateStore, error) {
	if reg == nil {
		return nil, errors.New("metrics: nil Registerer")
	}
	s := &DuplicateStore{}
	s.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    NameDuplicateStoreDuration,
		Help:    "Duration of calls to the duplicate-protection store, failed ones included, by operation (claim, complete, release, mark_unknown).",
		Buckets: DuplicateStoreBuckets(),
	}, []string{"operation"})
	s.errs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameDuplicateStoreErrors,
		Help: "Failed calls to the duplicate-protection store, by operation and kind (timeout, other); a failed claim refuses the order with 503.",
	}, []string{"operation", "kind"})
	if err := reg.Register(s.duration); err != nil {
		return nil, fmt.Errorf("metrics: register: %w", err)
	}
	if err := reg.Register(s.errs); err != nil {
		reg.Unregister(s.duration)
		return nil, fmt.Errorf("metrics: register: %w", err)
	}
	for o := range s.observers {
		op := DuplicateStoreOp(o).String()
		s.observers[o] = s.duration.WithLabelValues(op)
		for k := range s.failures[o] {
			s.failures[o][k] = s.errs.WithLabelValues(op, storeErrorKind(k).String())
		}
	}
	return s, nil
}

// DuplicateStoreNames lists the duplicate-protection store's metric names.
func DuplicateStoreNames() []string {
	return []string{NameDuplicateStoreDuration, NameDuplicateStoreErrors}
}

// DuplicateStoreBuckets are the duration buckets of the store's calls,
// around its default deadline (idempotency.timeout, 100 ms).
func DuplicateStoreBuckets() []float64 {
	return []float64{.0001, .00025, .0005, .001, .002, .005, .01, .025, .05, .075, .1, .25, .5, 1}
}

// Observe records one store call of operation op that took d; err is its
// failure, or nil. Answers that are not failures of the store (the claim
// is no longer held, the store or the account is full) are passed as nil
// by the caller.
func (s *DuplicateStore) Observe(op DuplicateStoreOp, d time.Duration, err error) {
	if s == nil || op >= numDuplicateStoreOps {
		return
	}
	s.observers[op].Observe(d.Seconds())
	if err != nil {
		s.failures[op][classifyStoreError(err)].Inc()
	}
}
