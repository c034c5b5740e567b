package main

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// rateTargets are the targets of the fixed-rate run, direct first (the
// latency every other is compared with). exgate with Redis limits is
// judged against the ReverseProxy floor (issue 36); NGINX and Caddy are
// reported; the net/http floor proxy and exgate with limits off split
// exgate's added tail into what net/http itself costs (floor against
// NGINX), what ReverseProxy adds (the ReverseProxy floor against the
// net/http one), what exgate's own request path costs (off against the
// ReverseProxy floor) and what its limits cost (Redis against off). With
// -b-bins, each exgate target is followed by its B build's.
func rateTargets() []string {
	return []string{tDirect, tNginx, tCaddy, tFloor, tFloorRP, tExgateOff, tExgateOff + bSuffix, tExgateRedis, tExgateRedis + bSuffix}
}

// FixedRate is the open-loop run: GET markets at a fixed request rate,
// held by vegeta whatever the latency, so that the latency a proxy adds
// is not hidden by a closed loop slowing down. The rate is one every
// target compared serves with the machine to spare (a quarter of the
// slowest one's capacity, fixedRateRule) and that vegeta itself holds on
// this machine (probed straight at the backend first): a rate a target,
// the load generator or the machine cannot keep up with measures a
// queue, not the latency added. With the load generator, the backend and
// the proxy sharing two CPUs, an open-loop request costs each of them
// more CPU than in the closed loop (every request wakes every process on
// its path): at half the slowest one's capacity the machine was 78–86%
// busy, and a proxy using a tenth more CPU than another showed two to
// three times its added p99, which the CPU targets judge already.
type FixedRate struct {
	Rate     float64     `json:"rate"` // requests per second
	Rule     string      `json:"rule"` // how Rate was chosen
	Duration string      `json:"duration"`
	Rounds   int         `json:"rounds"`
	Tool     string      `json:"tool"`
	Probes   []RateProbe `json:"probes,omitempty"`
	Rows     []RateRow   `json:"rows"`
}

// RateProbe is one calibration run of vegeta straight at the backend.
type RateProbe struct {
	Rate     float64 `json:"rate"`
	Achieved float64 `json:"achieved_rps"`
}

// Calibration of the fixed rate: vegeta is run straight at the backend
// for probeDuration; while it achieves less than heldShare of the rate,
// the rate is lowered to probeBackoff × what it achieved, at most
// maxProbes times.
const (
	probeDuration = 2 * time.Second
	heldShare     = 0.95
	probeBackoff  = 0.9
	maxProbes     = 3
	// busyVerdictPct is how busy the machine may have been during the
	// judged targets' rounds (at the median) for the verdict to stand:
	// above it the tail measured is the machine's queue.
	busyVerdictPct = 75
)

// fixedRateRule returns the rate of the open-loop run and how it was
// chosen: the -rate flag when set, else a quarter of the median req/s on
// GET markets of the slowest target run at the fixed rate besides direct
// (every one of them must serve the rate with the machine to spare). Half
// of NGINX's capacity (a rule before) was above Caddy's whole capacity;
// half of the slowest one's (the next) kept the machine 78–86% busy in
// the open loop (2026-11-28, 2 CPUs).
func fixedRateRule(res *Results, flagRate float64) (float64, string) {
	if flagRate > 0 {
		return flagRate, "set by -rate"
	}
	var slowest *Row
	for _, t := range rateTargets() {
		if r := res.row(scMarkets, t); t != tDirect && r != nil && r.RPS > 0 && (slowest == nil || r.RPS < slowest.RPS) {
			slowest = r
		}
	}
	if slowest == nil {
		return 0, ""
	}
	return slowest.RPS / 4, fmt.Sprintf("a quarter of the median req/s on GET markets of the slowest target compared (%s, %.0f req/s)", slowest.Label, slowest.RPS)
}

// RateRow is one target at the fixed rate: every run, and the medians.
type RateRow struct {
	Target string    `json:"target"`
	Label  string    `json:"label"`
	Runs   []RateRun `json:"runs"`
	// Medians over the runs, in milliseconds; Added* is the target's
	// latency minus direct's in the same round.
	P50MS       float64 `json:"p50_ms"`
	P99MS       float64 `json:"p99_ms"`
	P999MS      float64 `json:"p999_ms"`
	AddedP50MS  float64 `json:"added_p50_ms"`
	AddedP99MS  float64 `json:"added_p99_ms"`
	AddedP999MS float64 `json:"added_p999_ms"`
	Errors      int64   `json:"errors"`
	// BusyPct is the median of the runs' BusyPct.
	BusyPct float64 `json:"busy_pct"`
}

// RateRun is one vegeta run.
type RateRun struct {
	Round    int     `json:"round"`
	Requests int64   `json:"requests"`
	Achieved float64 `json:"achieved_rps"`
	P50MS    float64 `json:"p50_ms"`
	P99MS    float64 `json:"p99_ms"`
	P999MS   float64 `json:"p999_ms"`
	Errors   int64   `json:"errors"`
	// BusyPct is how busy the machine's CPUs were during the run, in
	// percent of all of them (every process, the load generator's too).
	BusyPct float64 `json:"busy_pct"`
	// Failed counts the errors by what came back: a status, or vegeta's
	// error when no answer did.
	Failed map[string]int64 `json:"failed,omitempty"`
}

// fixedRate runs the open-loop rounds at rate, interleaved like the
// closed-loop ones, and returns the results.
func (b *bench) fixedRate(ctx context.Context, rate float64, rule string) (*FixedRate, error) {
	vegeta, err := findTool(b.o.bins, "vegeta")
	if err != nil {
		return nil, err
	}
	fr := &FixedRate{Rate: rate, Rule: rule, Duration: b.o.rateDuration.String(), Rounds: b.o.rateRounds, Tool: "vegeta"}
	for _, name := range rateTargets() {
		if b.e.targets[name] != nil && (name == tDirect || selectedTarget(b.o.targets, name)) {
			fr.Rows = append(fr.Rows, RateRow{Target: name, Label: targetLabel(name)})
		}
	}
	if len(fr.Rows) == 0 || fr.Rows[0].Target != tDirect {
		return nil, errors.New("fixed rate: no direct target")
	}
	if err := b.calibrate(ctx, vegeta, fr); err != nil {
		return nil, err
	}
	logf("fixed rate: GET markets at %.0f req/s (%s), %d rounds of %v at %d targets",
		fr.Rate, fr.Rule, b.o.rateRounds, b.o.rateDuration, len(fr.Rows))
	rate = fr.Rate
	for _, row := range fr.Rows { // warm-up: connections opened, nothing recorded
		if _, err := b.attack(ctx, vegeta, b.e.targets[row.Target], rate, time.Second); err != nil {
			return nil, err
		}
	}
	for r := range b.o.rateRounds {
		order := make([]int, len(fr.Rows))
		for i := range order {
			order[i] = i
		}
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, i := range order {
			row := &fr.Rows[i]
			run, err := b.attack(ctx, vegeta, b.e.targets[row.Target], rate, b.o.rateDuration)
			if err != nil {
				return nil, err
			}
			run.Round = r + 1
			row.Runs = append(row.Runs, run)
			logf("fixed rate round %d/%d %-14s %7.0f req/s  p50 %6.2f ms  p99 %6.2f ms  p99.9 %6.2f ms  errors %d  machine %.0f%% busy",
				r+1, b.o.rateRounds, row.Target, run.Achieved, run.P50MS, run.P99MS, run.P999MS, run.Errors, run.BusyPct)
		}
	}
	fr.summarize()
	return fr, nil
}

// calibrate runs vegeta straight at the backend at fr.Rate and lowers
// the rate until vegeta holds it (heldShare), so that a target found
// behind the rate is behind itself, not behind the load generator.
func (b *bench) calibrate(ctx context.Context, vegeta string, fr *FixedRate) error {
	direct := b.e.targets[tDirect]
	for range maxProbes {
		run, err := b.attack(ctx, vegeta, direct, fr.Rate, probeDuration)
		if err != nil {
			return err
		}
		fr.Probes = append(fr.Probes, RateProbe{Rate: fr.Rate, Achieved: run.Achieved})
		logf("fixed rate: vegeta straight at the backend at %.0f req/s achieved %.0f", fr.Rate, run.Achieved)
		if run.Achieved >= heldShare*fr.Rate {
			return nil
		}
		fr.Rate = probeBackoff * run.Achieved
		fr.Rule += fmt.Sprintf("; lowered to %.0f%% of the %.0f req/s vegeta held straight at the backend", probeBackoff*100, run.Achieved)
	}
	return nil
}

// summarize fills the medians; the added latencies are taken per round
// (a target against direct in the same round), then their median.
func (fr *FixedRate) summarize() {
	direct := fr.Rows[0].Runs
	for i := range fr.Rows {
		row := &fr.Rows[i]
		var p50, p99, p999, a50, a99, a999, busy []float64
		row.Errors = 0
		for j, run := range row.Runs {
			p50, p99, p999 = append(p50, run.P50MS), append(p99, run.P99MS), append(p999, run.P999MS)
			busy = append(busy, run.BusyPct)
			if j < len(direct) {
				d := direct[j]
				a50, a99, a999 = append(a50, run.P50MS-d.P50MS), append(a99, run.P99MS-d.P99MS), append(a999, run.P999MS-d.P999MS)
			}
			row.Errors += run.Errors
		}
		row.P50MS, row.P99MS, row.P999MS = median(p50), median(p99), median(p999)
		row.AddedP50MS, row.AddedP99MS, row.AddedP999MS = median(a50), median(a99), median(a999)
		row.BusyPct = median(busy)
	}
}

// selectedTarget reports whether -targets (comma-separated; empty: all)
// names target, or the A build of a B target it names.
func selectedTarget(targets, target string) bool {
	if targets == "" {
		return true
	}
	base, _ := strings.CutSuffix(target, bSuffix)
	return slices.Contains(strings.Split(targets, ","), base)
}

// p99Spread returns the lower and upper quartiles of the row's runs'
// p99s (nearest rank): the middle half of the rounds, which a stall of
// the machine in one round does not move, as it does not move the
// medians the verdict judges.
func (r *RateRow) p99Spread() (lo, hi float64) {
	v := make([]float64, 0, len(r.Runs))
	for _, run := range r.Runs {
		v = append(v, run.P99MS)
	}
	slices.Sort(v)
	return quantile(v, 0.25), quantile(v, 0.75)
}

// achieved returns the row's median achieved rate.
func (r *RateRow) achieved() float64 {
	var v []float64
	for _, run := range r.Runs {
		v = append(v, run.Achieved)
	}
	return median(v)
}

// held reports whether the row's median achieved rate is within 5% of the
// rate asked for.
func (fr *FixedRate) held(r *RateRow) bool { return r.achieved() >= heldShare*fr.Rate }

// row returns the named target's row, or nil.
func (fr *FixedRate) row(target string) *RateRow {
	if fr == nil {
		return nil
	}
	for i := range fr.Rows {
		if fr.Rows[i].Target == target {
			return &fr.Rows[i]
		}
	}
	return nil
}

// attack runs vegeta at t's GET markets for d at rate and reads every
// result.
func (b *bench) attack(ctx context.Context, vegeta string, t *target, rate float64, d time.Duration) (RateRun, error) {
	sys0, _ := readSysCPU()
	run, err := b.vegeta(ctx, vegeta, "GET "+t.url+"/api/v1/mkt/markets/", nil, 200, rate, d)
	if err != nil {
		return RateRun{}, fmt.Errorf("%s: %w", t.name, err)
	}
	sys1, _ := readSysCPU()
	run.BusyPct, _ = sys0.sharesUntil(sys1)
	return run, nil
}

// parseVegetaCSV reads vegeta's CSV results (timestamp, status, latency in
// ns, …) into exact percentiles over every request of a run of length d;
// an answer with another status than want, or none, is an error.
func parseVegetaCSV(r io.Reader, want int, d time.Duration) (RateRun, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	var lat []float64
	var run RateRun
	ok := strconv.Itoa(want)
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return RateRun{}, fmt.Errorf("vegeta csv: %w", err)
		}
		if len(rec) < 6 {
			return RateRun{}, fmt.Errorf("vegeta csv: %d fields", len(rec))
		}
		ns, err := strconv.ParseInt(rec[2], 10, 64)
		if err != nil {
			return RateRun{}, fmt.Errorf("vegeta csv latency %q: %w", rec[2], err)
		}
		run.Requests++
		if rec[1] != ok || rec[5] != "" {
			run.Errors++
			if run.Failed == nil {
				run.Failed = map[string]int64{}
			}
			what := "status " + rec[1]
			if rec[5] != "" {
				what = rec[5]
			}
			if _, seen := run.Failed[what]; !seen && len(run.Failed) >= maxFailedKinds {
				what = "other"
			}
			run.Failed[what]++
		}
		lat = append(lat, float64(ns)/1e6)
	}
	if run.Requests == 0 {
		return RateRun{}, errors.New("vegeta: no results")
	}
	slices.Sort(lat)
	run.P50MS, run.P99MS, run.P999MS = quantile(lat, 0.50), quantile(lat, 0.99), quantile(lat, 0.999)
	run.Achieved = float64(run.Requests) / d.Seconds()
	return run, nil
}

// maxFailedKinds bounds RateRun.Failed: vegeta's error texts name the
// connection, so a run of refused dials would list each one.
const maxFailedKinds = 8

// quantile returns the q-quantile of sorted (nearest rank), or 0.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// findTool returns the path of a load tool: in the binaries directory
// (make bench builds vegeta there) or on PATH.
func findTool(bins, name string) (string, error) {
	if p := filepath.Join(bins, name); fileExists(p) {
		return p, nil
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s not found in %s or on PATH (go install github.com/tsenart/vegeta/v12@v12.13.0)", name, bins)
	}
	return p, nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
