package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/exgate/exgate/metrics"
)

// Process roles whose CPU is measured per request.
const (
	roleProxy   = "proxy"
	roleBackend = "backend"
	roleRedis   = "redis"
	roleWrk     = "wrk"
)

// roles is the order CPU columns are listed in.
func roles() []string { return []string{roleProxy, roleBackend, roleRedis, roleWrk} }

// bench holds a started stack and drives the runs.
type bench struct {
	o       options
	e       *env
	wrkCPUs string
	token   string
	scripts map[string]string
	redis   *redisStats
}

// combo is one scenario at one target.
type combo struct {
	sc *scenario
	t  *target
}

// runOrder returns the order in which a scenario's targets run within a
// round: the tables' order, but with Caddy right after exgate with Redis
// limits (and its B build), the target it is compared with, so that the
// machine's state, which can change within seconds here, weighs on both
// alike. The floors already run just before exgate with limits off.
func runOrder(targets []string) []string {
	if !slices.Contains(targets, tCaddy) || !slices.Contains(targets, tExgateRedis) {
		return targets
	}
	order := slices.DeleteFunc(slices.Clone(targets), func(t string) bool { return t == tCaddy })
	i := slices.Index(order, tExgateRedis)
	if j := slices.Index(order, tExgateRedis+bSuffix); j > i {
		i = j // after the B build too: the A/B pair stays side by side
	}
	return slices.Insert(order, i+1, tCaddy)
}

// measure probes and warms every combination, then runs the rounds,
// interleaved: odd rounds go through the combinations in reverse, so that
// a slow drift of the machine weighs on every target alike.
func (b *bench) measure(ctx context.Context, res *Results) error {
	var combos []combo
	rows := map[combo]*Row{}
	scs := selected(scenarios(), b.o.only, b.o.targets, b.o.bBins != "")
	for _, sc := range scs { // Caddy or the floor may be missing
		sc.targets = slices.DeleteFunc(sc.targets, func(t string) bool { return b.e.targets[t] == nil })
	}
	if len(scs) == 0 {
		return fmt.Errorf("-scenarios %q -targets %q select nothing", b.o.only, b.o.targets)
	}
	for _, sc := range scs {
		sr := ScenarioResult{Name: sc.name, Title: sc.title}
		for _, name := range sc.targets {
			sr.Rows = append(sr.Rows, Row{Target: name, Label: targetLabel(name)})
		}
		res.Scenarios = append(res.Scenarios, sr)
	}
	for i, sc := range scs {
		for _, name := range runOrder(sc.targets) {
			c := combo{sc, b.e.targets[name]}
			combos = append(combos, c)
			rows[c] = &res.Scenarios[i].Rows[slices.Index(sc.targets, name)]
		}
	}
	for _, c := range combos {
		if err := probe(c.t, c.sc, b.token); err != nil {
			return err
		}
	}
	total := time.Duration(len(combos)) * (b.o.warmup + time.Duration(b.o.rounds)*b.o.duration)
	logf("%d scenario×target combinations, %d rounds of %v, warm-up %v: about %v",
		len(combos), b.o.rounds, b.o.duration, b.o.warmup, total.Round(time.Second))
	for _, c := range combos {
		shedBefore := shedCount(c.t)
		run, err := b.once(ctx, c, b.o.warmup)
		if err != nil {
			return err
		}
		if run.StatusErrors == 0 {
			continue
		}
		// Requests exgate's overload limit shed are its answer to a backend
		// that slowed (on a busy machine, the backend shares its CPUs):
		// reported, and counted as refusals in the rounds, not a wrong
		// set-up. Any other status is one.
		if shed := shedCount(c.t) - shedBefore; float64(run.StatusErrors) <= shed {
			logf("warm-up %s at %s: %d of %d requests shed by exgate's overload limit (is the machine busy?)", c.sc.name, c.t.name, run.StatusErrors, run.Requests)
			continue
		}
		return fmt.Errorf("warm-up %s at %s: %d responses were not %d%s; the setup is wrong", c.sc.name, c.t.name, run.StatusErrors, c.sc.want, answeredBy(c.t))
	}
	for r := range b.o.rounds {
		order := slices.Clone(combos)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, c := range order {
			run, err := b.once(ctx, c, b.o.duration)
			if err != nil {
				return err
			}
			run.Round = r + 1
			row := rows[c]
			row.Runs = append(row.Runs, run)
			logf("round %d/%d %-11s %-14s %8.0f req/s  p50 %6.2f ms  p99 %6.2f ms  CPU µs/req: %s",
				r+1, b.o.rounds, c.sc.name, c.t.name, run.RPS, run.P50MS, run.P99MS, fmtCPU(run.CPU))
		}
	}
	for i := range res.Scenarios {
		for j := range res.Scenarios[i].Rows {
			res.Scenarios[i].Rows[j].summarize()
		}
	}
	return nil
}

// selected returns the scenarios named in only (all when empty), each
// with only the targets named in targets (when empty: all but exgate with
// memory limits, which runs only when named); scenarios left without a
// target are dropped.
//
// With withB, every exgate target is followed by its B build's.
func selected(all []*scenario, only, targets string, withB bool) []*scenario {
	var out []*scenario
	for _, sc := range all {
		if !selectedScenario(only, sc.name) {
			continue
		}
		if targets != "" {
			sc.targets = slices.DeleteFunc(sc.targets, func(t string) bool {
				return !slices.Contains(strings.Split(targets, ","), t)
			})
		} else {
			sc.targets = slices.DeleteFunc(sc.targets, func(t string) bool { return t == tExgateMemory })
		}
		if withB {
			var ts []string
			for _, t := range sc.targets {
				ts = append(ts, t)
				if strings.HasPrefix(t, "exgate-") {
					ts = append(ts, t+bSuffix)
				}
			}
			sc.targets = ts
		}
		if len(sc.targets) > 0 {
			out = append(out, sc)
		}
	}
	return out
}

func fmtCPU(m map[string]float64) string {
	var parts []string
	for _, r := range roles() {
		parts = append(parts, fmt.Sprintf("%s %.0f", r, m[r]))
	}
	return strings.Join(parts, ", ")
}

// once runs wrk once at c and measures every process around it.
func (b *bench) once(ctx context.Context, c combo, d time.Duration) (Run, error) {
	var args []string
	switch c.sc.name {
	case scOrders:
		args = []string{b.token}
	case scOrdersID:
		// A nonce per run: the identifiers of every run (warm-up and
		// rounds) are new, so that none is a replay of an earlier run's.
		args = []string{b.token, strconv.FormatInt(time.Now().UnixNano(), 36)}
	case scManyKeys:
		args = []string{strconv.Itoa(b.o.tokens)}
	}
	proxyCPU := func() time.Duration {
		if c.t.proxy == nil {
			return 0
		}
		return groupCPU(c.t.proxy.pid())
	}
	storeBefore := b.storeCallsOf(c.t)
	evalBefore := b.redis.scriptRuns(ctx)
	cmdsBefore := b.redis.commands(ctx)
	sys0, _ := readSysCPU()
	p0, be0, r0 := proxyCPU(), groupCPU(b.e.backend.pid()), groupCPU(b.e.redis.pid())
	w, wrkCPU, err := runWrk(ctx, wrkRun{
		threads: b.o.threads, conns: b.o.conns, duration: d, cpus: b.wrkCPUs,
		script: b.scripts[c.sc.script], url: c.t.url + c.sc.path, args: args,
	})
	if err != nil {
		return Run{}, fmt.Errorf("%s at %s: %w", c.sc.name, c.t.name, err)
	}
	p1, be1, r1 := proxyCPU(), groupCPU(b.e.backend.pid()), groupCPU(b.e.redis.pid())
	sys1, _ := readSysCPU()
	evalAfter := b.redis.scriptRuns(ctx)
	cmdsAfter := b.redis.commands(ctx)
	storeAfter := b.storeCallsOf(c.t)

	n := float64(w.Requests)
	perReq := func(d time.Duration) float64 { return float64(d.Microseconds()) / n }
	run := Run{
		RPS:          n / (float64(w.DurationUS) / 1e6),
		Requests:     w.Requests,
		P50MS:        w.P50US / 1000,
		P90MS:        w.P90US / 1000,
		P99MS:        w.P99US / 1000,
		MaxMS:        w.MaxUS / 1000,
		Errors:       w.errors(),
		StatusErrors: w.Status,
		CPU: map[string]float64{
			roleProxy: perReq(p1 - p0), roleBackend: perReq(be1 - be0),
			roleRedis: perReq(r1 - r0), roleWrk: perReq(wrkCPU),
		},
	}
	run.BusyPct, run.StealPct = sys0.sharesUntil(sys1)
	if strings.HasPrefix(c.t.name, tExgateRedis) {
		rt, finish := storeAfter.limitRoundTrips-storeBefore.limitRoundTrips, storeAfter.finishRuns-storeBefore.finishRuns
		if rt > 0 {
			run.DecisionsPerRoundTrip = n / rt
			run.RoundTripsPerRequest = rt / n
		}
		run.FinishRunsPerRequest = finish / n
		if evalBefore >= 0 && evalAfter >= 0 {
			runs := float64(evalAfter - evalBefore)
			run.RedisCallsPerRequest = runs / n
			run.ClaimsAlonePerRequest = claimsAlone(runs, rt, finish) / n
		}
		if storeBefore.scriptRunsCounted && storeAfter.scriptRunsCounted { // exgate's own count, where the build has it
			run.ClaimsAlonePerRequest = (storeAfter.claimScriptRuns - storeBefore.claimScriptRuns) / n
		}
		if cmdsBefore >= 0 && cmdsAfter >= 0 {
			run.RedisCommandsPerRequest = float64(cmdsAfter-cmdsBefore) / n
		}
	}
	return run, nil
}

// answeredBy returns what an exgate target says it answered, by status
// and error code from its own counters (" (exgate answered 200 ×…, 503
// overloaded ×…)"), or "" for a target without them: wrk counts only
// that an answer was not the one wanted.
func answeredBy(t *target) string {
	if t.admin == "" {
		return ""
	}
	text, err := scrapeMetrics(t.admin)
	if err != nil {
		return ""
	}
	codes := map[string]float64{}
	for line := range strings.SplitSeq(text, "\n") {
		rest, ok := strings.CutPrefix(line, "exgate_requests_total{")
		if !ok {
			continue
		}
		_, after, _ := strings.Cut(rest, `code="`)
		code, _, _ := strings.Cut(after, `"`)
		f := strings.Fields(rest)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil && code != "" {
			codes[code] += v
		}
	}
	var parts []string
	for _, code := range slices.Sorted(maps.Keys(codes)) {
		parts = append(parts, fmt.Sprintf("%s ×%.0f", code, codes[code]))
	}
	if shed := sumSamples(text, "exgate_overload_shed_total"); shed > 0 {
		parts = append(parts, fmt.Sprintf("shed by its overload limit ×%.0f", shed))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (exgate answered, since it started: " + strings.Join(parts, ", ") + ")"
}

// scrapeMetrics returns the Prometheus text exgate's admin listener at
// admin serves.
func scrapeMetrics(admin string) (string, error) {
	res, err := httpClient(5 * time.Second).Get("http://" + admin + "/metrics")
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	text, err := io.ReadAll(res.Body)
	return string(text), err
}

// shedCount returns how many requests exgate's overload limit has shed
// since it started, or 0 for other targets.
func shedCount(t *target) float64 {
	if t.admin == "" {
		return 0
	}
	text, err := scrapeMetrics(t.admin)
	if err != nil {
		return 0
	}
	return sumSamples(text, "exgate_overload_shed_total")
}

// storeCalls is what an exgate target's Redis stores counted, from its
// metrics: the limit store's round trips (each carries the decisions of
// the requests queued for it, and the claims riding with them) and
// duplicate protection's finish runs (a response recorded, a claim
// released or marked unknown), which share pipelined round trips of
// their own.
type storeCalls struct {
	limitRoundTrips, finishRuns float64
	// claimScriptRuns are duplicate protection's claims sent in script
	// runs of their own, as exgate counts them (its script-run counter,
	// when scriptRunsCounted: builds from before it lack it).
	claimScriptRuns   float64
	scriptRunsCounted bool
}

// storeCallsOf returns t's storeCalls, zero for a target without an
// admin listener (not an exgate).
func (b *bench) storeCallsOf(t *target) storeCalls {
	if t.admin == "" {
		return storeCalls{}
	}
	text, err := scrapeMetrics(t.admin)
	if err != nil {
		return storeCalls{}
	}
	idem := metrics.NameIdempotencyStoreDuration + "_count"
	return storeCalls{
		limitRoundTrips:   sumSamples(text, metrics.NameStoreDuration+"_count"),
		finishRuns:        sumSamples(text, idem) - sumSamples(text, idem, `operation="claim"`),
		claimScriptRuns:   sumSamples(text, metrics.NameIdempotencyScriptRuns, `script="claim"`),
		scriptRunsCounted: strings.Contains(text, metrics.NameIdempotencyScriptRuns+"{"),
	}
}

// claimsAlone returns how many of duplicate protection's claims were sent
// in script runs of their own, not riding with the limits, for a build
// that does not count its script runs (one that does says it: storeCalls),
// from Redis's count of script runs: the benchmark's Redis is one instance, where a
// round trip of the limit store is one script run (its decisions and the
// claims riding with them) and every other run is a finish run or a
// claim alone. (exgate counts a claim riding with the limits and one
// alone under the same operation label.)
func claimsAlone(scriptRuns, limitRoundTrips, finishRuns float64) float64 {
	return max(0, scriptRuns-limitRoundTrips-finishRuns)
}

// redisStats reads the benchmark Redis's command counts.
type redisStats struct{ c *redis.Client }

func newRedisStats(addr string) *redisStats {
	return &redisStats{c: redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})}
}

func (r *redisStats) close() { _ = r.c.Close() }

// scriptRuns returns how many scripts (EVALSHA and EVAL calls) Redis has
// run, from INFO commandstats, or -1.
func (r *redisStats) scriptRuns(ctx context.Context) int64 {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	info, err := r.c.Info(ctx, "commandstats").Result()
	if err != nil {
		return -1
	}
	return commandCalls(info, "evalsha") + commandCalls(info, "eval")
}

// commands returns how many commands Redis has processed
// (total_commands_processed), or -1.
func (r *redisStats) commands(ctx context.Context) int64 {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	info, err := r.c.Info(ctx, "stats").Result()
	if err != nil {
		return -1
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return -1
}

// commandCalls returns the calls of cmd in an INFO commandstats reply.
func commandCalls(info, cmd string) int64 {
	for line := range strings.SplitSeq(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
			n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
			return n
		}
	}
	return 0
}

// profileAll profiles exgate with Redis limits and with limits off under
// GET markets load: CPU and allocations over the same seconds, saved in
// out/tmp (raw) and as `go tool pprof -top` text in out.
func (b *bench) profileAll(ctx context.Context, res *Results) error {
	sc := scenarios()[0]
	for _, name := range []string{tExgateRedis, tExgateOff} {
		t := b.e.targets[name]
		logf("profiling %s for %ds under %s load", name, b.o.profSecs, sc.name)
		dir := filepath.Join(b.o.out, "tmp")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		cpuPath := filepath.Join(dir, "profile-"+name+"-cpu.pb.gz")
		allocPath := filepath.Join(dir, "profile-"+name+"-allocs.pb.gz")
		errc := make(chan error, 2)
		base := "http://" + t.admin + "/debug/pprof/"
		go func() {
			time.Sleep(time.Second)
			errc <- fetch(base+"profile?seconds="+strconv.Itoa(b.o.profSecs), cpuPath)
		}()
		go func() {
			time.Sleep(time.Second)
			errc <- fetch(base+"allocs?seconds="+strconv.Itoa(b.o.profSecs), allocPath)
		}()
		w, _, err := runWrk(ctx, wrkRun{
			threads: b.o.threads, conns: b.o.conns, duration: time.Duration(b.o.profSecs+3) * time.Second,
			cpus: b.wrkCPUs, script: b.scripts[sc.script], url: t.url + sc.path,
		})
		if err != nil {
			return err
		}
		for range 2 {
			if err := <-errc; err != nil {
				return err
			}
		}
		p := Profile{Target: name, RPS: float64(w.Requests) / (float64(w.DurationUS) / 1e6)}
		if p.CPUTop, err = pprofTop(cpuPath, "-top", "-nodecount=35"); err != nil {
			return err
		}
		if p.CPUCum, err = pprofTop(cpuPath, "-top", "-cum", "-nodecount=45"); err != nil {
			return err
		}
		if p.AllocTop, err = pprofTop(allocPath, "-top", "-sample_index=alloc_space", "-nodecount=30"); err != nil {
			return err
		}
		if p.AllocObjects, err = pprofTop(allocPath, "-top", "-sample_index=alloc_objects", "-nodecount=30"); err != nil {
			return err
		}
		text := fmt.Sprintf("# %s under %s load (wrk -t%d -c%d), %.0f req/s while profiled\n\n%s, exgate built from %s; %s.\n"+
			"Raw profiles: %s, %s (not committed).\n\n## CPU, flat\n%s\n## CPU, cumulative\n%s\n## alloc_space\n%s\n## alloc_objects\n%s",
			name, sc.name, b.o.threads, b.o.conns, p.RPS, time.Now().UTC().Format("2006-01-02 15:04 MST"), res.Machine.Revision,
			res.Machine.Pinning, cpuPath, allocPath, p.CPUTop, p.CPUCum, p.AllocTop, p.AllocObjects)
		if err := os.WriteFile(filepath.Join(b.o.out, "profile-"+name+".txt"), []byte(text), 0o644); err != nil {
			return err
		}
		res.Profiles = append(res.Profiles, p)
	}
	return nil
}

// fetch saves the body of url to path.
func fetch(url, path string) error {
	c := &http.Client{Timeout: 2 * time.Minute}
	res, err := c.Get(url)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		return fmt.Errorf("%s: %d %s", url, res.StatusCode, b)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, res.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// pprofTop returns `go tool pprof` text for a profile.
func pprofTop(path string, args ...string) (string, error) {
	out, err := exec.Command("go", append(append([]string{"tool", "pprof"}, args...), path)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go tool pprof %s: %v\n%s", path, err, out)
	}
	return string(out), nil
}

// numCPU is the number of CPUs this process may run on.
func numCPU() int { return runtime.NumCPU() }

// describeMachine records what the numbers were measured on.
func describeMachine(pin, serverCPUs, wrkCPUs string) Machine {
	m := Machine{CPUs: numCPU(), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, _ := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
				m.MemoryMB = kb / 1024
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		m.LoadAtStart = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	m.Revision = firstLine("git", "describe", "--always", "--dirty", "--abbrev=12")
	m.Nginx = firstLine("nginx", "-v")
	m.Redis = firstLine("redis-server", "--version")
	m.Wrk, _, _ = strings.Cut(firstLine("wrk", "-v"), " Copyright")
	switch pin {
	case "split":
		m.Pinning = fmt.Sprintf("split: wrk on CPU %s, every server on CPU %s (taskset)", wrkCPUs, serverCPUs)
	default:
		m.Pinning = "none: wrk and every server share all CPUs; the kernel schedules them"
	}
	return m
}

// firstLine returns the first line a command prints (on either stream).
func firstLine(name string, args ...string) string {
	out, _ := exec.Command(name, args...).CombinedOutput()
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(line)
}
