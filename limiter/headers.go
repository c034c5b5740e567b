package limiter

import (
	"net/http"
	"strconv"
	"time"

	"github.com/exgate/exgate/config"
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
// r is the requests remaining now; t is, for a denied request, the
// seconds until one would pass (the Retry-After value), else the seconds
// until the limit is back to a full burst. It writes nothing when no
// limit decided the request.
func (d *Decision) SetHeaders(h http.Header, style string) {
	if d.header < 0 || style == config.HeadersNone || style == "" {
		return
	}
	o := &d.Outcomes[d.header]
	t := Seconds(o.wait())
	switch style {
	case config.HeadersIETF:
		var b [96]byte
		v := append(b[:0], '"')
		v = append(v, o.Limit...)
		v = append(v, `";r=`...)
		v = strconv.AppendInt(v, o.Result.Remaining, 10)
		v = append(v, ";t="...)
		v = strconv.AppendInt(v, t, 10)
		h["Ratelimit-Policy"] = o.v.policy
		h["Ratelimit"] = []string{string(v)}
	case config.HeadersLegacy:
		h["X-Ratelimit-Limit"] = o.v.quota
		h["X-Ratelimit-Remaining"] = []string{strconv.FormatInt(o.Result.Remaining, 10)}
		h["X-Ratelimit-Reset"] = []string{strconv.FormatInt(t, 10)}
	}
}
