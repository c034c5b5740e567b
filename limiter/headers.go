package limiter

import (
	"net/http"
	"slices"
	"strconv"
	"time"
	"unsafe"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/ratelimit"
)

// MaxWaitSeconds bounds every wait exgate tells a client in Retry-After
// and the rate-limit fields: 366 days, the longest period a limit can
// have. A longer wait (a bulk charged against a limit with a long period,
// or a burst far above the rate) is reported as this bound: the client
// then asks again, rather than being told a wait no one honours.
const MaxWaitSeconds = 366 * 24 * 60 * 60

// Seconds rounds d up to whole seconds, as Retry-After and the RateLimit
// fields count them: anything above zero is at least 1, and no result is
// above MaxWaitSeconds (ratelimit.Never included).
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return clampSeconds(s)
}

// clampSeconds bounds a count of seconds told to a client to
// MaxWaitSeconds.
func clampSeconds(s int64) int64 { return min(s, MaxWaitSeconds) }

// SetHeaders writes the rate-limit fields of the limit closest to denial
// in style (config.HeadersIETF, HeadersLegacy or HeadersNone):
//
//	ietf:   RateLimit-Policy: "token";q=200;w=60
//	        RateLimit: "token";r=12;t=47
//	legacy: X-RateLimit-Limit: 200, X-RateLimit-Remaining: 12, X-RateLimit-Reset: 47
//
// r is the requests remaining now, as the store holds the limit after
// the answer: a refused request, and one whose charge was given back
// (Enforcer.Refund), charged nothing. t is, for a denied request, the
// seconds until one would pass (the Retry-After value), else the seconds
// until the limit is back to a full burst. It writes nothing when no
// limit decided the request, and replaces the fields it wrote before:
// called again after a refund, it tells the state after the refund.
func (d *Decision) SetHeaders(h http.Header, style string) {
	if style == config.HeadersNone || style == "" {
		return
	}
	o := d.Closest()
	if o == nil {
		return
	}
	t := Seconds(o.wait())
	switch style {
	case config.HeadersIETF:
		h["Ratelimit-Policy"] = o.v.policy
		h["Ratelimit"] = o.v.rateLimitValue(o.Limit, o.Result.Remaining, t)
	case config.HeadersLegacy:
		h["X-Ratelimit-Limit"] = o.v.quota
		h["X-Ratelimit-Remaining"] = []string{strconv.FormatInt(o.Result.Remaining, 10)}
		h["X-Ratelimit-Reset"] = []string{strconv.FormatInt(t, 10)}
	}
}

// rateLimitValue returns the RateLimit field's value for limit with r
// requests remaining and t seconds to tell, reusing a value made before
// when it says the same: a limit's counts repeat from request to request
// (a client's runs count down through the same remainders, a lease
// answers from a count it holds), and a value reused allocates nothing.
// The variant keeps the last value made for each remainder modulo
// rateLimitValues. A value is never modified once made, so responses
// share it as they share the policy; its slice has room for one string
// only, so an append to it copies.
func (v *variant) rateLimitValue(limit string, r, t int64) []string {
	slot := &v.rateLimit[uint64(r)%rateLimitValues]
	if f := slot.Load(); f != nil && f.r == r && f.t == t && f.limit == limit {
		return f.v[:]
	}
	f := &rateLimitField{limit: limit, r: r, t: t}
	b := append(f.buf[:0], '"')
	b = append(b, limit...)
	b = append(b, `";r=`...)
	b = strconv.AppendInt(b, r, 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, t, 10)
	// b is written once, here, and never again: the value is its text,
	// not a copy (one allocation for the value and its slice, where a
	// string and a slice took two).
	f.v[0] = unsafe.String(unsafe.SliceData(b), len(b))
	slot.Store(f)
	return f.v[:]
}

// rateLimitValues is how many RateLimit field values a variant keeps
// (rateLimitValue), one for each remainder modulo it: a variant keeps at
// most that many values of about a hundred bytes.
const rateLimitValues = 256

// rateLimitField is a RateLimit header value with its text and what it
// says: a usual value ("token";r=199;t=1 and a longer limit name) fits in
// buf, and a longer one is moved out of it by append.
type rateLimitField struct {
	v     [1]string
	limit string
	r, t  int64
	buf   [64]byte
}

// Closest returns the outcome closest to denial, whose fields the
// headers tell (SetHeaders), or nil when none has a count to tell.
func (d *Decision) Closest() *Outcome {
	if k := d.closest(); k >= 0 {
		return &d.Outcomes[k]
	}
	return nil
}

// Deciding returns the outcome that decided the request, the one its
// access log line and its trace name: the first that did not allow it,
// else the one closest to denial (Closest, the one the headers tell), else
// the last; nil when no limit applied.
func (d *Decision) Deciding() *Outcome {
	if d.N == 0 {
		return nil
	}
	for i := 0; i < d.N; i++ {
		if d.Outcomes[i].Decision != Allowed {
			return &d.Outcomes[i]
		}
	}
	if o := d.Closest(); o != nil {
		return o
	}
	return &d.Outcomes[d.N-1]
}

// closest returns the index of the outcome closest to denial, whose
// fields the headers tell, or -1: the one with the fewest requests
// remaining (a denial, shadow included, before any allowance), and of
// equals the one that takes longest to recover. An outcome no wait would
// lift (ratelimit.Never), or one the store could not decide (open or
// closed), has no remaining count or wait to report and is not a
// candidate.
func (d *Decision) closest() int {
	k := -1
	for i := 0; i < d.N; i++ {
		o := &d.Outcomes[i]
		if (o.Fallback != "" && o.Fallback != config.StoreLocal) || o.Result.RetryAfter == ratelimit.Never {
			continue
		}
		if k < 0 {
			k = i
			continue
		}
		h := &d.Outcomes[k]
		denied, hDenied := o.Decision != Allowed, h.Decision != Allowed
		switch {
		case denied && !hDenied,
			denied == hDenied && o.Result.Remaining < h.Result.Remaining,
			denied == hDenied && o.Result.Remaining == h.Result.Remaining && o.wait() > h.wait():
			k = i
		}
	}
	return k
}

// legacyRateLimitFields are the legacy style's rate-limit fields
// (limiter.headers: legacy), which tell one limit: a client reads one
// value of each.
var legacyRateLimitFields = [...]string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"}

// LegacyField reports whether name, in canonical form, is one of the
// legacy style's rate-limit fields, which MergeLegacyFields reads in the
// backend's header.
func LegacyField(name string) bool {
	return slices.Contains(legacyRateLimitFields[:], name)
}

// MergeLegacyFields leaves the client one set of legacy rate-limit
// fields (SetHeaders' legacy style) when exgate wrote its own (into out,
// the client's answer) and the backend sent some in backend, its
// answer's header: the backend's replace exgate's when they are whole
// (each of the three once, a whole number) and closer to denial (fewer
// requests remaining), else exgate's stand; the backend's
// are never appended, which would give the client two values of one
// field. The RateLimit and RateLimit-Policy lists of the ietf style need
// no merge: the backend's entries follow exgate's, each named. It looks
// for the backend's (hasLegacyRateLimit) only when exgate wrote its own:
// one look-up in the client's answer, not three in the backend's, for
// the answers of every other style.
func MergeLegacyFields(backend, out http.Header) {
	mine, ok := out["X-Ratelimit-Remaining"]
	if !ok || !hasLegacyRateLimit(backend) {
		return
	}
	theirs, whole := wholeLegacyFields(backend)
	for _, k := range legacyRateLimitFields {
		delete(backend, k)
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
