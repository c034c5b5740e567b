package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Rate is N events per Period, written "N/period" in YAML: "5400/1h",
// "60/1m", "10000/24h", "2/1d" or "200/minute". The zero Rate is invalid.
type Rate struct {
	N      int64
	Period time.Duration
}

// maxRateN bounds N so that arithmetic on rates cannot overflow.
const maxRateN = 1 << 40

// UnmarshalText parses "N/period"; "" is the zero Rate (unset), which
// the checks refuse where a rate is required.
func (r *Rate) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	if s == "" {
		*r = Rate{}
		return nil
	}
	n, p, ok := strings.Cut(s, "/")
	if !ok {
		return fmt.Errorf("rate %q: want N/period, such as 60/1m", s)
	}
	count, err := strconv.ParseInt(strings.TrimSpace(n), 10, 64)
	if err != nil || count <= 0 || count > maxRateN {
		return fmt.Errorf("rate %q: N must be a whole number from 1 to %d", s, int64(maxRateN))
	}
	period, err := parsePeriod(strings.TrimSpace(p))
	if err != nil {
		return fmt.Errorf("rate %q: %v", s, err)
	}
	*r = Rate{N: count, Period: period}
	return nil
}

// MarshalText writes the rate in the form UnmarshalText reads ("" for
// the zero Rate).
func (r Rate) MarshalText() ([]byte, error) {
	if r.IsZero() {
		return nil, nil
	}
	return []byte(r.String()), nil
}

// String returns "N/period", with the period in its shortest exact unit.
func (r Rate) String() string {
	return strconv.FormatInt(r.N, 10) + "/" + formatPeriod(r.Period)
}

// IsZero reports whether the rate is unset.
func (r Rate) IsZero() bool { return r.N == 0 && r.Period == 0 }

// checkRate checks a rate; parsed rates are always valid, so this catches
// rates built in code and missing rates.
func checkRate(col *collector, p path, r Rate) {
	switch {
	case r.IsZero():
		col.addf(p, "required, such as 60/1m")
	case r.N < 1 || r.N > maxRateN:
		col.addf(p, "N must be from 1 to %d, got %d", int64(maxRateN), r.N)
	case r.Period < time.Second || r.Period%time.Second != 0 || r.Period > 366*24*time.Hour:
		col.addf(p, "period must be whole seconds from 1s to 366d, got %s", r.Period)
	}
}

var periodWords = map[string]time.Duration{
	"s": time.Second, "sec": time.Second, "second": time.Second,
	"m": time.Minute, "min": time.Minute, "minute": time.Minute,
	"h": time.Hour, "hour": time.Hour,
	"d": 24 * time.Hour, "day": 24 * time.Hour,
}

func parsePeriod(p string) (time.Duration, error) {
	if d, ok := periodWords[p]; ok {
		return d, nil
	}
	var d time.Duration
	if days, ok := strings.CutSuffix(p, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 32)
		if err != nil || n <= 0 || n > 366 {
			return 0, fmt.Errorf("period %q: days must be 1 to 366", p)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(p); err != nil {
			return 0, fmt.Errorf("period %q: want a duration such as 1s, 1m, 1h, 24h or 1d", p)
		}
	}
	if d < time.Second {
		return 0, fmt.Errorf("period %q: must be at least 1s", p)
	}
	if d > 366*24*time.Hour {
		return 0, fmt.Errorf("period %q: must be at most 366d", p)
	}
	if d%time.Second != 0 {
		return 0, fmt.Errorf("period %q: must be whole seconds", p)
	}
	return d, nil
}

func formatPeriod(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d%(24*time.Hour) == 0 && d >= 48*time.Hour:
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	default:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
}
