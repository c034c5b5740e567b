package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Goals of issue 6 on the 2-core machine, GET markets.
const (
	goalVsNginx  = 0.6 // exgate with Redis limits ÷ NGINX with limit_req
	goalLimitsOn = 0.9 // exgate with Redis limits ÷ exgate with limits off
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

// ratio returns a/b, or 0 when either is missing.
func ratio(a, b *Row) float64 {
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
	if v >= goal {
		return "**met**"
	}
	return "**not met**"
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
	p("Every figure below comes from this one run: the median of %d interleaved runs of %s per target "+
		"(each preceded once by a %s warm-up; odd rounds run the targets in reverse order). "+
		"Compare ratios, not absolute figures: the machine is small and was shared.\n\n", s.Rounds, s.Duration, s.Warmup)

	p("## Machine and load\n\n")
	p("- %d CPUs (%s), %d MiB, Linux %s; %s; %s; %s; %s.\n", m.CPUs, m.CPUModel, m.MemoryMB, m.Kernel, m.GoVersion, m.Nginx, m.Redis, m.Wrk)
	p("- exgate built from `%s`", m.Revision)
	if s.BBuild != "" {
		p("; the targets marked [B build] run the exgate in `%s`", s.BBuild)
	}
	p(".\n")
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
	p("- Noise: load average %s at the start; during the runs the machine was %.0f%% busy and %.1f%% stolen by the hypervisor (medians over all runs).\n",
		m.LoadAtStart, median(busy), median(steal))
	p("- Limits, where on, are %s per key: every request is decided (in Redis or in process) and none is refused. "+
		"NGINX's `limit_req` uses exgate's key rule: by token when the request has one, else by `$binary_remote_addr`.\n\n", rateOff)

	direct := res.row(scMarkets, tDirect)
	ngl := res.row(scMarkets, tNginxLimit)
	red := res.row(scMarkets, tExgateRedis)
	off := res.row(scMarkets, tExgateOff)
	p("## Targets (issue 6), GET markets\n\n")
	p("| | measured | goal | |\n|---|---|---|---|\n")
	v := ratio(red, ngl)
	p("| exgate with Redis limits ÷ NGINX with limit_req, req/s | %.2f× | ≥ %.1f× | %s |\n", v, goalVsNginx, met(v, goalVsNginx))
	v = ratio(red, off)
	p("| exgate Redis limits on ÷ off, req/s | %.2f× | ≥ %.1f× | %s |\n", v, goalLimitsOn, met(v, goalLimitsOn))
	p("| the same two, as implied by the total CPU per request (steadier on a shared machine) | %.2f×, %.2f× | | |\n",
		cpuRatio(red, ngl), cpuRatio(red, off))
	if red != nil && ngl != nil && ngl.CPU[roleProxy] > 0 {
		p("| exgate with Redis limits ÷ NGINX with limit_req, proxy CPU per request | %.2f× | | |\n", red.CPU[roleProxy]/ngl.CPU[roleProxy])
	}
	if red != nil && direct != nil {
		p("| exgate with Redis limits ÷ direct to backend, req/s | %.2f× | | |\n", ratio(red, direct))
	}
	p("\n")

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
		if r := res.row(sc.Name, tExgateRedis); r != nil && r.DecisionsPerRoundTrip > 0 {
			p("\nexgate with Redis limits: %.1f decisions per Redis round trip (pipelined batches), %.2f EVALSHA per request.\n",
				r.DecisionsPerRoundTrip, r.RedisCallsPerRequest)
		}
		p("\n")
	}

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
				p(" %.0f |", run.RPS)
				if i == 0 || run.RPS < lo {
					lo = run.RPS
				}
				if run.RPS > hi {
					hi = run.RPS
				}
			}
			spread := 0.0
			if r.RPS > 0 {
				spread = (hi - lo) / r.RPS
			}
			p(" %.0f%% |\n", 100*spread)
		}
	}

	p("\n## How to read it\n\n")
	p("- **CPU µs/req** is the CPU time (user + system, every thread, from `/proc/<pid>/stat` before and after the run) a process " +
		"spent per completed request: *proxy* is exgate's process or NGINX's master and workers; *backend* is the reference " +
		"backend (`exchange-sim`); *redis* is redis-server (non-zero only where exgate uses it); *wrk* is the load generator (from its rusage).\n")
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
	return b.String()
}
