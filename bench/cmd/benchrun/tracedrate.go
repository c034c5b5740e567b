package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// TracedRate is issue 34's target measured at a fixed rate: exgate with
// Redis limits, tracing off and on (1% of requests sampled), each sent GET
// markets and POST orders by vegeta at the same rate in interleaved
// rounds, with the CPU exgate and Redis spend per request read from /proc
// around each run.
//
// The closed loop (wrk) cannot judge a 5% difference: a target serves as
// many requests as it gets CPU for on a machine it shares with the load
// generator, the backend and Redis, so a round where one target got less
// of the machine serves fewer requests and spreads the same fixed costs
// (the runtime, the timers, the idle connections' polling) over fewer of
// them. At a fixed rate below both targets' capacity, both serve the same
// requests and CPU per request compares the work they do for them.
type TracedRate struct {
	Duration  string           `json:"duration"`
	Rounds    int              `json:"rounds"`
	Tool      string           `json:"tool"`
	Scenarios []TracedScenario `json:"scenarios"`
}

// TracedScenario is one scenario of the traced comparison: its rate, how
// it was chosen, and every run of both targets.
type TracedScenario struct {
	Name  string      `json:"name"`
	Label string      `json:"label"`
	Rate  float64     `json:"rate"` // requests per second
	Rule  string      `json:"rule"`
	Off   []TracedRun `json:"off"` // exgate with Redis limits, tracing off
	On    []TracedRun `json:"on"`  // the same, tracing on at 1%

	def *scenario // the closed loop's scenario of that name: its request and status
}

// TracedRun is one vegeta run at one target.
type TracedRun struct {
	Round    int     `json:"round"`
	Requests int64   `json:"requests"`
	Achieved float64 `json:"achieved_rps"`
	Errors   int64   `json:"errors"`
	// Failed counts the errors by status, or vegeta's error.
	Failed map[string]int64 `json:"failed,omitempty"`
	// CPU is exgate's and Redis's CPU per request, in microseconds.
	CPU float64 `json:"cpu_us_per_request"`
}

// tracedRule returns the traced comparison's rate for a scenario and how
// it was chosen: the -traced-rate flag when set, else half of the slower
// of the two targets' median req/s in the closed loop, so that both serve
// it with room to spare; 0 when neither is known.
func tracedRule(res *Results, scenario string, flagRate float64) (float64, string) {
	if flagRate > 0 {
		return flagRate, "set by -traced-rate"
	}
	off, on := res.row(scenario, tExgateRedis), res.row(scenario, tExgateTraced)
	if off == nil || on == nil || off.RPS <= 0 || on.RPS <= 0 {
		return 0, ""
	}
	slower := off
	if on.RPS < off.RPS {
		slower = on
	}
	return slower.RPS / 2, fmt.Sprintf("half of the slower target's median req/s in the closed loop (%s, %.0f req/s)", slower.Label, slower.RPS)
}

// tracedRate runs the traced comparison: a one-second warm-up of each
// target and scenario, then rounds in which each scenario runs at both
// targets, off first in odd rounds (counted from 1) and on first in even ones.
func (b *bench) tracedRate(ctx context.Context, res *Results) (*TracedRate, error) {
	vegeta, err := findTool(b.o.bins, "vegeta")
	if err != nil {
		return nil, err
	}
	tr := &TracedRate{Duration: b.o.rateDuration.String(), Rounds: b.o.tracedRounds, Tool: "vegeta"}
	defs := scenarios()
	for _, sc := range getAndPost {
		if !selectedScenario(b.o.only, sc.name) {
			continue
		}
		i := slices.IndexFunc(defs, func(d *scenario) bool { return d.name == sc.name })
		if rate, rule := tracedRule(res, sc.name, b.o.tracedRate); rate > 0 {
			tr.Scenarios = append(tr.Scenarios, TracedScenario{Name: sc.name, Label: sc.label, Rate: rate, Rule: rule, def: defs[i]})
		} else {
			logf("traced at a fixed rate: %s skipped (a target not measured in the closed loop, and -traced-rate is 0)", sc.label)
		}
	}
	if len(tr.Scenarios) == 0 {
		return nil, nil
	}
	body := filepath.Join(b.o.work, "traced-order.json")
	if err := os.WriteFile(body, []byte(orderBody), 0o644); err != nil {
		return nil, err
	}
	off, on := b.e.targets[tExgateRedis], b.e.targets[tExgateTraced]
	for i := range tr.Scenarios {
		for _, t := range []*target{off, on} {
			if _, err := b.tracedRun(ctx, vegeta, &tr.Scenarios[i], t, body, time.Second); err != nil {
				return nil, err
			}
		}
	}
	for r := range tr.Rounds {
		for i := range tr.Scenarios {
			sc := &tr.Scenarios[i]
			pair := []*target{off, on}
			if r%2 == 1 {
				pair = []*target{on, off}
			}
			for _, t := range pair {
				run, err := b.tracedRun(ctx, vegeta, sc, t, body, b.o.rateDuration)
				if err != nil {
					return nil, err
				}
				run.Round = r + 1
				if t == on {
					sc.On = append(sc.On, run)
				} else {
					sc.Off = append(sc.Off, run)
				}
				logf("traced at a fixed rate, round %d/%d %-12s %-14s %7.0f req/s  exgate and Redis %6.1f µs/req  errors %d%s",
					r+1, tr.Rounds, sc.Name, t.name, run.Achieved, run.CPU, run.Errors, fmtFailed(run.Failed))
			}
		}
	}
	return tr, nil
}

// tracedRun sends sc's requests to t at sc.Rate for d and measures the
// CPU exgate and Redis spend around it.
func (b *bench) tracedRun(ctx context.Context, vegeta string, sc *TracedScenario, t *target, body string, d time.Duration) (TracedRun, error) {
	line, header := sc.def.method+" "+t.url+sc.def.path, []string(nil)
	if sc.def.method == "POST" {
		line += "\n@" + body
		header = []string{"Content-Type: application/json", "Authorization: Bearer " + b.token}
	}
	p0, r0 := groupCPU(t.proxy.pid()), groupCPU(b.e.redis.pid())
	run, err := b.vegeta(ctx, vegeta, line, header, sc.def.want, sc.Rate, d)
	if err != nil {
		return TracedRun{}, fmt.Errorf("traced at a fixed rate, %s at %s: %w", sc.Name, t.name, err)
	}
	p1, r1 := groupCPU(t.proxy.pid()), groupCPU(b.e.redis.pid())
	return TracedRun{
		Requests: run.Requests, Achieved: run.Achieved, Errors: run.Errors, Failed: run.Failed,
		CPU: float64((p1 - p0 + r1 - r0).Microseconds()) / float64(run.Requests),
	}, nil
}

// selectedScenario reports whether -scenarios (comma-separated; empty:
// all) names scenario.
func selectedScenario(only, scenario string) bool {
	return only == "" || slices.Contains(strings.Split(only, ","), scenario)
}

// tracedRound is one round of the traced comparison: both targets' runs, and
// why the round cannot be compared ("" when it can).
type tracedRound struct {
	off, on TracedRun
	flaw    string
}

// maxFailedShare is the share of a run's requests that may fail (exgate's
// overload limit sheds a few when the shared machine stalls it) with the
// round still compared: a failed request costs less CPU than one served,
// so it lowers its run's CPU per request by less than its share, well
// within the 5% the target allows.
const maxFailedShare = 0.01

// rounds returns the rounds both targets ran. A round in which a target
// fell behind the rate or failed more than maxFailedShare of its requests
// is flawed: its CPU per request was spent on another load than the other
// target's.
func (sc *TracedScenario) rounds() []tracedRound {
	var rs []tracedRound
	for _, on := range sc.On {
		for _, off := range sc.Off {
			if off.Round != on.Round {
				continue
			}
			var flaws []string
			for _, side := range []struct {
				name string
				run  TracedRun
			}{{"off", off}, {"on", on}} {
				if side.run.Achieved < heldShare*sc.Rate {
					flaws = append(flaws, fmt.Sprintf("tracing %s achieved %.0f of %.0f req/s", side.name, side.run.Achieved, sc.Rate))
				}
				if float64(side.run.Errors) > maxFailedShare*float64(side.run.Requests) {
					flaws = append(flaws, fmt.Sprintf("tracing %s had %d of %d requests fail%s", side.name, side.run.Errors, side.run.Requests, fmtFailed(side.run.Failed)))
				}
			}
			if off.CPU <= 0 || on.CPU <= 0 {
				flaws = append(flaws, "no CPU measured")
			}
			rs = append(rs, tracedRound{off: off, on: on, flaw: strings.Join(flaws, ", ")})
		}
	}
	return rs
}

// ratios returns the on ÷ off CPU ratio of every round that can be
// compared.
func (sc *TracedScenario) ratios() []float64 {
	var rs []float64
	for _, r := range sc.rounds() {
		if r.flaw == "" {
			rs = append(rs, r.on.CPU/r.off.CPU)
		}
	}
	return rs
}

// medianCPU returns the median CPU per request of runs.
func medianCPU(runs []TracedRun) float64 {
	var v []float64
	for _, r := range runs {
		v = append(v, r.CPU)
	}
	return median(v)
}

// verdict judges the scenario by the median of the per-round ratios of
// the rounds that can be compared, with the rounds that met the goal and
// those left out; it is inconclusive when fewer than half the rounds can
// be compared.
func (sc *TracedScenario) verdict() string {
	var left []string
	all := sc.rounds()
	for _, r := range all {
		if r.flaw != "" {
			left = append(left, fmt.Sprintf("round %d: %s", r.on.Round, r.flaw))
		}
	}
	rs := sc.ratios()
	if len(rs) == 0 || 2*len(rs) < len(all) {
		return "**inconclusive**: " + strings.Join(left, "; ")
	}
	v := metCPU(median(rs), goalCPUTraced, rs)
	if len(left) > 0 {
		v += "; left out: " + strings.Join(left, "; ")
	}
	return v
}

// fmtFailed lists what failed requests got back (" (status 503 ×3)"),
// or "" for none.
func fmtFailed(failed map[string]int64) string {
	if len(failed) == 0 {
		return ""
	}
	var parts []string
	for what, n := range failed {
		parts = append(parts, fmt.Sprintf("%s ×%d", what, n))
	}
	slices.Sort(parts)
	return " (" + strings.Join(parts, ", ") + ")"
}

// tracedRateTargets writes the traced comparison's lines of the targets
// table.
func tracedRateTargets(p func(string, ...any), tr *TracedRate) {
	if tr == nil {
		return
	}
	for i := range tr.Scenarios {
		sc := &tr.Scenarios[i]
		p("| %s at a fixed %.0f req/s: exgate with Redis limits, tracing on at 1%% ÷ off, CPU per request (exgate and Redis %.1f ÷ %.1f µs) | %s | ≤ %.2f× | %s |\n",
			sc.Label, sc.Rate, medianCPU(sc.On), medianCPU(sc.Off), fmtRatio(median(sc.ratios())), goalCPUTraced, sc.verdict())
	}
}

// traced returns the traced comparison's scenario of that name, or nil.
func (tr *TracedRate) traced(name string) *TracedScenario {
	if tr == nil {
		return nil
	}
	for i := range tr.Scenarios {
		if tr.Scenarios[i].Name == name {
			return &tr.Scenarios[i]
		}
	}
	return nil
}

// tracedRateSection writes every run of the traced comparison, round by
// round.
func tracedRateSection(p func(string, ...any), tr *TracedRate) {
	if tr == nil {
		return
	}
	p("## Tracing at a fixed rate (open loop, %s)\n\n", tr.Tool)
	p("exgate with Redis limits, tracing off and on (1%% of requests sampled, spans exported over OTLP/HTTP to a sink in benchrun), "+
		"sent the same requests at the same rate by `vegeta attack -rate` for %s, %d rounds, off first in odd rounds and on first in even ones. "+
		"CPU is exgate's and Redis's per request sent, read from /proc around each run.\n\n", tr.Duration, tr.Rounds)
	for i := range tr.Scenarios {
		sc := &tr.Scenarios[i]
		p("%s at %.0f req/s (%s):\n\n", sc.Label, sc.Rate, sc.Rule)
		p("| round | off µs/req | on µs/req | on ÷ off | achieved req/s, off / on | errors, off / on | left out |\n|--:|--:|--:|--:|--:|--:|---|\n")
		for _, r := range sc.rounds() {
			p("| %d | %.1f | %.1f | %s | %.0f / %.0f | %d / %d | %s |\n", r.on.Round, r.off.CPU, r.on.CPU, fmtRatio(div(r.on.CPU, r.off.CPU)),
				r.off.Achieved, r.on.Achieved, r.off.Errors, r.on.Errors, r.flaw)
		}
		p("\n")
	}
}
