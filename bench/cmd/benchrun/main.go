// Command benchrun is exgate's comparison benchmark: it starts the
// reference backend, Redis, exgate three ways (limits off, memory limits,
// Redis limits) and NGINX two ways (plain proxy_pass, and with limit_req)
// on free loopback ports, drives identical wrk load at each in
// interleaved rounds, measures throughput, latency and the CPU each
// process spends per request, and writes the medians as a Markdown table,
// a JSON file and a PNG chart.
//
// `make bench` runs it through bench/run.sh, which installs what is
// missing and builds the binaries. Run directly:
//
//	benchrun -bins DIR -out bench/results [-rounds 5] [-duration 6s] [-warmup 2s]
//	         [-threads 2] [-conns 64] [-tokens 5000] [-pin none|split] [-profile]
//	benchrun -render bench/results/latest.json -out DIR   (rewrite the table and chart)
//	benchrun -bins DIR -serve   (start the stack, print its addresses, wait for Ctrl-C)
//	benchrun -bins DIR -b-bins DIR2 -scenarios get-markets   (A/B: two exgate builds, interleaved)
//	benchrun -bins DIR -b-bins DIR2 -rate-only -rate 7500 -rate-rounds 8 -targets exgate-redis
//	         (A/B at a fixed rate only, against direct)
//	benchrun -bins DIR -scenarios get-markets,post-order -targets exgate-redis,exgate-traced -rounds 3 -rate-rounds 0 -surge 0 -fleet-rounds 0 -traced-rounds 9
//	         (issue 34's tracing target: the closed loop picks the rate, the fixed rate judges)
//	benchrun -bins DIR -surge-only [-surge 15s]   (the overload surge only)
//	benchrun -bins DIR -fleet-only [-fleet-rounds 3]   (exgate and Caddy in front of three instances only)
//
// Every process it starts runs in its own process group and is stopped
// when benchrun ends, fails, or receives SIGINT, SIGTERM or SIGHUP.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

// options are benchrun's settings.
type options struct {
	bins     string
	bBins    string
	out      string
	work     string
	rounds   int
	duration time.Duration
	warmup   time.Duration
	threads  int
	conns    int
	tokens   int
	pin      string
	profile  bool
	profSecs int
	render   string
	command  string
	quick    bool
	serve    bool
	only     string // scenarios to run, comma-separated; "" = all
	targets  string // targets to run, comma-separated; "" = all

	rate         float64       // fixed-rate run's req/s; 0 = a quarter of the slowest compared target's GET markets
	rateRounds   int           // fixed-rate rounds; 0 = no fixed-rate run
	rateDuration time.Duration // length of one fixed-rate run
	rateOnly     bool          // only the fixed-rate run, at -rate

	tracedRounds int     // rounds of tracing off and on at a fixed rate; 0 = none
	tracedRate   float64 // their req/s; 0 = half of the slower one's closed-loop req/s, per scenario

	fleetRounds int  // rounds of the fleet comparison; 0 = none
	fleetOnly   bool // only the fleet comparison

	surge     time.Duration // length of the overload surge; 0 = none
	surgeOnly bool          // only the overload surge
	// surgeOverload is YAML under the surge exgate's overload: (indented
	// two spaces), to try settings other than the defaults.
	surgeOverload string

	// The overload surge's backend, when this process is it.
	poolBackend string
	poolWorkers int
	poolService time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.bins, "bins", "bin", "directory holding the exgate and exchange-sim binaries")
	flag.StringVar(&o.bBins, "b-bins", "", "directory holding a second exgate build: its targets (exgate-off-b, …) run interleaved with the first, for before/after comparisons")
	flag.StringVar(&o.out, "out", "bench/results", "directory for latest.md, latest.json and latest.png")
	flag.StringVar(&o.work, "work", "", "scratch directory for configurations and logs (default: a new temporary directory, removed at the end)")
	flag.IntVar(&o.rounds, "rounds", 5, "measured rounds; every target and scenario runs once per round, interleaved")
	flag.DurationVar(&o.duration, "duration", 6*time.Second, "length of one measured run")
	flag.DurationVar(&o.warmup, "warmup", 2*time.Second, "warm-up run of each target and scenario before the first round")
	flag.IntVar(&o.threads, "threads", 2, "wrk threads")
	flag.IntVar(&o.conns, "conns", 64, "wrk connections (held open for the whole run)")
	flag.IntVar(&o.tokens, "tokens", 5000, "distinct tokens per wrk thread in the many-keys scenario")
	flag.StringVar(&o.pin, "pin", "none", "CPU pinning: none (the scheduler spreads everything over all CPUs) or split (wrk on the last CPU, servers on the others)")
	flag.BoolVar(&o.profile, "profile", false, "after the rounds, CPU- and allocation-profile exgate (Redis limits, and limits off) under GET load")
	flag.IntVar(&o.profSecs, "profile-seconds", 10, "length of each profile")
	flag.StringVar(&o.render, "render", "", "only rewrite latest.md and latest.png from this results JSON")
	flag.StringVar(&o.command, "command", "", "the command line to print in the report (default: this one)")
	flag.BoolVar(&o.quick, "quick", false, "mark the results as a smoke run (BENCH_QUICK=1)")
	flag.StringVar(&o.only, "scenarios", "", "run only these scenarios (comma-separated: get-markets,post-order,many-keys)")
	flag.StringVar(&o.targets, "targets", "", "run only these targets (comma-separated: direct,nginx,nginx-limit,caddy,floor,floor-rp,exgate-off,exgate-memory,exgate-redis)")
	flag.Float64Var(&o.rate, "rate", 0, "request rate of the open-loop run (GET markets, vegeta); 0 = a quarter of the median req/s on GET markets of the slowest target it compares (NGINX, Caddy, exgate with Redis limits) in this run, lowered to what vegeta holds straight at the backend")
	flag.IntVar(&o.rateRounds, "rate-rounds", 6, "rounds of the open-loop fixed-rate run at direct, NGINX, Caddy, the floor and exgate (limits off, Redis limits); 0 = none")
	flag.BoolVar(&o.rateOnly, "rate-only", false, "run only the fixed-rate part, at -rate (needed), at the targets of -targets (default: all it runs at)")
	flag.DurationVar(&o.rateDuration, "rate-duration", 6*time.Second, "length of one fixed-rate run")
	flag.IntVar(&o.tracedRounds, "traced-rounds", 5, "rounds of exgate with Redis limits, tracing off and on at 1%, sent GET markets and POST orders at a fixed rate, each run -rate-duration long: issue 34's CPU target; 0 = none")
	flag.Float64Var(&o.tracedRate, "traced-rate", 0, "request rate of the traced comparison; 0 = half of the slower of the two targets' median req/s in the closed loop, per scenario")
	flag.DurationVar(&o.surge, "surge", 15*time.Second, "length of the overload surge (exgate in front of a backend of 32 workers × 50 ms, 400 connections of market data and a trader cancelling 20 times a second); 0 = none")
	flag.BoolVar(&o.surgeOnly, "surge-only", false, "run only the overload surge")
	flag.IntVar(&o.fleetRounds, "fleet-rounds", 3, "rounds of exgate and Caddy (lb_policy least_conn) in front of the same three backend instances, one slower, of -duration each; 0 = none")
	flag.BoolVar(&o.fleetOnly, "fleet-only", false, "run only the fleet comparison")
	flag.StringVar(&o.surgeOverload, "surge-overload", "", "YAML lines (each indented two spaces) under the surge exgate's overload section, to try settings other than the defaults, e.g. '  tolerance_percent: 25'")
	flag.StringVar(&o.poolBackend, "pool-backend", "", "serve the overload surge's backend on this address and nothing else (benchrun starts itself so)")
	flag.IntVar(&o.poolWorkers, "pool-workers", surgeWorkers, "the surge backend's workers")
	flag.DurationVar(&o.poolService, "pool-service", surgeService, "the surge backend's service time per request")
	flag.BoolVar(&o.serve, "serve", false, "start the stack, print its addresses and keep it up until interrupted (for profiling by hand)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	err := run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchrun:", err)
		if errors.Is(err, context.Canceled) {
			os.Exit(130)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	if o.poolBackend != "" {
		return servePool(ctx, o.poolBackend, o.poolWorkers, o.poolService)
	}
	if o.render != "" {
		res, err := readResults(o.render)
		if err != nil {
			return err
		}
		return writeReport(res, o.out)
	}
	if err := o.check(); err != nil {
		return err
	}
	cleanup, err := o.workDir()
	defer cleanup()
	if err != nil {
		return err
	}
	if o.command == "" {
		o.command = fmt.Sprint(os.Args)
	}
	serverCPUs, wrkCPUs, err := pinning(o.pin)
	if err != nil {
		return err
	}

	ps := &procs{dir: o.work}
	defer ps.stopAll()
	e := &env{bins: o.bins, bBins: o.bBins, work: o.work, cpus: serverCPUs}
	if o.surgeOnly || o.fleetOnly {
		return runSurgeOnly(ctx, o, ps, &bench{o: o, e: e, wrkCPUs: wrkCPUs}, serverCPUs, wrkCPUs)
	}
	logf("starting the backend, Redis, 3 exgates, 2 NGINXes, Caddy and the floors on loopback (scratch: %s)", o.work)
	if err := startStack(ctx, ps, e); err != nil {
		return err
	}
	b := &bench{o: o, e: e, wrkCPUs: wrkCPUs}
	if b.token, err = accessToken(e.targets[tDirect].url); err != nil {
		return err
	}
	if b.scripts, err = writeScripts(o.work); err != nil {
		return err
	}
	b.redis = newRedisStats(e.redisAd)
	defer b.redis.close()
	if o.serve {
		return serve(ctx, e, b.token)
	}

	res := &Results{
		Generated: time.Now().UTC(),
		Command:   o.command,
		Machine:   describeMachine(o.pin, serverCPUs, wrkCPUs),
		Settings: Settings{
			Rounds: o.rounds, Duration: o.duration.String(), Warmup: o.warmup.String(),
			Threads: o.threads, Conns: o.conns, Tokens: o.tokens * o.threads, Quick: o.quick, BBuild: o.bBins, RateOnly: o.rateOnly,
		},
	}
	if err := b.runAll(ctx, ps, res); err != nil {
		return err
	}
	return write(res, o.out)
}

// check refuses options that cannot run together.
func (o options) check() error {
	switch {
	case o.rounds < 1 || o.duration < time.Second || o.threads < 1 || o.conns < o.threads || o.tokens < 1:
		return errors.New("need rounds ≥ 1, duration ≥ 1s, threads ≥ 1, conns ≥ threads, tokens ≥ 1")
	case o.surgeOnly && o.surge <= 0:
		return errors.New("-surge-only needs -surge > 0")
	case o.rateOnly && (o.rate <= 0 || o.rateRounds < 1):
		return errors.New("-rate-only needs -rate > 0 and -rate-rounds ≥ 1 (no closed-loop run measures the capacity the rate is chosen from)")
	}
	return nil
}

// workDir makes o.work (a temporary directory when it is empty, removed
// by the returned cleanup) and lets every user into it: NGINX workers run
// as an unprivileged user when started as root and must reach their
// directories.
func (o *options) workDir() (cleanup func(), err error) {
	cleanup = func() {}
	if o.work == "" {
		dir, err := os.MkdirTemp("", "exgate-bench-")
		if err != nil {
			return cleanup, err
		}
		cleanup = func() { os.RemoveAll(dir) }
		o.work = dir
	} else if err := os.MkdirAll(o.work, 0o755); err != nil {
		return cleanup, err
	}
	return cleanup, os.Chmod(o.work, 0o755)
}

// runAll runs the scenarios the options ask for into res: the
// closed-loop rounds, the fixed rate, the surge and the profiles; it
// fails when a target exited meanwhile.
func (b *bench) runAll(ctx context.Context, ps *procs, res *Results) error {
	o, e := b.o, b.e
	var err error
	if !o.rateOnly {
		if err := b.measure(ctx, res); err != nil {
			return err
		}
	}
	if o.rateRounds > 0 {
		if rate, rule := fixedRateRule(res, o.rate); rate > 0 {
			fr, err := b.fixedRate(ctx, rate, rule)
			if err != nil {
				return err
			}
			res.FixedRate = fr
		} else {
			logf("fixed rate: skipped (no target it compares was measured on GET markets and -rate is 0)")
		}
	}
	if o.tracedRounds > 0 && selectedTarget(o.targets, tExgateRedis) && selectedTarget(o.targets, tExgateTraced) {
		if res.Traced, err = b.tracedRate(ctx, res); err != nil {
			return err
		}
	}
	if o.surge > 0 {
		if res.Surge, err = b.surge(ctx, ps, o.surge); err != nil {
			return err
		}
	}
	if o.fleetRounds > 0 {
		if res.Fleet, err = b.fleet(ctx, ps, o.fleetRounds); err != nil {
			return err
		}
	}
	if o.profile {
		if err := b.profileAll(ctx, res); err != nil {
			return err
		}
	}
	for _, name := range targetOrder() {
		if t := e.targets[name]; t != nil && t.proxy != nil && t.proxy.exited() {
			return fmt.Errorf("%s exited during the benchmark:\n%s", name, t.proxy.tail())
		}
	}
	return nil
}

// write writes latest.json, latest.md and latest.png into dir.
func write(res *Results, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := writeResults(res, filepath.Join(dir, "latest.json")); err != nil {
		return err
	}
	if err := writeReport(res, dir); err != nil {
		return err
	}
	logf("wrote %s", filepath.Join(dir, "latest.md"))
	return nil
}

// runSurgeOnly runs the overload surge alone (-surge-only), or the fleet
// comparison alone (-fleet-only), without the comparison's stack, and
// writes its results.
func runSurgeOnly(ctx context.Context, o options, ps *procs, b *bench, serverCPUs, wrkCPUs string) error {
	var err error
	if b.scripts, err = writeScripts(o.work); err != nil {
		return err
	}
	res := &Results{
		Generated: time.Now().UTC(),
		Command:   o.command,
		Machine:   describeMachine(o.pin, serverCPUs, wrkCPUs),
		Settings:  Settings{Threads: o.threads, Conns: o.conns, Duration: o.duration.String(), Quick: o.quick, SurgeOnly: true},
	}
	if o.fleetOnly {
		if res.Fleet, err = b.fleet(ctx, ps, max(o.fleetRounds, 1)); err != nil {
			return err
		}
		return write(res, o.out)
	}
	if res.Surge, err = b.surge(ctx, ps, o.surge); err != nil {
		return err
	}
	return write(res, o.out)
}

// serve prints where everything listens and waits for ctx to end.
func serve(ctx context.Context, e *env, token string) error {
	fmt.Printf("redis\t%s\ntoken\t%s\n", e.redisAd, token)
	for _, name := range targetOrder() {
		t := e.targets[name]
		if t == nil {
			continue
		}
		fmt.Printf("%s\t%s", name, t.url)
		if t.proxy != nil {
			fmt.Printf("\tpid %d", t.proxy.pid())
		}
		if t.admin != "" {
			fmt.Printf("\tadmin http://%s", t.admin)
		}
		fmt.Println()
	}
	fmt.Printf("backend pid %d, redis pid %d; scratch %s; Ctrl-C stops everything\n", e.backend.pid(), e.redis.pid(), e.work)
	<-ctx.Done()
	return nil
}

// pinning returns the taskset CPU lists of the servers and of wrk.
func pinning(mode string) (servers, wrk string, err error) {
	switch mode {
	case "none", "":
		return "", "", nil
	case "split":
		n := numCPU()
		if n < 2 {
			return "", "", errors.New("-pin split needs at least 2 CPUs")
		}
		if n == 2 {
			return "0", "1", nil
		}
		return fmt.Sprintf("0-%d", n-2), fmt.Sprint(n - 1), nil
	}
	return "", "", fmt.Errorf("-pin %q: want none or split", mode)
}

// logf prints a progress line on standard error.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
