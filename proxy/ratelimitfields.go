package proxy

import (
	"net/http"
	"strconv"
)

// legacyRateLimitFields are the legacy style's rate-limit fields
// (limiter.headers: legacy), which tell one limit: a client reads one
// value of each.
var legacyRateLimitFields = [...]string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"}

// mergeLegacyRateLimit leaves the client one set of legacy rate-limit
// fields when exgate wrote its own (into out, the client's answer) and
// the backend sent some in res: the backend's replace exgate's when they
// are whole (each of the three once, a whole number) and closer to
// denial (fewer requests remaining), else exgate's stand; the backend's
// are never appended, which would give the client two values of one
// field. The RateLimit and RateLimit-Policy lists of the ietf style need
// no merge: the backend's entries follow exgate's, each named. It looks
// for the backend's (hasLegacyRateLimit) only when exgate wrote its own:
// one look-up in the client's answer, not three in the backend's, for
// the answers of every other style.
func mergeLegacyRateLimit(res *http.Response, out http.Header) {
	mine, ok := out["X-Ratelimit-Remaining"]
	if !ok || !hasLegacyRateLimit(res.Header) {
		return
	}
	theirs, whole := wholeLegacyFields(res.Header)
	for _, k := range legacyRateLimitFields {
		delete(res.Header, k)
	}
	if own, err := strconv.ParseInt(mine[0], 10, 64); !whole || err != nil || theirs[1] >= own {
		return
	}
	for i, k := range legacyRateLimitFields {
		out[k] = []string{strconv.FormatInt(theirs[i], 10)}
	}
}

// hasLegacyRateLimit reports whether h has a legacy rate-limit field.
func hasLegacyRateLimit(h http.Header) bool {
	for _, k := range legacyRateLimitFields {
		if _, ok := h[k]; ok {
			return true
		}
	}
	return false
}

// wholeLegacyFields returns the backend's limit, remaining and reset,
// and whether each was sent once as a whole number of at most 18 digits.
func wholeLegacyFields(h http.Header) (v [3]int64, ok bool) {
	for i, k := range legacyRateLimitFields {
		vs := h[k]
		if len(vs) != 1 || len(vs[0]) > 18 {
			return v, false
		}
		u, err := strconv.ParseUint(vs[0], 10, 63) // digits alone: no sign
		if err != nil {
			return v, false
		}
		v[i] = int64(u)
	}
	return v, true
}
