package main

import (
	"bytes"
	"fmt"
	"image/png"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/image/font"
)

func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		ppid     int
		cpu      time.Duration
		err      bool
	}{
		{"plain", "4775 (exgate) S 4752 4775 4676 0 -1 4194560 2871 0 0 0 1830 412 0 0 20 0 9 0 1234 0 0", 4752, 22420 * time.Millisecond, false},
		{"name with spaces and parentheses", "77 (nginx: worker (x)) S 76 76 76 0 -1 0 0 0 0 0 5 7 0 0 20 0 1 0 1 0 0", 76, 120 * time.Millisecond, false},
		{"no name", "77 S 76", 0, 0, true},
		{"short", "77 (a) S 76 1 2", 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := parseStat(tc.in)
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", err, tc.err)
			}
			if err == nil && (st.ppid != tc.ppid || st.cpu != tc.cpu) {
				t.Errorf("got ppid %d cpu %v, want %d %v", st.ppid, st.cpu, tc.ppid, tc.cpu)
			}
		})
	}
}

func TestParseSysCPU(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     sysCPU
		err      bool
	}{
		{"proc stat", "cpu  100 5 50 1000 20 3 2 7 0 0\ncpu0 50 2 25 500 10 1 1 3 0 0\n", sysCPU{busy: 160, idle: 1020, steal: 7}, false},
		{"no cpu line", "intr 1 2 3\n", sysCPU{}, true},
		{"bad number", "cpu  x 5 50 1000 20 3 2 7 0 0\n", sysCPU{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseSysCPU(tc.in)
			if (err != nil) != tc.err || got != tc.want {
				t.Errorf("got %+v, %v; want %+v, error %v", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestParseWrk(t *testing.T) {
	line := `BENCHJSON {"requests":1200,"duration_us":2000000,"p50_us":1500,"p90_us":3000,"p99_us":9000,"max_us":12000,"connect":0,"read":1,"write":0,"status":2,"timeout":3}`
	for _, tc := range []struct {
		name, out string
		want      wrkOut
		err       bool
	}{
		{"report among wrk's lines", "Running 2s test\n  2 threads and 64 connections\n" + line + "\n", wrkOut{
			Requests: 1200, DurationUS: 2000000, P50US: 1500, P90US: 3000, P99US: 9000, MaxUS: 12000, Read: 1, Status: 2, Timeout: 3}, false},
		{"no report", "unable to connect to 127.0.0.1:1 Connection refused\n", wrkOut{}, true},
		{"no request completed", `BENCHJSON {"requests":0,"duration_us":2000000}`, wrkOut{}, true},
		{"malformed", "BENCHJSON {", wrkOut{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseWrk([]byte(tc.out))
			if (err != nil) != tc.err || got != tc.want {
				t.Errorf("got %+v, %v; want %+v, error %v", got, err, tc.want, tc.err)
			}
			if err == nil && got.errors() != 6 {
				t.Errorf("errors() = %d, want 6", got.errors())
			}
		})
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		in := slices.Clone(tc.in)
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
		if !slices.Equal(in, tc.in) {
			t.Errorf("median reordered its argument: %v", tc.in)
		}
	}
}

func TestSelected(t *testing.T) {
	for _, tc := range []struct {
		name, only, targets string
		withB               bool
		want                map[string][]string
	}{
		{"all", "", "", false, map[string][]string{
			scMarkets:  {tDirect, tNginx, tNginxLimit, tCaddy, tFloor, tFloorRP, tExgateOff, tExgateRedis, tExgateTraced},
			scOrders:   {tDirect, tNginx, tNginxLimit, tCaddy, tFloor, tFloorRP, tExgateOff, tExgateRedis, tExgateTraced},
			scOrdersID: {tExgateRedis},
			scManyKeys: {tDirect, tNginxLimit, tExgateOff, tExgateRedis},
			scTLS:      {tNginxTLS, tCaddyTLS, tExgateTLS},
		}},
		{"memory limits when named", scManyKeys, "exgate-memory", false, map[string][]string{
			scManyKeys: {tExgateMemory},
		}},
		{"one scenario, two targets, B builds", scMarkets, "nginx-limit,exgate-redis", true, map[string][]string{
			scMarkets: {tNginxLimit, tExgateRedis, tExgateRedis + bSuffix},
		}},
		{"a target no scenario has", "", "nope", false, map[string][]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := map[string][]string{}
			for _, sc := range selected(scenarios(), tc.only, tc.targets, tc.withB) {
				got[sc.name] = sc.targets
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for name, ts := range tc.want {
				if !slices.Equal(got[name], ts) {
					t.Errorf("%s: got %v, want %v", name, got[name], ts)
				}
			}
		})
	}
}

// TestFontCoversTheChart checks that the Go fonts have a glyph for every
// character the chart writes.
func TestFontCoversTheChart(t *testing.T) {
	ct, err := newChartText()
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{"exgate comparison benchmark, 2026-11-22 17:13 UTC (smoke run: too short to quote)",
		"medians of 5 interleaved runs × 6s, wrk -t2 -c64 (closed loop), 2 CPUs", "throughput, req/s", "CPU µs per request:",
		"0123456789%=+-_/.,:()≥÷", "+1.25 ms p99   (p50 +0.10, p99.9 -2.00 ms)"}
	for _, name := range targetOrder() {
		texts = append(texts, shortName(name))
	}
	for _, sc := range scenarios() {
		texts = append(texts, scenarioHeading(sc.name))
	}
	texts = append(texts, roles()...)
	for _, s := range texts {
		for _, r := range s {
			for _, f := range []font.Face{ct.regular, ct.bold} {
				if _, ok := f.GlyphAdvance(r); !ok {
					t.Errorf("no glyph for %q (in %q)", r, s)
				}
			}
		}
	}
}

// TestReportFromResults renders a small result set: the Markdown names
// every target and the goals, and the chart is a valid PNG.
// TestFixedRateRule: the open-loop rate is half of the capacity on GET
// markets of the slowest target run at the fixed rate (Caddy's here, not
// NGINX's, which would overload Caddy and exgate; the floor's or exgate
// limits off's when one of them is slower), or -rate when set; NGINX +
// limit_req, not run at the fixed rate, does not set it.
func TestFixedRateRule(t *testing.T) {
	row := func(target string, rps float64) Row { return Row{Target: target, Label: targetLabel(target), RPS: rps} }
	res := &Results{Scenarios: []ScenarioResult{{Name: scMarkets, Rows: []Row{
		row(tDirect, 60000), row(tNginx, 40000), row(tNginxLimit, 9000), row(tCaddy, 17000), row(tFloor, 20000),
		row(tExgateOff, 24000), row(tExgateRedis, 21000),
	}}}}
	floorSlowest := &Results{Scenarios: []ScenarioResult{{Name: scMarkets, Rows: []Row{
		row(tDirect, 60000), row(tNginx, 40000), row(tCaddy, 17000), row(tFloor, 15000), row(tExgateRedis, 21000),
	}}}}
	for _, tc := range []struct {
		name     string
		flag     float64
		res      *Results
		want     float64
		wantRule string
	}{
		{"slowest compared", 0, res, 4250, "a quarter of the median req/s on GET markets of the slowest target compared (Caddy (reverse_proxy), 17000 req/s)"},
		{"the floor slowest", 0, floorSlowest, 3750, "net/http floor proxy, 15000 req/s"},
		{"flag", 5000, res, 5000, "set by -rate"},
		{"nothing measured", 0, &Results{}, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rate, rule := fixedRateRule(tc.res, tc.flag)
			if rate != tc.want || !strings.Contains(rule, tc.wantRule) {
				t.Errorf("fixedRateRule = %v, %q; want %v, …%q…", rate, rule, tc.want, tc.wantRule)
			}
		})
	}
}

func TestReportFromResults(t *testing.T) {
	row := func(target string, rps, proxy float64) Row {
		r := Row{Target: target, Label: targetLabel(target), Runs: []Run{{Round: 1, RPS: rps, CPU: map[string]float64{
			roleProxy: proxy, roleBackend: 30, roleRedis: 0, roleWrk: 12}}}}
		r.summarize()
		return r
	}
	res := &Results{
		Generated: time.Date(2026, 11, 22, 17, 0, 0, 0, time.UTC),
		Command:   "make bench",
		Machine:   Machine{CPUs: 2, CPUModel: "test CPU", Pinning: "none"},
		Settings:  Settings{Rounds: 1, Duration: "6s", Warmup: "2s", Threads: 2, Conns: 64, Tokens: 10000},
		Scenarios: []ScenarioResult{{Name: scMarkets, Title: "GET markets", Rows: []Row{
			row(tDirect, 30000, 0), row(tNginx, 21000, 25), row(tNginxLimit, 20000, 28), row(tCaddy, 8000, 90),
			row(tFloor, 12500, 60), row(tFloorRP, 13000, 55), row(tExgateOff, 12000, 50), row(tExgateRedis, 9000, 60),
		}}, {Name: scOrders, Title: "POST orders", Rows: []Row{
			row(tNginx, 15000, 25), row(tCaddy, 5000, 90), row(tFloor, 8000, 70), row(tFloorRP, 8200, 75), row(tExgateOff, 8000, 70), row(tExgateRedis, 7600, 90),
		}}},
		FixedRate: &FixedRate{Rate: 10500, Duration: "6s", Rounds: 1, Tool: "vegeta",
			Rule:   "half of the median req/s on GET markets of the slowest target compared (Caddy (reverse_proxy), 21000 req/s)",
			Probes: []RateProbe{{Rate: 12000, Achieved: 10000}, {Rate: 10500, Achieved: 10400}}, Rows: []RateRow{
				{Target: tDirect, Label: targetLabel(tDirect), Runs: []RateRun{{Round: 1, Achieved: 10500, P50MS: 0.2, P99MS: 1, P999MS: 3}}},
				{Target: tNginx, Label: targetLabel(tNginx), Runs: []RateRun{{Round: 1, Achieved: 10500, P50MS: 0.3, P99MS: 2, P999MS: 5}}},
				{Target: tFloor, Label: targetLabel(tFloor), Runs: []RateRun{{Round: 1, Achieved: 10500, P50MS: 0.4, P99MS: 2.5, P999MS: 6}}},
				{Target: tFloorRP, Label: targetLabel(tFloorRP), Runs: []RateRun{{Round: 1, Achieved: 10500, P50MS: 0.4, P99MS: 2.6, P999MS: 6}}},
				{Target: tExgateOff, Label: targetLabel(tExgateOff), Runs: []RateRun{{Round: 1, Achieved: 10500, P50MS: 0.4, P99MS: 2.75, P999MS: 7}}},
				{Target: tExgateRedis, Label: targetLabel(tExgateRedis), Runs: []RateRun{{Round: 1, Achieved: 10500, P50MS: 0.5, P99MS: 4, P999MS: 9, BusyPct: 47.4}}},
			}},
	}
	res.FixedRate.summarize()
	// exgate limits off refused 10% of its orders (503 overloaded): its
	// req/s and CPU per order count only the 90% it placed.
	off := &res.Scenarios[1].Rows[4]
	off.Runs[0].Requests, off.Runs[0].Errors, off.Runs[0].StatusErrors = 100000, 10000, 10000
	off.summarize()
	md := markdown(res)
	for _, want := range []string{
		"| GET markets: exgate with Redis limits ÷ Caddy, req/s (round by round: 1.12–1.12×) | 1.12× | ≥ 1.5× | **missed** |",
		"| GET markets: exgate with Redis limits ÷ Caddy, CPU per request (exgate and Redis 60.0 µs ÷ Caddy 90.0 µs) | 0.67× | ≤ 0.67× | **met** |",
		"| POST orders: exgate with Redis limits ÷ Caddy, CPU per request (exgate and Redis 90.0 µs ÷ Caddy 90.0 µs) | 1.00× | ≤ 0.67× | **missed** |",
		"| POST orders: exgate with Redis limits ÷ ReverseProxy floor, CPU per request (exgate and Redis 90.0 µs ÷ the floor 75.0 µs; exgate's process alone: 1.20×) | 1.20× | ≤ 1.15× | **missed** |",
		"| reference: POST orders: exgate limits off ÷ net/http floor proxy, req/s (by CPU per request: 0.90×; round by round: 0.90–0.90×) | 0.90× | (no target) | |",
		"| POST orders: exgate with Redis limits ÷ Caddy, req/s (round by round: 1.52–1.52×) | 1.52× | ≥ 1.5× | **met** |",
		"| reference: exgate, limits off: proxy CPU per order ÷ per GET (77.8 ÷ 50.0 µs) | 1.56× | (no target) | |",
		"| reference: backend CPU per order behind exgate, Redis limits ÷ behind NGINX (30.0 ÷ 30.0 µs) | 1.00× | (no target) | |",
		"| many keys: exgate Redis limits on ÷ off, req/s (by CPU per request: –; round by round: –) | – | ≥ 0.85× | not measured |",
		"| fixed rate (10500 req/s): exgate's added p99 ÷ the ReverseProxy floor's (3.00 ÷ 1.60 ms) | 1.88× | ≤ 1.3× | **missed** |",
		"| reference: fixed rate: exgate's added p99 ÷ NGINX's (3.00 ÷ 1.00 ms) | 3.00× | (no target) | |",
		"| reference: GET markets: ReverseProxy floor ÷ net/http floor (what httputil.ReverseProxy costs), req/s (by CPU per request: 1.05×; proxy CPU 55.0 ÷ 60.0 µs; round by round: 1.04–1.04×) | 1.04× | (no target) | |",
		"| reference: GET markets: exgate limits off ÷ ReverseProxy floor (what exgate's request path costs), req/s (by CPU per request: 1.05×; proxy CPU 50.0 ÷ 55.0 µs; round by round: 0.92–0.92×) | 0.92× | (no target) | |",
		"| reference: GET markets: ReverseProxy floor ÷ Caddy (the ceiling of the targets against Caddy: a proxy doing none of exgate's work), req/s (round by round: 1.62–1.62×) | 1.62× | (no target) | |",
		"| reference: POST orders: ReverseProxy floor ÷ Caddy, CPU per request (the floor 75.0 µs ÷ Caddy 90.0 µs) | 0.83× | (no target) | |",
		"The rate: half of the median req/s on GET markets of the slowest target compared (Caddy (reverse_proxy), 21000 req/s).",
		"vegeta straight at the backend before the rounds: 12000 req/s asked, 10000 achieved, 10500 req/s asked, 10400 achieved.",
		"| exgate, Redis limits | 0.50 | 4.00 | 9.00 | 0.30 | 3.00 | 6.00 | 10500 | 47% | 0 |",
		"| net/http floor proxy | 0.40 | 2.50 | 6.00 | 0.20 | 1.50 | 3.00 | 10500 | 0% | 0 |",
		"Added p99, layer by layer (differences of the medians above): net/http itself (floor − NGINX) +0.50 ms; " +
			"httputil.ReverseProxy (ReverseProxy floor − net/http floor) +0.10 ms; " +
			"exgate's request path (limits off − ReverseProxy floor) +0.15 ms; exgate's Redis limits (Redis − off) +1.25 ms.",
		"NGINX + limit_req", "Caddy (reverse_proxy)", "net/http floor proxy", "direct to backend", "make bench"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	var buf bytes.Buffer
	if err := drawChart(&buf, res); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != chartW || b.Dy() < 200 {
		t.Errorf("chart is %v", b)
	}
}

// TestIdentifiedOrderTrips checks issue 36 item 4's line: an order whose
// claim rides with its limits waits for one round trip before it is
// forwarded (met); a claim sent on its own adds one (missed); a run whose
// limits never reached Redis measured nothing.
func TestIdentifiedOrderTrips(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		limits, alone, finish float64
		want                  string
	}{
		{"claims ride", 0.19, 0, 1, "| 1.00 | 1 (issue 36 item 4) | **met** |"},
		{"every claim alone", 0.19, 1, 1, "| 2.00 | 1 (issue 36 item 4) | **missed** |"},
		{"a tenth alone", 0.19, 0.1, 1, "claims sent on their own: 0.10 per order; 5.3 orders share a round trip). After the backend answers: 1.00 finish runs per order"},
		{"not measured", 0, 0, 0, "| 0.00 | 1 (issue 36 item 4) | not measured |"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Row{Target: tExgateRedis, Runs: []Run{{Round: 1, RPS: 1000, Requests: 6000,
				RoundTripsPerRequest: tc.limits, ClaimsAlonePerRequest: tc.alone, FinishRunsPerRequest: tc.finish,
				CPU: map[string]float64{roleProxy: 100}}}}
			if tc.limits > 0 {
				r.Runs[0].DecisionsPerRoundTrip = 1 / tc.limits
			}
			r.summarize()
			var b strings.Builder
			identifiedOrderTrips(func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }, &r)
			if !strings.Contains(b.String(), tc.want) {
				t.Errorf("got\n%s\nwant it to contain %q", b.String(), tc.want)
			}
		})
	}
}

// TestClaimsAlone checks the claims sent on their own are the script runs
// neither a limit store's round trip nor a finish run accounts for.
func TestClaimsAlone(t *testing.T) {
	for _, tc := range []struct{ runs, trips, finish, want float64 }{
		{1070, 70, 1000, 0},
		{2070, 70, 1000, 1000},
		{1000, 70, 1000, 0}, // a scrape between the two counts: never below 0
	} {
		if got := claimsAlone(tc.runs, tc.trips, tc.finish); got != tc.want {
			t.Errorf("claimsAlone(%v, %v, %v) = %v, want %v", tc.runs, tc.trips, tc.finish, got, tc.want)
		}
	}
}

func TestCommandCalls(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_eval:calls=3,usec=90,usec_per_call=30.00\r\ncmdstat_evalsha:calls=120,usec=600,usec_per_call=5.00\r\n"
	for _, tc := range []struct {
		cmd  string
		want int64
	}{{"evalsha", 120}, {"eval", 3}, {"get", 0}} {
		if got := commandCalls(info, tc.cmd); got != tc.want {
			t.Errorf("commandCalls(%q) = %d, want %d", tc.cmd, got, tc.want)
		}
	}
}

// TestReportRateOnly: a -rate-only run (no closed-loop scenario, a B
// build) renders the fixed-rate target, the B ÷ A ratios and a chart,
// and no closed-loop tables.
func TestReportRateOnly(t *testing.T) {
	rr := func(target string, p50, p99, p999 float64) RateRow {
		return RateRow{Target: target, Label: targetLabel(target), Runs: []RateRun{{Round: 1, Achieved: 7500, P50MS: p50, P99MS: p99, P999MS: p999}}}
	}
	res := &Results{
		Generated: time.Date(2026, 11, 25, 7, 0, 0, 0, time.UTC),
		Command:   "benchrun -rate-only -rate 7500",
		Machine:   Machine{CPUs: 2, CPUModel: "test CPU", Pinning: "none"},
		Settings:  Settings{Rounds: 5, Duration: "6s", Warmup: "2s", Threads: 2, Conns: 64, BBuild: "/tmp/b", RateOnly: true},
		FixedRate: &FixedRate{Rate: 7500, Duration: "6s", Rounds: 1, Tool: "vegeta", Rule: "set by -rate", Rows: []RateRow{
			rr(tDirect, 0.1, 1, 2), rr(tNginx, 0.2, 1.5, 3), rr(tFloorRP, 0.2, 2.2, 4), rr(tExgateRedis, 0.3, 3, 6), rr(tExgateRedis+bSuffix, 0.3, 2, 4),
		}},
	}
	res.FixedRate.summarize()
	md := markdown(res)
	for _, want := range []string{
		"Only the fixed-rate part ran (`-rate-only`)",
		"| fixed rate (7500 req/s): exgate's added p99 ÷ the ReverseProxy floor's (2.00 ÷ 1.20 ms) | 1.67× | ≤ 1.3× | **missed** |",
		"| reference: fixed rate: exgate's added p99 ÷ NGINX's (2.00 ÷ 0.50 ms) | 4.00× | (no target) | |",
		"| exgate, Redis limits [B build] | 0.30 | 2.00 | 4.00 | 0.20 | 1.00 | 2.00 | 7500 | 0% | 0 |",
		"exgate, Redis limits, B build ÷ A: added p50 1.00×, p99 0.50×, p99.9 0.50×",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	for _, unwanted := range []string{"Every run (req/s)", "many keys:", "GET markets: exgate"} {
		if strings.Contains(md, unwanted) {
			t.Errorf("a rate-only report has %q:\n%s", unwanted, md)
		}
	}
	var buf bytes.Buffer
	if err := drawChart(&buf, res); err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(&buf); err != nil {
		t.Fatal(err)
	}
}

// rows returns a target's row with one run of each req/s given, in
// rounds 1, 2, …; a 0 is a round it did not run.
func rows(rps ...float64) *Row {
	r := &Row{}
	for i, v := range rps {
		if v > 0 {
			r.Runs = append(r.Runs, Run{Round: i + 1, RPS: v})
		}
	}
	r.summarize()
	return r
}

// TestRunOrder: within a round Caddy runs right after exgate with Redis
// limits (and its B build, when there is one); a scenario without Caddy
// keeps its order.
func TestRunOrder(t *testing.T) {
	for _, tc := range []struct {
		name          string
		targets, want []string
	}{
		{"default", []string{tDirect, tNginx, tNginxLimit, tCaddy, tFloor, tFloorRP, tExgateOff, tExgateRedis},
			[]string{tDirect, tNginx, tNginxLimit, tFloor, tFloorRP, tExgateOff, tExgateRedis, tCaddy}},
		{"B build", []string{tCaddy, tExgateOff, tExgateRedis, tExgateRedis + bSuffix},
			[]string{tExgateOff, tExgateRedis, tExgateRedis + bSuffix, tCaddy}},
		{"no Caddy", []string{tDirect, tNginxLimit, tExgateOff, tExgateRedis}, []string{tDirect, tNginxLimit, tExgateOff, tExgateRedis}},
		{"no exgate with Redis limits", []string{tCaddy, tFloor}, []string{tCaddy, tFloor}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.targets)
			if got := runOrder(tc.targets); !slices.Equal(got, tc.want) {
				t.Errorf("runOrder = %v, want %v", got, tc.want)
			}
			if !slices.Equal(tc.targets, in) {
				t.Errorf("runOrder changed its argument: %v", tc.targets)
			}
		})
	}
}

// TestRoundsMeeting: a req/s target's verdict says in how many of the
// rounds both targets ran the goal was reached.
func TestRoundsMeeting(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b *Row
		want string
	}{
		{"met in the median, not in every round", rows(160, 140, 150, 170, 120), rows(100, 100, 100, 100, 100), "**met** (met in 3 of 5 rounds)"},
		{"missed in every round", rows(110, 120, 130), rows(100, 100, 100), "**missed** (met in 0 of 3 rounds)"},
		{"rounds one side lacks are not counted; the median of the rounds decides", rows(200, 0, 150, 90), rows(100, 100, 0, 100), "**missed** (met in 1 of 2 rounds)"},
		{"one round says nothing more", rows(160), rows(100), "**met**"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := metServed(ratio(tc.a, tc.b), 1.5, tc.a, tc.b)
			if got != tc.want {
				t.Errorf("metServed = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestFixedRateVerdict: the fixed-rate target is judged only when the
// rate was held and direct's own p99 held still between rounds.
func TestFixedRateVerdict(t *testing.T) {
	rr := func(target string, achieved float64, p99s ...float64) RateRow {
		r := RateRow{Target: target}
		for i, p := range p99s {
			r.Runs = append(r.Runs, RateRun{Round: i + 1, Achieved: achieved, P50MS: 0.1, P99MS: p, P999MS: 2 * p, BusyPct: 50})
		}
		return r
	}
	busy := func(r RateRow, pct float64) RateRow {
		for i := range r.Runs {
			r.Runs[i].BusyPct = pct
		}
		return r
	}
	for _, tc := range []struct {
		name             string
		direct, ngx, exg RateRow
		want             string
		ratio            float64
	}{
		{"quiet rounds, missed", rr(tDirect, 8000, 1.0, 1.2), rr(tNginx, 8000, 1.5, 1.7), rr(tExgateRedis, 8000, 3.0, 3.2), "**missed**", 4},
		{"quiet rounds, met", rr(tDirect, 8000, 1.0, 1.1), rr(tNginx, 8000, 2.0, 2.1), rr(tExgateRedis, 8000, 2.2, 2.3), "**met**", 1.2},
		{"direct stalled in one round", rr(tDirect, 8000, 10.9, 1.7), rr(tNginx, 8000, 1.6, 16.5), rr(tExgateRedis, 8000, 2.9, 2.4),
			"**inconclusive**: direct's own p99 ranged 1.70–10.90 ms over the middle half of the rounds, a spread as large as what either proxy added", 0},
		{"exgate below direct", rr(tDirect, 8000, 3.0), rr(tNginx, 8000, 4.0), rr(tExgateRedis, 8000, 2.0), "**inconclusive**: exgate's p99 was below direct's", 0},
		{"rate not held", rr(tDirect, 8000, 1.0), rr(tNginx, 8000, 2.0), rr(tExgateRedis, 6000, 9.0),
			"**inconclusive**: the rate was not held (achieved 6000 at exgate, 8000 at NGINX (proxy_pass, keepalive))", 0},
		{"machine near full at exgate", rr(tDirect, 8000, 1.0, 1.2), rr(tNginx, 8000, 1.5, 1.7), busy(rr(tExgateRedis, 8000, 30, 32), 83),
			"**inconclusive**: the machine was 83% busy at exgate and 50% at NGINX (proxy_pass, keepalive) (at most 75%): the tail measured is its queue", 0},
		{"machine busy within bounds", rr(tDirect, 8000, 1.0, 1.2), busy(rr(tNginx, 8000, 2.0, 2.1), 74), rr(tExgateRedis, 8000, 2.2, 2.3), "**met**", 1.21},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fr := &FixedRate{Rate: 8000, Rows: []RateRow{tc.direct, tc.ngx, tc.exg}}
			fr.summarize()
			got, v := fixedRateVerdict(fr, fr.row(tExgateRedis), fr.row(tNginx))
			if got != tc.want || math.Abs(v-tc.ratio) > 0.01 {
				t.Errorf("fixedRateVerdict = %q, %.2f; want %q, %.2f", got, v, tc.want, tc.ratio)
			}
		})
	}
}

// TestRoundRatios: the range of two targets' req/s ratios pairs runs of
// the same round only, and says so when no round has both.
func TestRoundRatios(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b *Row
		want string
	}{
		{"every round", rows(200, 300, 100), rows(100, 100, 100), "1.00–3.00×"},
		{"a round one side lacks", rows(200, 0, 150), rows(100, 10, 0), "2.00–2.00×"},
		{"no round in common", rows(200, 0), rows(0, 100), "–"},
		{"a row missing", rows(200), nil, "–"},
		{"a round a served nothing in", &Row{Runs: []Run{{Round: 1, RPS: 0}, {Round: 2, RPS: 200}}}, rows(100, 100), "0.00–2.00×"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := roundRatios(tc.a, tc.b); got != tc.want {
				t.Errorf("roundRatios = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestReportSurgeOnly: the overload surge's targets, each judged, and its
// section, in a report of the surge alone.
func TestReportSurgeOnly(t *testing.T) {
	res := &Results{
		Generated: time.Date(2026, 11, 28, 7, 0, 0, 0, time.UTC),
		Command:   "benchrun -surge-only",
		Machine:   Machine{CPUs: 2, CPUModel: "test CPU", Pinning: "none", LoadAtStart: "0.10 0.20 0.30"},
		Settings:  Settings{Threads: 2, SurgeOnly: true},
		Surge: &Surge{Workers: 32, ServiceMS: 50, CapacityRPS: 640, Conns: 400, CancelRate: 20, Duration: "15s",
			UnloadedCancelP50MS: 52, UnloadedCancelP99MS: 56, CancelP50MS: 70, CancelP99MS: 120, Cancels: 300,
			BackendPeak: 60, GoodputRPS: 600, MeasuredRPS: 630, ShedAfter: 3, AfterRequests: 740,
			Timeline: []SurgeSample{{AtMS: 0, InFlight: 5, Limit: 6}, {AtMS: 500, InFlight: 20, Limit: 30}, {AtMS: 1200, InFlight: 60, Limit: 56}}},
	}
	md := markdown(res)
	for _, want := range []string{
		"Only the overload surge ran (`-surge-only`)",
		"| overload surge: the backend's peak in-flight ÷ its 32 workers (60 at once) | 1.88× | ≤ 2× | **met** |",
		"| overload surge: goodput ÷ the backend's capacity as measured in the run (600 of 630 req/s; nominal 640) | 0.95× | ≥ 0.9× | **met** |",
		"| overload surge: the cancels' p99 ÷ unloaded (120.0 ÷ 56.0 ms) | 2.14× | ≤ 2× | **missed** |",
		"| overload surge: cancels shed (of 300; 0 not answered 200) | 0 | 0 | **met** |",
		"| overload surge: requests shed from 5s after the surge (of 740 at a fifth of the capacity) | 3 | 0 | **missed** |",
		"highest in each second of the surge: 0s 20/30; 1s 60/56;",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "How to read it") {
		t.Errorf("a surge-only report explains the closed-loop runs:\n%s", md)
	}
}

// TestSumSamples sums a metric's samples whose labels match.
func TestSumSamples(t *testing.T) {
	text := "# HELP x\nexgate_overload_shed_total{route=\"a\",class=\"cancel\"} 2\nexgate_overload_shed_total{route=\"b\",class=\"market_data\"} 40\nexgate_overload_shed_totals 7\n"
	if got := sumSamples(text, "exgate_overload_shed_total"); got != 42 {
		t.Errorf("every class: %v, want 42", got)
	}
	if got := sumSamples(text, "exgate_overload_shed_total", `class="cancel"`); got != 2 {
		t.Errorf("cancels: %v, want 2", got)
	}
	if got := sumSamples(text, "exgate_overload_shed"); got != 0 { // a prefix of other names is not a match
		t.Errorf("a prefix: %v, want 0", got)
	}
}

// TestTracedRule: the traced comparison's rate is half of the slower of
// its two targets in the closed loop, or the flag's.
func TestTracedRule(t *testing.T) {
	row := func(target string, rps float64) Row { return Row{Target: target, Label: targetLabel(target), RPS: rps} }
	res := &Results{Scenarios: []ScenarioResult{
		{Name: scMarkets, Rows: []Row{row(tCaddy, 3000), row(tExgateRedis, 12000), row(tExgateTraced, 11000)}},
		{Name: scOrders, Rows: []Row{row(tExgateRedis, 8000)}},
	}}
	for _, tc := range []struct {
		name, scenario string
		flag, want     float64
		wantRule       string
	}{
		{"the slower of the two", scMarkets, 0, 5500, "exgate, Redis limits, tracing at 1%, 11000 req/s"},
		{"flag", scMarkets, 4000, 4000, "set by -traced-rate"},
		{"one target not measured", scOrders, 0, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rate, rule := tracedRule(res, tc.scenario, tc.flag)
			if rate != tc.want || !strings.Contains(rule, tc.wantRule) {
				t.Errorf("tracedRule = %v, %q; want %v, …%q…", rate, rule, tc.want, tc.wantRule)
			}
		})
	}
}

// TestTracedVerdict: the traced comparison is judged by the median of
// its per-round ratios, and is inconclusive when a target fell behind
// the rate or failed requests.
func TestTracedVerdict(t *testing.T) {
	runs := func(achieved float64, errs int64, cpus ...float64) []TracedRun {
		var rs []TracedRun
		for i, c := range cpus {
			r := TracedRun{Round: i + 1, Requests: 1000, Achieved: achieved, Errors: errs, CPU: c}
			if errs > 0 {
				r.Failed = map[string]int64{"status 503": errs}
			}
			rs = append(rs, r)
		}
		return rs
	}
	for _, tc := range []struct {
		name    string
		off, on []TracedRun
		want    string
		ratio   float64
	}{
		{"met", runs(3000, 0, 100, 110, 90), runs(3000, 0, 102, 120, 92), "**met** (met in 2 of 3 rounds)", 1.02},
		{"missed", runs(3000, 0, 100, 100, 100), runs(3000, 0, 104, 108, 110), "**missed** (met in 1 of 3 rounds)", 1.08},
		{"rate not held", runs(3000, 0, 100), runs(2500, 0, 101), "**inconclusive**: round 1: tracing on achieved 2500 of 3000 req/s", 0},
		{"failed requests", runs(3000, 30, 100), runs(3000, 0, 101), "**inconclusive**: round 1: tracing off had 30 of 1000 requests fail (status 503 ×30)", 0},
		{"a few failed requests", runs(3000, 10, 100), runs(3000, 0, 101), "**met**", 1.01},
		{"one flawed round of three left out", runs(3000, 0, 100, 100, 100), append(runs(3000, 0, 101, 103), TracedRun{Round: 3, Requests: 1000, Achieved: 3000, Errors: 20, Failed: map[string]int64{"status 503": 20}, CPU: 90}),
			"**met** (met in 2 of 2 rounds); left out: round 3: tracing on had 20 of 1000 requests fail (status 503 ×20)", 1.02},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := &TracedScenario{Name: scOrders, Rate: 3000, Off: tc.off, On: tc.on}
			if got := sc.verdict(); got != tc.want {
				t.Errorf("verdict = %q, want %q", got, tc.want)
			}
			if v := median(sc.ratios()); math.Abs(v-tc.ratio) > 0.005 {
				t.Errorf("median ratio = %.3f, want %.2f", v, tc.ratio)
			}
		})
	}
}

// TestReportTraced: where the traced comparison ran, the targets table
// judges tracing there and reports the closed loop's ratio beside it;
// where it did not, the closed loop's ratio is judged.
func TestReportTraced(t *testing.T) {
	row := func(target string, proxy float64) Row {
		r := Row{Target: target, Label: targetLabel(target), Runs: []Run{{Round: 1, RPS: 9000, CPU: map[string]float64{
			roleProxy: proxy, roleBackend: 30, roleRedis: 10, roleWrk: 12}}}}
		r.summarize()
		return r
	}
	res := &Results{
		Settings: Settings{Rounds: 1, Duration: "6s", Threads: 2, Conns: 64},
		Scenarios: []ScenarioResult{
			{Name: scMarkets, Title: "GET markets", Rows: []Row{row(tExgateRedis, 90), row(tExgateTraced, 98)}},
			{Name: scOrders, Title: "POST orders", Rows: []Row{row(tExgateRedis, 100), row(tExgateTraced, 102)}},
		},
		Traced: &TracedRate{Duration: "6s", Rounds: 2, Tool: "vegeta", Scenarios: []TracedScenario{{
			Name: scMarkets, Label: "GET markets", Rate: 4500,
			Off: []TracedRun{{Round: 1, Achieved: 4500, CPU: 100}, {Round: 2, Achieved: 4500, CPU: 100}},
			On:  []TracedRun{{Round: 1, Achieved: 4500, CPU: 103}, {Round: 2, Achieved: 4500, CPU: 101}},
		}}},
	}
	md := markdown(res)
	for _, want := range []string{
		"| GET markets at a fixed 4500 req/s: exgate with Redis limits, tracing on at 1% ÷ off, CPU per request (exgate and Redis 102.0 ÷ 100.0 µs) | 1.02× | ≤ 1.05× | **met** (met in 2 of 2 rounds) |",
		"| GET markets: exgate with Redis limits, tracing on at 1% ÷ off, CPU per request in the closed loop (exgate and Redis 108.0 ÷ 100.0 µs) | 1.08× | (judged at the fixed rate) |  |",
		"| POST orders: exgate with Redis limits, tracing on at 1% ÷ off, CPU per request in the closed loop (exgate and Redis 112.0 ÷ 110.0 µs) | 1.02× | ≤ 1.05× | **met** |",
		"| 2 | 100.0 | 101.0 | 1.01× | 4500 / 4500 | 0 / 0 |  |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

// TestParseVegetaCSV: every result is counted, and one with another
// status than the one wanted, or an error, is a failure.
func TestParseVegetaCSV(t *testing.T) {
	csv := "1700000000000000000,201,1000000,10,20,,,\n" +
		"1700000000001000000,201,3000000,10,20,,,\n" +
		"1700000000002000000,429,2000000,10,20,,,\n" +
		"1700000000003000000,0,5000000000,0,0,\"Post: timeout\",,\n"
	run, err := parseVegetaCSV(strings.NewReader(csv), 201, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if run.Requests != 4 || run.Errors != 2 || run.Achieved != 2 || run.P50MS != 2 {
		t.Errorf("parseVegetaCSV = %+v, want 4 requests, 2 errors, 2 req/s, p50 2 ms", run)
	}
	if got := fmtFailed(run.Failed); got != " (Post: timeout ×1, status 429 ×1)" {
		t.Errorf("failed = %q", got)
	}
}
