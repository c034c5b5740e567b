package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// newAuthCollectors builds the collectors of token verification.
func (m *Metrics) newAuthCollectors() {
	m.authFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameAuthFailures,
		Help: "Bearer tokens refused at the edge, by reason (malformed, noncanonical, bad_signature, bad_algorithm, unknown_key, expired, not_yet_valid, issued_in_future, missing_claim, wrong_type, wrong_issuer, wrong_audience).",
	}, []string{"reason"})
	m.authCachedVec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameAuthCached,
		Help: "Bearer tokens refused from the cache of refused tokens, without their signature being checked again, by reason; also counted in " + NameAuthFailures + ".",
	}, []string{"reason"})
	m.jwksFetches = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameJWKSFetches,
		Help: "Fetches of the JWKS URL, by result (success, failure).",
	}, []string{"result"})
	m.authCodes = boundedLabel{vec: m.authFailures, m: map[string]prometheus.Counter{}}
	m.authCached = boundedLabel{vec: m.authCachedVec, m: map[string]prometheus.Counter{}}
	m.jwksResults = newResults(m.jwksFetches)
}

// AuthFailure counts one bearer token refused at the edge, by reason
// (identity.Reason). Like validation codes, reasons are cached after first
// use and bounded; an empty reason counts as "other".
func (m *Metrics) AuthFailure(reason string) {
	if m == nil {
		return
	}
	m.authCodes.counter(reason).Inc()
}

// AuthFailureCached counts one bearer token refused from the cache of
// refused tokens (identity.Options.OnCachedRefusal), by reason, bounded
// like AuthFailure. The refusal is also counted by AuthFailure.
func (m *Metrics) AuthFailureCached(reason string) {
	if m == nil {
		return
	}
	m.authCached.counter(reason).Inc()
}

// JWKSFetch counts one fetch of the JWKS URL.
func (m *Metrics) JWKSFetch(ok bool) {
	if m == nil {
		return
	}
	m.jwksResults.of(ok).Inc()
}
