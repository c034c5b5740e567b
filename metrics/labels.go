package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// maxValidationCodes bounds the distinct code label values of
// exgate_validation_rejections_total; further codes are counted as
// "other".
const maxValidationCodes = 64

// results are the two series of a counter by result: failure and success.
type results [2]prometheus.Counter

// newResults resolves the failure and success series of vec, whose one
// label is the result.
func newResults(vec *prometheus.CounterVec) results {
	return results{vec.WithLabelValues("failure"), vec.WithLabelValues("success")}
}

// of returns the series of a success, or of a failure.
func (r *results) of(success bool) prometheus.Counter {
	if success {
		return r[1]
	}
	return r[0]
}

// boundedLabel resolves the children of a one-label counter vector on
// first use, so that counting does not allocate, and counts past
// maxValidationCodes distinct values as "other" to bound the label's
// cardinality.
type boundedLabel struct {
	vec *prometheus.CounterVec
	mu  sync.RWMutex
	m   map[string]prometheus.Counter
}

func (b *boundedLabel) counter(value string) prometheus.Counter {
	if value == "" {
		value = "other"
	}
	b.mu.RLock()
	c, ok := b.m[value]
	b.mu.RUnlock()
	if ok {
		return c
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if c, ok := b.m[value]; ok {
		return c
	}
	if len(b.m) >= maxValidationCodes {
		if c, ok := b.m["other"]; ok {
			return c
		}
		value = "other"
	}
	c = b.vec.WithLabelValues(value)
	b.m[value] = c
	return c
}
