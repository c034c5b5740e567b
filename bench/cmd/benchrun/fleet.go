package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"text/template"
	"time"
)

// The fleet: exgate (least-request with two random choices, its default)
// and Caddy (reverse_proxy with lb_policy least_conn) in front of the
// same three backend instances, two fast and one slower; each instance
// is this program (-pool-backend) with workers enough never to queue.
const (
	fleetFast    = time.Millisecond      // the fast instances' service time
	fleetSlow    = 10 * time.Millisecond // the slow instance's
	fleetWorkers = 1024
	fleetPath    = "/api/v1/mkt/tickers/"
)

// Fleet is what the fleet comparison measured.
type Fleet struct {
	FastMS    float64    `json:"fast_ms"`
	SlowMS    float64    `json:"slow_ms"`
	Instances []string   `json:"instances"` // fast, fast, slow
	Rows      []FleetRow `json:"rows"`
}

// FleetRow is one proxy's runs in front of the fleet, and their medians.
type FleetRow struct {
	Target string     `json:"target"`
	Label  string     `json:"label"`
	Runs   []FleetRun `json:"runs"`
	RPS    float64    `json:"rps"`
	P99MS  float64    `json:"p99_ms"`
	// CPUUS is the proxy's CPU time per request, µs.
	CPUUS float64 `json:"cpu_us_per_request"`
	// Shares is each instance's share of the requests, in Instances'
	// order.
	Shares []float64 `json:"shares"`
	Errors int64     `json:"errors"`
}

// FleetRun is one wrk run at one proxy.
type FleetRun struct {
	RPS    float64   `json:"rps"`
	P99MS  float64   `json:"p99_ms"`
	CPUUS  float64   `json:"cpu_us_per_request"`
	Shares []float64 `json:"shares"`
	Errors int64     `json:"errors"`
}

// fleetExgate is exgate in front of the fleet: the instances as
// upstream.urls, one route without limits, overload at its defaults,
// access log off.
var fleetExgate = template.Must(template.New("fleet").Parse(`# Written by bench/cmd/benchrun (the fleet).
listen: "{{.Listen}}"
admin_listen: "{{.Admin}}"
server:
  drain_delay: 0s
upstream:
  urls: [{{.URLs}}]
  max_idle_conns: 1000
log:
  access: false
limiter:
  backend: memory
routes:
  - {name: list_tickers, match: "GET ` + fleetPath + `", auth: none}
`))

// fleetCaddy is Caddy in front of the fleet with least_conn balancing and
// a keep-alive pool as large as exgate's there (max_idle_conns 1000).
var fleetCaddy = template.Must(template.New("fleet-caddy").Parse(`# Written by bench/cmd/benchrun (the fleet).
{
	admin off
	auto_https off
}
http://{{.Listen}} {
	reverse_proxy {{.Backends}} {
		lb_policy least_conn
		transport http {
			keepalive_idle_conns_per_host 1000
		}
	}
}
`))

// fleetStack is the fleet's instances and the proxies in front of them.
type fleetStack struct {
	instances []*surgeStack // backendURL and backend only
	proxies   map[string]*proc
	urls      map[string]string
}

// startFleet starts the three instances, exgate and Caddy (when it is
// installed), and waits until each answers.
func (b *bench) startFleet(ctx context.Context, ps *procs) (*fleetStack, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(6)
	if err != nil {
		return nil, err
	}
	fs := &fleetStack{proxies: map[string]*proc{}, urls: map[string]string{}}
	var urls, hosts []string
	for i, service := range []time.Duration{fleetFast, fleetFast, fleetSlow} {
		addr := "127.0.0.1:" + strconv.Itoa(ports[i])
		p, err := ps.start(fmt.Sprintf("fleet-backend-%d", i), b.e.cpus, nil, self, "-pool-backend", addr,
			"-pool-workers", strconv.Itoa(fleetWorkers), "-pool-service", service.String())
		if err != nil {
			return nil, err
		}
		fs.instances = append(fs.instances, &surgeStack{backend: p, backendURL: "http://" + addr})
		urls, hosts = append(urls, strconv.Quote("http://"+addr)), append(hosts, addr)
	}
	for _, in := range fs.instances {
		if err := waitHTTP(ctx, in.backend, in.backendURL+"/bench/stats"); err != nil {
			return nil, err
		}
	}
	listen, admin := "127.0.0.1:"+strconv.Itoa(ports[3]), "127.0.0.1:"+strconv.Itoa(ports[4])
	var buf bytes.Buffer
	if err := fleetExgate.Execute(&buf, map[string]any{"Listen": listen, "Admin": admin, "URLs": strings.Join(urls, ", ")}); err != nil {
		return nil, err
	}
	conf := filepath.Join(b.o.work, "exgate-fleet.yaml")
	if err := os.WriteFile(conf, buf.Bytes(), 0o644); err != nil {
		return nil, err
	}
	p, err := ps.start("exgate-fleet", b.e.cpus, []string{"EXGATE_KEY_SECRET=" + keySecret}, filepath.Join(b.o.bins, "exgate"), "-config", conf)
	if err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, p, "http://"+admin+"/readyz"); err != nil {
		return nil, err
	}
	fs.proxies[tExgateOff], fs.urls[tExgateOff] = p, "http://"+listen
	caddy, err := exec.LookPath("caddy")
	if err != nil {
		logf("fleet: caddy not found (Debian package caddy): Caddy is left out")
		return fs, nil
	}
	dir := filepath.Join(b.o.work, "caddy-fleet")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	buf.Reset()
	caddyAddr := "127.0.0.1:" + strconv.Itoa(ports[5])
	if err := fleetCaddy.Execute(&buf, map[string]any{"Listen": caddyAddr, "Backends": strings.Join(hosts, " ")}); err != nil {
		return nil, err
	}
	cconf := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(cconf, buf.Bytes(), 0o644); err != nil {
		return nil, err
	}
	env := []string{"HOME=" + dir, "XDG_DATA_HOME=" + dir, "XDG_CONFIG_HOME=" + dir}
	if p, err = ps.start("caddy-fleet", b.e.cpus, env, caddy, "run", "--config", cconf, "--adapter", "caddyfile"); err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, p, "http://"+caddyAddr+fleetPath); err != nil {
		return nil, err
	}
	fs.proxies[tCaddy], fs.urls[tCaddy] = p, "http://"+caddyAddr
	return fs, nil
}

// served returns how many requests each instance has served.
func (fs *fleetStack) served() ([]int64, error) {
	out := make([]int64, len(fs.instances))
	for i, in := range fs.instances {
		st, err := in.stats()
		if err != nil {
			return nil, err
		}
		out[i] = st.Served
	}
	return out, nil
}

// fleet runs the fleet comparison: a warm-up of each proxy, then rounds
// of one wrk run at each, in alternating order.
func (b *bench) fleet(ctx context.Context, ps *procs, rounds int) (*Fleet, error) {
	fs, err := b.startFleet(ctx, ps)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, p := range fs.proxies {
			p.stop(5 * time.Second)
		}
		for _, in := range fs.instances {
			in.backend.stop(5 * time.Second)
		}
	}()
	out := &Fleet{FastMS: ms(fleetFast), SlowMS: ms(fleetSlow), Instances: []string{"fast", "fast", "slow"}}
	names := []string{tExgateOff, tCaddy}
	if fs.proxies[tCaddy] == nil {
		names = names[:1]
	}
	rows := map[string]*FleetRow{}
	for _, n := range names {
		rows[n] = &FleetRow{Target: n, Label: fleetLabel(n)}
		if _, err := b.fleetRun(ctx, fs, n, b.o.warmup); err != nil {
			return nil, err
		}
	}
	for round := range rounds {
		order := names
		if round%2 == 1 {
			order = []string{names[len(names)-1], names[0]}[:len(names)]
		}
		for _, n := range order {
			run, err := b.fleetRun(ctx, fs, n, b.o.duration)
			if err != nil {
				return nil, err
			}
			rows[n].Runs = append(rows[n].Runs, run)
			logf("fleet round %d: %s %.0f req/s, %.1f µs CPU/req, shares %s", round+1, n, run.RPS, run.CPUUS, fmtShares(run.Shares))
		}
	}
	for _, n := range names {
		out.Rows = append(out.Rows, rows[n].medians())
	}
	return out, nil
}

// fleetRun drives wrk at one proxy for d and measures what it served,
// its CPU and each instance's share.
func (b *bench) fleetRun(ctx context.Context, fs *fleetStack, name string, d time.Duration) (FleetRun, error) {
	p := fs.proxies[name]
	s0, err := fs.served()
	if err != nil {
		return FleetRun{}, err
	}
	cpu0 := groupCPU(p.pid())
	w, _, err := runWrk(ctx, wrkRun{threads: b.o.threads, conns: b.o.conns, duration: d, cpus: b.wrkCPUs,
		script: b.scripts["get"], url: fs.urls[name] + fleetPath})
	if err != nil {
		return FleetRun{}, err
	}
	cpu := groupCPU(p.pid()) - cpu0
	s1, err := fs.served()
	if err != nil {
		return FleetRun{}, err
	}
	run := FleetRun{RPS: float64(w.Requests) / (float64(w.DurationUS) / 1e6), P99MS: w.P99US / 1000, Errors: w.errors()}
	total := int64(0)
	for i := range s1 {
		total += s1[i] - s0[i]
	}
	for i := range s1 {
		run.Shares = append(run.Shares, div(float64(s1[i]-s0[i]), float64(total)))
	}
	run.CPUUS = div(float64(cpu.Microseconds()), float64(w.Requests))
	if p.exited() {
		return FleetRun{}, fmt.Errorf("%s exited:\n%s", name, p.tail())
	}
	return run, nil
}

// medians sets the row's medians from its runs.
func (r *FleetRow) medians() FleetRow {
	var rps, p99, cpu []float64
	shares := make([][]float64, 3)
	for _, run := range r.Runs {
		rps, p99, cpu = append(rps, run.RPS), append(p99, run.P99MS), append(cpu, run.CPUUS)
		for i, s := range run.Shares {
			shares[i] = append(shares[i], s)
		}
		r.Errors += run.Errors
	}
	r.RPS, r.P99MS, r.CPUUS = median(rps), median(p99), median(cpu)
	r.Shares = nil
	for _, s := range shares {
		r.Shares = append(r.Shares, median(s))
	}
	return *r
}

// fleetLabel names a proxy in the fleet's table.
func fleetLabel(name string) string {
	if name == tCaddy {
		return "Caddy (reverse_proxy, lb_policy least_conn)"
	}
	return "exgate (upstream.urls: least-request, two random choices)"
}

// fmtShares formats instance shares as percentages.
func fmtShares(s []float64) string {
	parts := make([]string, len(s))
	for i, v := range s {
		parts[i] = fmt.Sprintf("%.0f%%", 100*v)
	}
	return strings.Join(parts, "/")
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// fleetSection writes the fleet comparison.
func fleetSection(p func(string, ...any), f *Fleet) {
	if f == nil || len(f.Rows) == 0 {
		return
	}
	p("## A fleet of three instances\n\n")
	p("exgate and Caddy in front of the same three backend instances (each a separate process answering every request after "+
		"a fixed wait: two take %.0f ms, one %.0f ms; none ever queues), GET %s with no limits, `wrk` as above. "+
		"exgate balances by least request with two random choices (upstream.urls), Caddy by `lb_policy least_conn`. "+
		"A balancer by load sends the slow instance less than a third.\n\n", f.FastMS, f.SlowMS, fleetPath)
	p("| proxy | req/s | p99 ms | CPU µs/req (proxy) | share: fast | fast | slow | errors |\n|---|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range f.Rows {
		p("| %s | %.0f | %.2f | %.1f |", r.Label, r.RPS, r.P99MS, r.CPUUS)
		for _, s := range r.Shares {
			p(" %.1f%% |", 100*s)
		}
		p(" %d |\n", r.Errors)
	}
	if len(f.Rows) == 2 {
		e, c := f.Rows[0], f.Rows[1]
		p("\nexgate ÷ Caddy: req/s %s, CPU per request %s.\n", fmtRatio(div(e.RPS, c.RPS)), fmtRatio(div(e.CPUUS, c.CPUUS)))
	}
	p("\n")
}
