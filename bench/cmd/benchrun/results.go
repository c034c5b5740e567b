package main

import (
	"encoding/json"
	"os"
	"slices"
	"time"
)

// Results is everything one benchmark run measured; latest.json holds it
// and latest.md and latest.png are rendered from it.
type Results struct {
	Generated time.Time        `json:"generated"`
	Command   string           `json:"command"`
	Machine   Machine          `json:"machine"`
	Settings  Settings         `json:"settings"`
	Scenarios []ScenarioResult `json:"scenarios"`
	FixedRate *FixedRate       `json:"fixed_rate,omitempty"`
	Traced    *TracedRate      `json:"traced,omitempty"`
	Surge     *Surge           `json:"surge,omitempty"`
	Fleet     *Fleet           `json:"fleet,omitempty"`
	Profiles  []Profile        `json:"profiles,omitempty"`
}

// Machine describes where the run happened.
type Machine struct {
	CPUs        int    `json:"cpus"`
	CPUModel    string `json:"cpu_model"`
	MemoryMB    int64  `json:"memory_mb"`
	Kernel      string `json:"kernel"`
	GoVersion   string `json:"go_version"`
	Nginx       string `json:"nginx"`
	Redis       string `json:"redis"`
	Wrk         string `json:"wrk"`
	LoadAtStart string `json:"load_at_start"`
	Revision    string `json:"revision"` // git describe of the tree the binaries were built from
	Pinning     string `json:"pinning"`
}

// Settings are the load settings.
type Settings struct {
	Rounds    int    `json:"rounds"`
	Duration  string `json:"duration"`
	Warmup    string `json:"warmup"`
	Threads   int    `json:"threads"`
	Conns     int    `json:"conns"`
	Tokens    int    `json:"tokens"` // distinct tokens in the many-keys scenario
	Quick     bool   `json:"quick"`
	BBuild    string `json:"b_build,omitempty"`    // directory of the B build, when compared
	RateOnly  bool   `json:"rate_only,omitempty"`  // only the fixed-rate part ran (-rate-only)
	SurgeOnly bool   `json:"surge_only,omitempty"` // only the overload surge ran (-surge-only)
}

// ScenarioResult is one scenario's rows, one per target.
type ScenarioResult struct {
	Name  string `json:"name"`
	Title string `json:"title"`
	Rows  []Row  `json:"rows"`
}

// Row is one target in one scenario: every run, and their medians.
type Row struct {
	Target string `json:"target"`
	Label  string `json:"label"`
	Runs   []Run  `json:"runs"`
	// Medians over the runs.
	RPS                     float64            `json:"rps"`
	P50MS                   float64            `json:"p50_ms"`
	P99MS                   float64            `json:"p99_ms"`
	CPU                     map[string]float64 `json:"cpu_us_per_request"`
	BusyPct                 float64            `json:"busy_pct"`
	StealPct                float64            `json:"steal_pct"`
	DecisionsPerRoundTrip   float64            `json:"decisions_per_round_trip,omitempty"`
	RoundTripsPerRequest    float64            `json:"round_trips_per_request,omitempty"`
	ClaimsAlonePerRequest   float64            `json:"claims_alone_per_request,omitempty"`
	FinishRunsPerRequest    float64            `json:"finish_runs_per_request,omitempty"`
	RedisCallsPerRequest    float64            `json:"redis_calls_per_request,omitempty"`
	RedisCommandsPerRequest float64            `json:"redis_commands_per_request,omitempty"`
	// Errors is the sum over the runs.
	Errors int64 `json:"errors"`
}

// Run is one measured wrk run.
type Run struct {
	Round                 int                `json:"round"`
	Requests              int64              `json:"requests"`
	RPS                   float64            `json:"rps"`
	P50MS                 float64            `json:"p50_ms"`
	P90MS                 float64            `json:"p90_ms"`
	P99MS                 float64            `json:"p99_ms"`
	MaxMS                 float64            `json:"max_ms"`
	CPU                   map[string]float64 `json:"cpu_us_per_request"`
	BusyPct               float64            `json:"busy_pct"`
	StealPct              float64            `json:"steal_pct"`
	Errors                int64              `json:"errors"`
	StatusErrors          int64              `json:"status_errors"`
	DecisionsPerRoundTrip float64            `json:"decisions_per_round_trip,omitempty"`
	// RoundTripsPerRequest is the limit store's round trips (which carry
	// the claims riding with the limits) per request.
	RoundTripsPerRequest float64 `json:"round_trips_per_request,omitempty"`
	// ClaimsAlonePerRequest is duplicate protection's claims sent in a
	// round trip of their own, not riding with the limits, per request.
	ClaimsAlonePerRequest float64 `json:"claims_alone_per_request,omitempty"`
	// FinishRunsPerRequest is duplicate protection's finish runs (a
	// response recorded, a claim released or marked unknown) per
	// request, sent after the backend has answered in pipelined round
	// trips of their own.
	FinishRunsPerRequest float64 `json:"finish_runs_per_request,omitempty"`
	RedisCallsPerRequest float64 `json:"redis_calls_per_request,omitempty"`
	// RedisCommandsPerRequest is Redis's total_commands_processed over
	// the run, per request (a pipeline's commands count one each).
	RedisCommandsPerRequest float64 `json:"redis_commands_per_request,omitempty"`
}

// Profile is the pprof summary of one exgate under load.
type Profile struct {
	Target       string  `json:"target"`
	RPS          float64 `json:"rps"`
	CPUTop       string  `json:"cpu_top"`
	CPUCum       string  `json:"cpu_cum"`
	AllocTop     string  `json:"alloc_space_top"`
	AllocObjects string  `json:"alloc_objects_top"`
}

// served is the share of a run's completed requests answered with the
// scenario's status: wrk counts a refusal (a 503 from exgate's overload
// limit, a 429) as a completed request, yet it places no order.
func (x Run) served() float64 {
	if x.Requests <= 0 || x.StatusErrors <= 0 || x.StatusErrors >= x.Requests {
		return 1
	}
	return float64(x.Requests-x.StatusErrors) / float64(x.Requests)
}

// servedRPS is the run's rate of requests answered with the scenario's
// status.
func (x Run) servedRPS() float64 { return x.RPS * x.served() }

// summarize fills the row's medians from its runs. req/s and CPU per
// request count only the requests answered with the scenario's status.
func (r *Row) summarize() {
	pick := func(f func(Run) float64) float64 {
		v := make([]float64, len(r.Runs))
		for i, run := range r.Runs {
			v[i] = f(run)
		}
		return median(v)
	}
	r.RPS = pick(Run.servedRPS)
	r.P50MS = pick(func(x Run) float64 { return x.P50MS })
	r.P99MS = pick(func(x Run) float64 { return x.P99MS })
	r.BusyPct = pick(func(x Run) float64 { return x.BusyPct })
	r.StealPct = pick(func(x Run) float64 { return x.StealPct })
	r.DecisionsPerRoundTrip = pick(func(x Run) float64 { return x.DecisionsPerRoundTrip })
	r.RoundTripsPerRequest = pick(func(x Run) float64 { return x.RoundTripsPerRequest })
	r.ClaimsAlonePerRequest = pick(func(x Run) float64 { return x.ClaimsAlonePerRequest })
	r.FinishRunsPerRequest = pick(func(x Run) float64 { return x.FinishRunsPerRequest })
	r.RedisCallsPerRequest = pick(func(x Run) float64 { return x.RedisCallsPerRequest })
	r.RedisCommandsPerRequest = pick(func(x Run) float64 { return x.RedisCommandsPerRequest })
	r.CPU = map[string]float64{}
	for _, role := range roles() {
		r.CPU[role] = pick(func(x Run) float64 { return x.CPU[role] / x.served() })
	}
	r.Errors = 0
	for _, run := range r.Runs {
		r.Errors += run.Errors
	}
}

// median returns the median of v (the mean of the middle two for an even
// count), or 0 for none.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// row returns the named target's row of the named scenario, or nil.
func (res *Results) row(scenario, target string) *Row {
	for i := range res.Scenarios {
		if res.Scenarios[i].Name != scenario {
			continue
		}
		for j := range res.Scenarios[i].Rows {
			if res.Scenarios[i].Rows[j].Target == target {
				return &res.Scenarios[i].Rows[j]
			}
		}
	}
	return nil
}

func writeResults(res *Results, path string) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func readResults(path string) (*Results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var res Results
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, err
	}
	// The medians are derived again from the runs, so that a report is
	// rendered by the rules of this benchrun.
	for i := range res.Scenarios {
		for j := range res.Scenarios[i].Rows {
			res.Scenarios[i].Rows[j].summarize()
		}
	}
	return &res, nil
}
