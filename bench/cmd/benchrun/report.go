package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Targets (issue 12, as decided in issue 36) on the 2-core machine:
// ratios within one run, each the median of the per-round ratios of the
// interleaved rounds.
const (
	goalVsCaddy      = 1.5  // exgate with Redis limits ÷ Caddy, req/s, GET markets and POST orders, at least
	goalCPUVsCaddy   = 0.67 // exgate with Redis limits ÷ Caddy, CPU per request, both, at most
	goalCPUVsFloorRP = 1.15 // exgate with Redis limits ÷ the ReverseProxy floor, CPU per request, both, at most
	goalManyKeys     = 0.85 // many keys: Redis limits on ÷ off, req/s, at least
	goalAddedP99     = 1.3  // fixed rate: exgate's added p99 ÷ the ReverseProxy floor's, at most
	goalCPUTraced    = 1.05 // exgate with Redis limits, tracing on at 1% ÷ off, CPU per request, exgate and Redis, at most (issue 34)
)

// writeReport writes latest.md and latest.png into dir.
func writeReport(res *Results, dir string) error {
	if err := os.WriteFile(filepath.Join(dir, "latest.md"), []byte(markdown(res)), 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "latest.png"))
	if err != nil {
		return err
	}
	if err := drawChart(f, res); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// allCPU returns the CPU time every process spent per request of the row.
func allCPU(r *Row) float64 {
	if r == nil {
		return 0
	}
	all := 0.0
	for _, role := range roles() {
		all += r.CPU[role]
	}
	return all
}

// cpuRatio returns the throughput ratio a/b that the CPU per request
// implies on a CPU-bound machine (b's total CPU per request ÷ a's), or 0.
func cpuRatio(a, b *Row) float64 {
	if allCPU(a) == 0 || allCPU(b) == 0 {
		return 0
	}
	return allCPU(b) / allCPU(a)
}

// getAndPost are the scenarios the req/s targets against Caddy and the
// floors are stated for, with their labels.
var getAndPost = []struct{ name, label string }{{scMarkets, "GET markets"}, {scOrders, "POST orders"}}

// roundRatios returns the range of a's req/s over b's in the rounds both
// ran, round by round ("1.05–1.38×"), or "–": the targets run
// interleaved, so each round's pair shared the machine's state, and the
// range says how far the ratio of the medians can be trusted on a noisy
// machine.
func roundRatios(a, b *Row) string {
	rs := perRound(a, b)
	if len(rs) == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f–%.2f×", slices.Min(rs), slices.Max(rs))
}

// roundsMeeting returns in how many of the rounds both a and b ran a's
// req/s over b's reached goal, and how many such rounds there were.
func roundsMeeting(a, b *Row, goal float64) (met, rounds int) {
	rs := perRound(a, b)
	for _, v := range rs {
		if v >= goal {
			met++
		}
	}
	return met, len(rs)
}

// perRound returns a's req/s over b's in each round both ran (b with
// req/s above 0), or nothing when either row is missing.
func perRound(a, b *Row) []float64 {
	return perRoundOf(a, b, func(x, y Run) (float64, bool) { return x.servedRPS() / y.servedRPS(), y.servedRPS() > 0 })
}

// perRoundCPU returns, in each round both ran, a's CPU per request of
// the roles ra over b's of the roles rb (each per request answered with
// the scenario's status).
func perRoundCPU(a, b *Row, ra, rb []string) []float64 {
	return perRoundOf(a, b, func(x, y Run) (float64, bool) {
		cx, cy := runCPU(x, ra), runCPU(y, rb)
		return cx / cy, cx > 0 && cy > 0
	})
}

// perRoundOf returns f of a's and b's runs of each round both ran, where
// f says it has a value.
func perRoundOf(a, b *Row, f func(x, y Run) (float64, bool)) []float64 {
	if a == nil || b == nil {
		return nil
	}
	var rs []float64
	for _, x := range a.Runs {
		for _, y := range b.Runs {
			if x.Round != y.Round {
				continue
			}
			if v, ok := f(x, y); ok {
				rs = append(rs, v)
			}
		}
	}
	return rs
}

// runCPU is a run's CPU per request answered with the scenario's status,
// summed over roles.
func runCPU(x Run, roles []string) float64 {
	c := 0.0
	for _, r := range roles {
		c += x.CPU[r]
	}
	return c / x.served()
}

// ratio returns the median of a's req/s over b's, round by round, or
// the ratio of their medians when they ran in no common round, or 0
// when either is missing.
func ratio(a, b *Row) float64 {
	if rs := perRound(a, b); len(rs) > 0 {
		return median(rs)
	}
	if a == nil || b == nil || b.RPS == 0 {
		return 0
	}
	return a.RPS / b.RPS
}

func fmtRatio(v float64) string {
	if v == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", v)
}

func met(v, goal float64) string {
	if v == 0 {
		return "not measured"
	}
	if v >= goal {
		return "**met**"
	}
	return "**missed**"
}

// failedShare returns the share of r's completed requests not answered
// with the scenario's status, over its runs, or 0.
func failedShare(r *Row) float64 {
	if r == nil {
		return 0
	}
	var n, bad int64
	for _, run := range r.Runs {
		n += run.Requests
		bad += run.StatusErrors
	}
	if n == 0 {
		return 0
	}
	return float64(bad) / float64(n)
}

// metServed is met for a req/s ratio of a to b, saying in how many
// rounds the goal was reached and how many answers of either were
// refusals (not counted in its req/s).
func metServed(v, goal float64, a, b *Row) string {
	verdict := met(v, goal)
	if k, n := roundsMeeting(a, b, goal); n > 1 && v != 0 {
		verdict += fmt.Sprintf(" (met in %d of %d rounds)", k, n)
	}
	for _, r := range []*Row{a, b} {
		if f := failedShare(r); f > 0 && v != 0 {
			verdict += fmt.Sprintf(" (%.1f%% of the answers of %s were refusals, not counted)", 100*f, targetLabel(r.Target))
		}
	}
	return verdict
}

// metCPU is metAtMost for the median v of the per-round CPU ratios rs,
// saying in how many rounds the goal was reached.
func metCPU(v, goal float64, rs []float64) string {
	verdict := metAtMost(v, goal)
	if len(rs) > 1 && v != 0 {
		k := 0
		for _, x := range rs {
			if x <= goal {
				k++
			}
		}
		verdict += fmt.Sprintf(" (met in %d of %d rounds)", k, len(rs))
	}
	return verdict
}

// metAtMost is met for a figure that must not exceed goal.
func metAtMost(v, goal float64) string {
	if v == 0 {
		return "not measured"
	}
	if v <= goal {
		return "**met**"
	}
	return "**missed**"
}

// cpuOf returns the row's CPU per request of role, or 0.
func cpuOf(r *Row, role string) float64 {
	if r == nil {
		return 0
	}
	return r.CPU[role]
}

// div returns a/b, or 0 when either is 0.
func div(a, b float64) float64 {
	if a == 0 || b == 0 {
		return 0
	}
	return a / b
}

// targetsTable writes the targets (issue 12, as decided in issue 36),
// each as measured in this run, then reference lines without a target.
func targetsTable(p func(string, ...any), res *Results) {
	p("## Targets (issues 12 and 36), ratios within this run\n\n")
	p("| | measured | goal | |\n|---|--:|---|---|\n")
	if res.Settings.RateOnly || res.Settings.SurgeOnly {
		if res.FixedRate != nil {
			fixedRateTarget(p, res.FixedRate)
		}
		tracedRateTargets(p, res.Traced)
		surgeTargets(p, res.Surge)
		p("\n")
		return
	}
	withRedis, alone := []string{roleProxy, roleRedis}, []string{roleProxy}
	for _, sc := range getAndPost {
		e, c := res.row(sc.name, tExgateRedis), res.row(sc.name, tCaddy)
		v := ratio(e, c)
		p("| %s: exgate with Redis limits ÷ Caddy, req/s (round by round: %s) | %s | ≥ %.1f× | %s |\n", sc.label,
			roundRatios(e, c), fmtRatio(v), goalVsCaddy, metServed(v, goalVsCaddy, e, c))
		rs := perRoundCPU(e, c, withRedis, alone)
		p("| %s: exgate with Redis limits ÷ Caddy, CPU per request (exgate and Redis %.1f µs ÷ Caddy %.1f µs) | %s | ≤ %.2f× | %s |\n", sc.label,
			cpuOf(e, roleProxy)+cpuOf(e, roleRedis), cpuOf(c, roleProxy), fmtRatio(median(rs)), goalCPUVsCaddy, metCPU(median(rs), goalCPUVsCaddy, rs))
	}
	for _, sc := range getAndPost {
		e, f := res.row(sc.name, tExgateRedis), res.row(sc.name, tFloorRP)
		rs := perRoundCPU(e, f, withRedis, alone)
		p("| %s: exgate with Redis limits ÷ ReverseProxy floor, CPU per request (exgate and Redis %.1f µs ÷ the floor %.1f µs; exgate's process alone: %s) | %s | ≤ %.2f× | %s |\n", sc.label,
			cpuOf(e, roleProxy)+cpuOf(e, roleRedis), cpuOf(f, roleProxy), fmtRatio(median(perRoundCPU(e, f, alone, alone))),
			fmtRatio(median(rs)), goalCPUVsFloorRP, metCPU(median(rs), goalCPUVsFloorRP, rs))
	}
	tracedTargets(p, res, withRedis)
	on, off := res.row(scManyKeys, tExgateRedis), res.row(scManyKeys, tExgateOff)
	v := ratio(on, off)
	p("| many keys: exgate Redis limits on ÷ off, req/s (by CPU per request: %s; round by round: %s) | %s | ≥ %.2f× | %s |\n",
		fmtRatio(cpuRatio(on, off)), roundRatios(on, off), fmtRatio(v), goalManyKeys, metServed(v, goalManyKeys, on, off))
	if res.FixedRate != nil {
		fixedRateTarget(p, res.FixedRate)
	}
	surgeTargets(p, res.Surge)
	identifiedOrderTrips(p, res.row(scOrdersID, tExgateRedis))
	referenceLines(p, res)
	p("\n")
}

// referenceLines writes the figures the report keeps without a target:
// what each layer between the floors and exgate costs, the order work,
// the backend's work behind exgate and NGINX with limit_req.
func referenceLines(p func(string, ...any), res *Results) {
	for _, sc := range getAndPost {
		e, f := res.row(sc.name, tExgateOff), res.row(sc.name, tFloor)
		p("| reference: %s: exgate limits off ÷ net/http floor proxy, req/s (by CPU per request: %s; round by round: %s) | %s | (no target) | |\n", sc.label,
			fmtRatio(cpuRatio(e, f)), roundRatios(e, f), fmtRatio(ratio(e, f)))
	}
	floorLayers(p, res)
	floorVsCaddy(p, res)
	for _, t := range []string{tExgateOff, tExgateRedis} {
		o, g := cpuOf(res.row(scOrders, t), roleProxy), cpuOf(res.row(scMarkets, t), roleProxy)
		p("| reference: %s: proxy CPU per order ÷ per GET (%.1f ÷ %.1f µs) | %s | (no target) | |\n", targetLabel(t), o, g, fmtRatio(div(o, g)))
	}
	n := cpuOf(res.row(scOrders, tNginx), roleBackend)
	for _, t := range []string{tExgateOff, tExgateRedis} {
		e := cpuOf(res.row(scOrders, t), roleBackend)
		p("| reference: backend CPU per order behind %s ÷ behind NGINX (%.1f ÷ %.1f µs) | %s | (no target) | |\n", targetLabel(t), e, n, fmtRatio(div(e, n)))
	}
	red, ngl := res.row(scMarkets, tExgateRedis), res.row(scMarkets, tNginxLimit)
	p("| reference: GET markets, exgate with Redis limits ÷ NGINX + limit_req, req/s | %s | (no target) | |\n", fmtRatio(ratio(red, ngl)))
}

// identifiedOrderTrips writes issue 36 item 4's line for r, the orders
// with an identifier each at exgate with Redis limits: the Redis round
// trips an order waits for before it is forwarded (its limits', with its
// claim riding in them, plus any claim sent on its own), and what follows
// the backend's answer (the finish run that records it, pipelined with
// other orders').
func identifiedOrderTrips(p func(string, ...any), r *Row) {
	if r == nil {
		return
	}
	before := 0.0
	if r.RoundTripsPerRequest > 0 {
		before = 1 + r.ClaimsAlonePerRequest
	}
	p("| orders with an identifier each, exgate with Redis limits: Redis round trips an order waits for before it is forwarded (its limits', its claim riding in them; "+
		"claims sent on their own: %.2f per order; %.1f orders share a round trip). After the backend answers: %.2f finish runs per order (the response recorded), "+
		"pipelined with other orders'; %.2f Redis commands per order | %.2f | 1 (issue 36 item 4) | %s |\n",
		r.ClaimsAlonePerRequest, r.DecisionsPerRoundTrip, r.FinishRunsPerRequest, r.RedisCommandsPerRequest, before, metAtMost(before, 1))
}

// floorLayers writes, for GET markets and POST orders, what stands between
// the net/http floor and exgate with limits off, as reference lines: the
// ReverseProxy floor over the net/http floor (what httputil.ReverseProxy
// itself costs) and exgate over the ReverseProxy floor (what exgate's own
// request path costs). Nothing is written without the ReverseProxy floor.
func floorLayers(p func(string, ...any), res *Results) {
	for _, sc := range getAndPost {
		f, rp, e := res.row(sc.name, tFloor), res.row(sc.name, tFloorRP), res.row(sc.name, tExgateOff)
		if rp == nil {
			continue
		}
		for _, l := range []struct {
			a, b *Row
			what string
		}{
			{rp, f, "ReverseProxy floor ÷ net/http floor (what httputil.ReverseProxy costs)"},
			{e, rp, "exgate limits off ÷ ReverseProxy floor (what exgate's request path costs)"},
		} {
			if l.a == nil || l.b == nil {
				continue
			}
			p("| reference: %s: %s, req/s (by CPU per request: %s; proxy CPU %.1f ÷ %.1f µs; round by round: %s) | %s | (no target) | |\n", sc.label, l.what,
				fmtRatio(cpuRatio(l.a, l.b)), cpuOf(l.a, roleProxy), cpuOf(l.b, roleProxy), roundRatios(l.a, l.b), fmtRatio(ratio(l.a, l.b)))
		}
	}
}

// floorVsCaddy writes, for GET markets and POST orders, the ReverseProxy
// floor's req/s and CPU per request against Caddy's as reference lines:
// what a proxy on httputil.ReverseProxy that does none of exgate's work
// reaches against the targets stated against Caddy, the most exgate can.
// Nothing is written without both rows.
func floorVsCaddy(p func(string, ...any), res *Results) {
	alone := []string{roleProxy}
	for _, sc := range getAndPost {
		f, c := res.row(sc.name, tFloorRP), res.row(sc.name, tCaddy)
		if f == nil || c == nil {
			continue
		}
		p("| reference: %s: ReverseProxy floor ÷ Caddy (the ceiling of the targets against Caddy: a proxy doing none of exgate's work), req/s (round by round: %s) | %s | (no target) | |\n",
			sc.label, roundRatios(f, c), fmtRatio(ratio(f, c)))
		p("| reference: %s: ReverseProxy floor ÷ Caddy, CPU per request (the floor %.1f µs ÷ Caddy %.1f µs) | %s | (no target) | |\n",
			sc.label, cpuOf(f, roleProxy), cpuOf(c, roleProxy), fmtRatio(median(perRoundCPU(f, c, alone, alone))))
	}
}

// fixedRateTarget writes the fixed-rate target's line, exgate's added
// p99 over the ReverseProxy floor's, and NGINX's added p99 for reference.
func fixedRateTarget(p func(string, ...any), fr *FixedRate) {
	e, f := fr.row(tExgateRedis), fr.row(tFloorRP)
	if e != nil && f != nil {
		verdict, v := fixedRateVerdict(fr, e, f)
		p("| fixed rate (%.0f req/s): exgate's added p99 ÷ the ReverseProxy floor's (%.2f ÷ %.2f ms) | %s | ≤ %.1f× | %s |\n",
			fr.Rate, e.AddedP99MS, f.AddedP99MS, fmtRatio(v), goalAddedP99, verdict)
	}
	if ng := fr.row(tNginx); e != nil && ng != nil {
		_, v := fixedRateVerdict(fr, e, ng)
		p("| reference: fixed rate: exgate's added p99 ÷ NGINX's (%.2f ÷ %.2f ms) | %s | (no target) | |\n", e.AddedP99MS, ng.AddedP99MS, fmtRatio(v))
	}
}

// fixedRateVerdict judges exgate's (e's) added p99 against a baseline's (b's)
// and returns the verdict and the ratio (0 when there is none). The
// verdict is inconclusive when the rate was not held; when the machine
// was busier than busyVerdictPct during either target's rounds (their
// tails are then the machine's queue, and a few percent of CPU more
// multiplies one); and when direct's own p99 moved over the middle half
// of the rounds by as much as the larger of the two added p99s: stalls
// of the machine then decide which target looks slower.
func fixedRateVerdict(fr *FixedRate, e, ng *RateRow) (string, float64) {
	direct := &fr.Rows[0]
	lo, hi := direct.p99Spread()
	switch {
	case direct.Target == tDirect && !fr.held(direct):
		return fmt.Sprintf("**inconclusive**: vegeta did not hold the rate even straight at the backend (achieved %.0f)", direct.achieved()), 0
	case !fr.held(e) || !fr.held(ng):
		return fmt.Sprintf("**inconclusive**: the rate was not held (achieved %.0f at exgate, %.0f at %s)", e.achieved(), ng.achieved(), targetLabel(ng.Target)), 0
	case e.BusyPct > busyVerdictPct || ng.BusyPct > busyVerdictPct:
		return fmt.Sprintf("**inconclusive**: the machine was %.0f%% busy at exgate and %.0f%% at %s (at most %d%%): the tail measured is its queue", e.BusyPct, ng.BusyPct, targetLabel(ng.Target), busyVerdictPct), 0
	case direct.Target == tDirect && hi-lo > 0 && hi-lo >= max(e.AddedP99MS, ng.AddedP99MS):
		return fmt.Sprintf("**inconclusive**: direct's own p99 ranged %.2f–%.2f ms over the middle half of the rounds, a spread as large as what either proxy added", lo, hi), 0
	case ng.AddedP99MS > 0 && e.AddedP99MS >= 0:
		v := e.AddedP99MS / ng.AddedP99MS
		return metAtMost(v, goalAddedP99), v
	case ng.AddedP99MS > 0:
		return "**inconclusive**: exgate's p99 was below direct's", 0
	case e.AddedP99MS <= 0:
		return "**met** (neither added a measurable p99)", 0
	}
	return fmt.Sprintf("**missed** (%s added no measurable p99)", targetLabel(ng.Target)), 0
}

// tailParts writes what each layer adds to the p99 at the fixed rate,
// from the differences of the targets' added p99 in this run: net/http
// itself (the floor proxy against NGINX), exgate's request path (limits
// off against the floor) and exgate's limits (Redis against off); and,
// with a B build, each exgate target's B ÷ A. A part that is missing is
// left out.
func tailParts(p func(string, ...any), fr *FixedRate) {
	var parts []string
	for _, d := range []struct{ hi, lo, what string }{
		{tFloor, tNginx, "net/http itself (floor − NGINX)"},
		{tFloorRP, tFloor, "httputil.ReverseProxy (ReverseProxy floor − net/http floor)"},
		{tExgateOff, tFloorRP, "exgate's request path (limits off − ReverseProxy floor)"},
		{tExgateRedis, tExgateOff, "exgate's Redis limits (Redis − off)"},
	} {
		if hi, lo := fr.row(d.hi), fr.row(d.lo); hi != nil && lo != nil {
			parts = append(parts, fmt.Sprintf("%s %+.2f ms", d.what, hi.AddedP99MS-lo.AddedP99MS))
		}
	}
	for _, t := range []string{tExgateOff, tExgateRedis} {
		if a, b := fr.row(t), fr.row(t+bSuffix); a != nil && b != nil {
			parts = append(parts, fmt.Sprintf("%s, B build ÷ A: added p50 %s, p99 %s, p99.9 %s", targetLabel(t),
				fmtRatio(div(b.AddedP50MS, a.AddedP50MS)), fmtRatio(div(b.AddedP99MS, a.AddedP99MS)), fmtRatio(div(b.AddedP999MS, a.AddedP999MS))))
		}
	}
	if len(parts) > 0 {
		p("Added p99, layer by layer (differences of the medians above): %s.\n\n", strings.Join(parts, "; "))
	}
}

// fixedRateSection writes the open-loop run.
func fixedRateSection(p func(string, ...any), fr *FixedRate) {
	if fr == nil {
		return
	}
	p("## Fixed rate: GET markets at %.0f req/s (open loop, %s)\n\n", fr.Rate, fr.Tool)
	rule := fr.Rule
	if rule == "" {
		rule = "half of NGINX's median req/s on GET markets in this run"
	}
	p("The rate: %s. Held by `vegeta attack -rate` for %s, %d interleaved rounds; "+
		"exact percentiles over every request of a run, then the median over the rounds. *Added* is the target's latency minus direct's in the same round.\n\n",
		rule, fr.Duration, fr.Rounds)
	probesSection(p, fr.Probes)
	for _, r := range fr.Rows {
		if !fr.held(&r) {
			p("**The rate was not held everywhere** (achieved below 95%% of %.0f req/s, see the table): a target that fell behind "+
				"was measured overloaded, not at a rate it serves; on a machine shared with other work the load generator "+
				"itself may be what falls behind (compare direct's achieved rate).\n\n", fr.Rate)
			break
		}
	}
	p("| target | p50 ms | p99 ms | p99.9 ms | added p50 ms | added p99 ms | added p99.9 ms | achieved req/s | machine busy | errors |\n")
	p("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range fr.Rows {
		if r.Target == tDirect {
			p("| %s | %.2f | %.2f | %.2f | – | – | – | %.0f | %.0f%% | %d |\n", r.Label, r.P50MS, r.P99MS, r.P999MS, r.achieved(), r.BusyPct, r.Errors)
			continue
		}
		p("| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.0f | %.0f%% | %d |\n", r.Label, r.P50MS, r.P99MS, r.P999MS,
			r.AddedP50MS, r.AddedP99MS, r.AddedP999MS, r.achieved(), r.BusyPct, r.Errors)
	}
	p("\n")
	tailParts(p, fr)
}

// probesSection writes the calibration runs of vegeta straight at the
// backend.
func probesSection(p func(string, ...any), probes []RateProbe) {
	var parts []string
	for _, pr := range probes {
		parts = append(parts, fmt.Sprintf("%.0f req/s asked, %.0f achieved", pr.Rate, pr.Achieved))
	}
	if len(parts) > 0 {
		p("vegeta straight at the backend before the rounds: %s.\n\n", strings.Join(parts, ", "))
	}
}

// markdown renders the results as latest.md.
func markdown(res *Results) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	s := res.Settings
	m := res.Machine

	p("# exgate comparison benchmark: latest results\n\n")
	if s.Quick {
		p("> **Smoke run (`BENCH_QUICK=1`)**: too short to quote; run `make bench` for figures.\n\n")
	}
	p("Generated %s by:\n\n```sh\n%s\n```\n\n", res.Generated.Format("2006-01-02 15:04 MST"), res.Command)
	if s.SurgeOnly && res.Surge == nil {
		p("Only the fleet comparison ran (`-fleet-only`).\n\n")
	} else if s.SurgeOnly {
		p("Only the overload surge ran (`-surge-only`).\n\n")
	} else if s.RateOnly {
		p("Only the fixed-rate part ran (`-rate-only`): no closed-loop scenario, so no capacity or CPU figures. " +
			"Compare ratios, not absolute figures: the machine is small and was shared.\n\n")
	} else {
		p("Every figure below comes from this one run: the median of %d interleaved runs of %s per target "+
			"(each preceded once by a %s warm-up; odd rounds run the targets in reverse order; Caddy runs right after exgate with Redis limits, the target it is compared with). "+
			"Compare ratios, not absolute figures: the machine is small and was shared.\n\n", s.Rounds, s.Duration, s.Warmup)
	}

	p("## Machine and load\n\n")
	p("- %d CPUs (%s), %d MiB, Linux %s; %s; %s; %s; %s.\n", m.CPUs, m.CPUModel, m.MemoryMB, m.Kernel, m.GoVersion, m.Nginx, m.Redis, m.Wrk)
	p("- exgate built from `%s`", m.Revision)
	if s.BBuild != "" {
		p("; the targets marked [B build] run the exgate in `%s`", s.BBuild)
	}
	p(".\n")
	if s.SurgeOnly {
		p("- Noise: load average %s at the start.\n\n", m.LoadAtStart)
		if res.Surge != nil {
			targetsTable(p, res)
		}
		surgeSection(p, res.Surge)
		fleetSection(p, res.Fleet)
		return b.String()
	}
	p("- Load: `wrk -t%d -c%d` (connections kept alive for the whole run, 5 s timeout), on the same machine as the servers.\n", s.Threads, s.Conns)
	p("- CPU pinning: %s.\n", m.Pinning)
	var busy, steal []float64
	for _, sc := range res.Scenarios {
		for _, r := range sc.Rows {
			for _, run := range r.Runs {
				busy, steal = append(busy, run.BusyPct), append(steal, run.StealPct)
			}
		}
	}
	if len(busy) > 0 {
		p("- Noise: load average %s at the start; during the runs the machine was %.0f%% busy and %.1f%% stolen by the hypervisor (medians over all runs).\n",
			m.LoadAtStart, median(busy), median(steal))
	} else {
		p("- Noise: load average %s at the start.\n", m.LoadAtStart)
	}
	p("- Limits, where on, are %s per key: every request is decided (in Redis or in process) and none is refused. "+
		"NGINX's `limit_req` uses exgate's key rule: by token when the request has one, else by `$binary_remote_addr`.\n\n", rateOff)

	targetsTable(p, res)

	for _, sc := range res.Scenarios {
		p("## %s\n\n", sc.Title)
		d, n := res.row(sc.Name, tDirect), res.row(sc.Name, tNginxLimit)
		p("| target | req/s | ÷ direct | ÷ NGINX+limit_req | p50 ms | p99 ms | CPU µs/req: proxy | backend | redis | wrk | all | errors |\n")
		p("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for i := range sc.Rows {
			r := &sc.Rows[i]
			all := 0.0
			for _, role := range roles() {
				all += r.CPU[role]
			}
			p("| %s | %.0f | %s | %s | %.2f | %.2f | %.1f | %.1f | %.1f | %.1f | %.1f | %d |\n",
				r.Label, r.RPS, fmtRatio(ratio(r, d)), fmtRatio(ratio(r, n)), r.P50MS, r.P99MS,
				r.CPU[roleProxy], r.CPU[roleBackend], r.CPU[roleRedis], r.CPU[roleWrk], all, r.Errors)
		}
		if sc.Name == scTLS {
			tlsOverhead(p, res)
		}
		if r := res.row(sc.Name, tExgateRedis); r != nil && r.DecisionsPerRoundTrip > 0 {
			p("\nexgate with Redis limits: %.2f Redis round trips of the limit store per request (with any claims riding in them; "+
				"%.1f requests share a pipelined round trip), %.2f claims sent on their own and %.2f finish runs of duplicate protection per request, "+
				"%.2f script runs (EVALSHA, EVAL) and %.2f Redis commands (total_commands_processed) per request.\n",
				r.RoundTripsPerRequest, r.DecisionsPerRoundTrip, r.ClaimsAlonePerRequest, r.FinishRunsPerRequest, r.RedisCallsPerRequest, r.RedisCommandsPerRequest)
		}
		p("\n")
	}

	fixedRateSection(p, res.FixedRate)
	tracedRateSection(p, res.Traced)
	surgeSection(p, res.Surge)
	fleetSection(p, res.Fleet)

	if len(res.Scenarios) > 0 {
		everyRun(p, res)
	}
	howToRead(p, res)
	return b.String()
}

// everyRun writes every closed-loop run's req/s, to judge the noise.
func everyRun(p func(string, ...any), res *Results) {
	s := res.Settings
	p("## Every run (req/s), to judge the noise\n\n")
	p("| scenario | target |")
	for i := range s.Rounds {
		p(" round %d |", i+1)
	}
	p(" (max − min) ÷ median |\n|---|---|")
	for range s.Rounds {
		p("--:|")
	}
	p("--:|\n")
	for _, sc := range res.Scenarios {
		for _, r := range sc.Rows {
			p("| %s | %s |", sc.Name, r.Target)
			lo, hi := 0.0, 0.0
			for i, run := range r.Runs {
				rps := run.servedRPS()
				p(" %.0f |", rps)
				if i == 0 || rps < lo {
					lo = rps
				}
				if rps > hi {
					hi = rps
				}
			}
			spread := 0.0
			if r.RPS > 0 {
				spread = (hi - lo) / r.RPS
			}
			p(" %.0f%% |\n", 100*spread)
		}
	}
}

// howToRead explains the figures.
func howToRead(p func(string, ...any), res *Results) {
	s := res.Settings

	p("\n## How to read it\n\n")
	p("- **CPU µs/req** is the CPU time (user + system, every thread, from `/proc/<pid>/stat` before and after the run) a process " +
		"spent per request answered with the scenario's status: *proxy* is exgate's process, NGINX's master and workers, Caddy's or the floor proxy's; *backend* is the reference " +
		"backend (`exchange-sim`); *redis* is redis-server (non-zero only where exgate uses it); *wrk* is the load generator (from its rusage).\n")
	p("- **req/s** counts the requests answered with the scenario's status (200, or 201 for orders): wrk counts a refusal " +
		"(a 503 from exgate's overload limit when the shared machine slows the backend) as a request served, yet it places no order. " +
		"The *errors* column counts the refusals, timeouts and broken connections.\n")
	p("- Everything shares the same CPUs, so throughput is bounded by the sum of the *all* column: " +
		"at 100%% busy, req/s ≈ CPUs × 10⁶ ÷ all. A proxy that needs less CPU leaves more to the backend and to wrk. " +
		"The proxy column is the one least disturbed by the machine being shared.\n")
	p("- p50/p99 are wrk's, with %d connections in a closed loop: latency mostly reflects queueing for the CPUs.\n", s.Conns)
	p("- The order scenario's backend work is constant: the warm-up drains the reference backend's seeded book, so every measured " +
		"market order is accepted (201) and cancelled unfilled. exgate also checks each order body against the market catalogue (`validate: order`) where " +
		"that has landed; NGINX checks nothing.\n")
	p("- The many-keys scenario gives every request one of %d distinct tokens: the limiter sees a new key each time, "+
		"so it is the honest case for it (Redis scripts on cold keys; in memory, map growth). The token-spray guard is off in "+
		"the benchmark's configuration, or 127.0.0.1 presenting thousands of tokens would be demoted to one address key.\n", s.Tokens)
	if len(res.Profiles) > 0 {
		p("\n## Profiles (`-profile`)\n\n")
		for _, pr := range res.Profiles {
			p("- %s: %.0f req/s while profiled; `go tool pprof -top` output in `profile-%s.txt`.\n", pr.Target, pr.RPS, pr.Target)
		}
	}
	p("\nChart: [latest.png](latest.png). Raw numbers: [latest.json](latest.json).\n")
}
