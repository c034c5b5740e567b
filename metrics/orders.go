package metrics

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// newOrderCollectors builds the collectors of order checks: validation,
// duplicate protection, the body budget and the market catalogue.
func (m *Metrics) newOrderCollectors() {
	m.validation = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameValidation,
		Help: "Orders refused by validation before reaching the backend, by rejection code.",
	}, []string{"code"})
	m.idempotency = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameIdempotency,
		Help: "Duplicate-protection outcomes for order identifiers (claimed, replayed, in_progress, conflict, unknown, released, store_error, store_full, account_full, not_acceptable).",
	}, []string{"outcome"})
	m.bodyBudget = prometheus.NewCounter(prometheus.CounterOpts{
		Name: NameBodyBudget,
		Help: "Requests refused with 503 server_busy because their client's share of server.max_buffered_bytes was full (a client may hold at most as many bytes as are left free).",
	})
	m.logSuppressed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameLogSuppressed,
		Help: "Access log lines of refusals exgate answered itself not written because their client was past its share of them (log.refusals_per_client), by code; each such client's are summed up in a line every 10 s.",
	}, []string{"code"})
	m.logCodes = boundedLabel{vec: m.logSuppressed, m: map[string]prometheus.Counter{}}
	m.catalogueAge = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: NameCatalogueAge,
		Help: "Seconds since the market catalogue was last loaded from the backend; -1 until the first load.",
	}, m.catalogueAgeSeconds)
	m.validCodes = boundedLabel{vec: m.validation, m: map[string]prometheus.Counter{}}
	for o := range m.idemOutcomes {
		m.idemOutcomes[o] = m.idempotency.WithLabelValues(IdempotencyOutcome(o).String())
	}
}

// Idempotency counts one duplicate-protection outcome. Outcomes outside
// the defined set are ignored.
func (m *Metrics) Idempotency(o IdempotencyOutcome) {
	if m == nil || o >= numIdempotencyOutcomes {
		return
	}
	m.idemOutcomes[o].Inc()
}

// BodyBudgetExhausted counts one order or bulk refused because its
// client's share of the buffered body budget was full.
func (m *Metrics) BodyBudgetExhausted() {
	if m == nil {
		return
	}
	m.bodyBudget.Inc()
}

// LogRefusalSuppressed counts one access log line of a refusal with the
// given code ("" counts as other) not written because its client was past
// its share of such lines. On a nil *Metrics it does nothing.
func (m *Metrics) LogRefusalSuppressed(code string) {
	if m == nil {
		return
	}
	m.logCodes.counter(code).Inc()
}

// ValidationRejected counts one order refused by validation with the given
// rejection code. Codes are cached after first use, so the call does not
// allocate; past 64 distinct codes, new ones are counted as "other" to
// bound the label's cardinality. An empty code is counted as "other".
func (m *Metrics) ValidationRejected(code string) {
	if m == nil {
		return
	}
	m.validationCounter(code).Inc()
}

func (m *Metrics) validationCounter(code string) prometheus.Counter {
	return m.validCodes.counter(code)
}

// SetCatalogueLoaded records when the market catalogue was last loaded
// successfully. exgate_market_catalogue_age_seconds is computed from it at
// scrape time, so it keeps growing while loads fail; before the first call
// it reads -1.
func (m *Metrics) SetCatalogueLoaded(t time.Time) {
	if m == nil {
		return
	}
	m.catalogueLoaded.Store(t.UnixNano())
}

// RegisterCatalogueAge registers exgate_market_catalogue_age_seconds on
// reg. Only a gateway that validates orders has a catalogue, so only it
// exports the age: elsewhere the gauge would read -1 for ever and its
// "never loaded" alert would fire for nothing.
func (m *Metrics) RegisterCatalogueAge(reg prometheus.Registerer) error {
	if m == nil || reg == nil {
		return nil
	}
	if err := reg.Register(m.catalogueAge); err != nil {
		return fmt.Errorf("metrics: register: %w", err)
	}
	return nil
}

func (m *Metrics) catalogueAgeSeconds() float64 {
	at := m.catalogueLoaded.Load()
	if at == 0 {
		return -1
	}
	age := m.now().Sub(time.Unix(0, at)).Seconds()
	if age < 0 {
		return 0
	}
	return age
}
