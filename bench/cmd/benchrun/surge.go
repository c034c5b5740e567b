package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/template"
	"time"
)

// The overload surge: exgate with its overload defaults in front of a
// backend of fixed capacity, driven by 400 connections of market data
// from many client addresses while one trader cancels at a fixed rate.
// exgate, the backend and the load generators (wrk, vegeta) are separate
// processes, none built with the race detector.
const (
	surgeWorkers    = 32                    // the backend's workers
	surgeService    = 50 * time.Millisecond // each request's service time
	surgeConns      = 400                   // market-data connections (wrk)
	surgeCancelRate = 20                    // the trader's cancels per second (vegeta)
	// surgeQuiet is how long after the surge exgate must have stopped
	// shedding: from then on, traffic at a fraction of the capacity is
	// sent, and nothing of it may be shed.
	surgeQuiet = 5 * time.Second
)

// The surge's targets (issue 36).
const (
	goalSurgeInFlight  = 2.0 // the backend's peak in-flight ÷ its workers, at most
	goalSurgeGoodput   = 0.9 // the backend's served rate ÷ its capacity, at least
	goalSurgeCancelP99 = 2.0 // the cancels' p99 during the surge ÷ unloaded, at most
)

// Surge is what the overload surge measured.
type Surge struct {
	Workers     int     `json:"workers"`
	ServiceMS   float64 `json:"service_ms"`
	CapacityRPS float64 `json:"capacity_rps"` // nominal: workers ÷ service
	// MeasuredRPS is what the backend served in this run with twice its
	// workers of requests sent straight to it: its capacity on the
	// machine as it was (a busy machine wakes its workers late).
	MeasuredRPS float64 `json:"measured_capacity_rps"`
	Conns       int     `json:"conns"`
	CancelRate  float64 `json:"cancel_rate"`
	Duration    string  `json:"duration"`
	// Unloaded: the trader's cancels alone.
	UnloadedCancelP50MS float64 `json:"unloaded_cancel_p50_ms"`
	UnloadedCancelP99MS float64 `json:"unloaded_cancel_p99_ms"`
	// The surge.
	CancelP50MS   float64 `json:"cancel_p50_ms"`
	CancelP99MS   float64 `json:"cancel_p99_ms"`
	Cancels       int64   `json:"cancels"`
	CancelsFailed int64   `json:"cancels_failed"` // answered other than 200, or not at all
	CancelsShed   float64 `json:"cancels_shed"`   // exgate_overload_shed_total{class="cancel"}
	// Where a cancel's time went during the surge: its wait for a slot
	// at exgate (the share that waited at all) and for a worker in the
	// backend.
	CancelsWaitedShare   float64 `json:"cancels_waited_share"`
	CancelBackendWaitP50 float64 `json:"cancel_backend_wait_p50_ms"`
	CancelBackendWaitP99 float64 `json:"cancel_backend_wait_p99_ms"`
	BackendPeak          int64   `json:"backend_peak"` // the most requests the backend held at once
	GoodputRPS           float64 `json:"goodput_rps"`  // requests the backend served per second
	MarketData           int64   `json:"market_data"`  // market-data requests wrk completed
	MarketDataRPS        float64 `json:"market_data_rps"`
	Shed                 float64 `json:"shed"` // every class, during the surge
	// CPU is, by process (exgate, backend, wrk, vegeta), the CPUs it
	// kept busy during the surge, on average.
	CPU map[string]float64 `json:"cpu_cores"`
	// After: from surgeQuiet after the surge, AfterRequests at a fraction
	// of the capacity; ShedAfter of them shed.
	AfterRequests int64   `json:"after_requests"`
	ShedAfter     float64 `json:"shed_after"`
	// Timeline samples the backend's in-flight and exgate's limit during
	// the surge.
	Timeline []SurgeSample `json:"timeline"`
}

// SurgeSample is one reading during the surge.
type SurgeSample struct {
	AtMS     int64   `json:"at_ms"`
	InFlight int64   `json:"backend_in_flight"`
	Limit    float64 `json:"exgate_limit"`
}

// poolStats is what the pool backend reports at /bench/stats.
type poolStats struct {
	InFlight int64 `json:"in_flight"`
	Peak     int64 `json:"peak"`
	Served   int64 `json:"served"`
	// CancelWaitP50MS and CancelWaitP99MS are the DELETEs' waits for a
	// worker since the last POST /bench/peak.
	CancelWaitP50MS float64 `json:"cancel_wait_p50_ms"`
	CancelWaitP99MS float64 `json:"cancel_wait_p99_ms"`
}

// servePool runs the surge's backend on addr until ctx ends: workers
// requests served at once, each for service, the others queued in
// arrival order; every request is answered 200 with a JSON body and its
// X-Request-ID. GET /bench/stats reports what it holds (the requests in
// it, queued or served, the most it held since the last POST
// /bench/peak, and how many it served).
func servePool(ctx context.Context, addr string, workers int, service time.Duration) error {
	var inFlight, peak, served atomic.Int64
	var mu sync.Mutex
	var cancelWaits []float64 // ms
	slots := make(chan struct{}, workers)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /bench/stats", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		waits := slices.Clone(cancelWaits)
		mu.Unlock()
		slices.Sort(waits)
		_ = json.NewEncoder(w).Encode(poolStats{InFlight: inFlight.Load(), Peak: peak.Load(), Served: served.Load(),
			CancelWaitP50MS: quantile(waits, 0.5), CancelWaitP99MS: quantile(waits, 0.99)})
	})
	mux.HandleFunc("POST /bench/peak", func(w http.ResponseWriter, _ *http.Request) {
		peak.Store(inFlight.Load())
		mu.Lock()
		cancelWaits = nil
		mu.Unlock()
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		_, _ = io.Copy(io.Discard, r.Body)
		arrived := time.Now()
		slots <- struct{}{}
		if r.Method == http.MethodDelete {
			mu.Lock()
			cancelWaits = append(cancelWaits, float64(time.Since(arrived))/float64(time.Millisecond))
			mu.Unlock()
		}
		time.Sleep(service)
		<-slots
		inFlight.Add(-1)
		served.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Request-Id", r.Header.Get("X-Request-Id"))
		_, _ = io.WriteString(w, `{"ok":true}`)
	})
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return srv.Close()
	}
}

// surgeConfig is the surge's exgate: the overload section at its
// defaults, client addresses from X-Forwarded-For (wrk's requests name
// many), a cancel route and a market-data route, no limits, access log
// off.
var surgeConfig = template.Must(template.New("surge").Parse(`# Written by bench/cmd/benchrun (the overload surge).
listen: "{{.Listen}}"
admin_listen: "{{.Admin}}"
server:
  drain_delay: 0s
upstream:
  url: "{{.Upstream}}"
  max_idle_conns: 1000
log:
  access: false
client_ip:
  trusted_proxies: ["127.0.0.1/32"]
limiter:
  backend: memory
routes:
  - {name: cancel_order, match: "DELETE /api/v1/odr/orders/{id}/", auth: none, priority: cancel}
  - {name: list_tickers, match: "GET /api/v1/mkt/tickers/", auth: none, priority: market_data}
{{- if .Overload}}
overload:
{{.Overload}}
{{- end}}
`))

// surgeStack is the surge's backend and exgate.
type surgeStack struct {
	backend, exgate *proc
	backendURL      string
	url, admin      string
}

// startSurge starts the surge's backend (this program, -pool-backend)
// and exgate, and waits until both answer.
func (b *bench) startSurge(ctx context.Context, ps *procs) (*surgeStack, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	backendAddr := "127.0.0.1:" + strconv.Itoa(ports[0])
	s := &surgeStack{backendURL: "http://" + backendAddr, url: "http://127.0.0.1:" + strconv.Itoa(ports[1]), admin: "127.0.0.1:" + strconv.Itoa(ports[2])}
	if s.backend, err = ps.start("surge-backend", b.e.cpus, nil, self, "-pool-backend", backendAddr,
		"-pool-workers", strconv.Itoa(surgeWorkers), "-pool-service", surgeService.String()); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := surgeConfig.Execute(&buf, map[string]any{
		"Listen": strings.TrimPrefix(s.url, "http://"), "Admin": s.admin, "Upstream": s.backendURL,
		"Overload": b.o.surgeOverload,
	}); err != nil {
		return nil, err
	}
	path := filepath.Join(b.o.work, "exgate-surge.yaml")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return nil, err
	}
	if s.exgate, err = ps.start("exgate-surge", b.e.cpus, []string{"EXGATE_KEY_SECRET=" + keySecret},
		filepath.Join(b.o.bins, "exgate"), "-config", path); err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, s.backend, s.backendURL+"/bench/stats"); err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, s.exgate, "http://"+s.admin+"/readyz"); err != nil {
		return nil, err
	}
	return s, nil
}

// stats reads the backend's counts.
func (s *surgeStack) stats() (poolStats, error) {
	res, err := httpClient(5 * time.Second).Get(s.backendURL + "/bench/stats")
	if err != nil {
		return poolStats{}, err
	}
	defer res.Body.Close()
	var st poolStats
	return st, json.NewDecoder(res.Body).Decode(&st)
}

// drained waits until the backend holds no request, for at most
// timeout: the capacity run's requests stay in it for up to two service
// times after wrk has gone, and a peak counted from before they leave
// reads that run's connections (2 × the workers), not the surge's.
func (s *surgeStack) drained(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		st, err := s.stats()
		if err != nil {
			return err
		}
		if st.InFlight == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the surge's backend still held %d requests %v after the capacity run", st.InFlight, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// metric returns the sum of exgate's samples of name whose labels
// contain every one of labels (name="value").
func (s *surgeStack) metric(name string, labels ...string) (float64, error) {
	text, err := scrapeMetrics(s.admin)
	if err != nil {
		return 0, err
	}
	return sumSamples(text, name, labels...), nil
}

// sumSamples sums the samples of name in a Prometheus text exposition
// whose label sets contain every one of labels.
func sumSamples(text, name string, labels ...string) float64 {
	total := 0.0
	for line := range strings.SplitSeq(text, "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		match := true
		for _, l := range labels {
			match = match && strings.Contains(rest, l)
		}
		f := strings.Fields(rest)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); match && err == nil {
			total += v
		}
	}
	return total
}

// surge runs the overload surge: the trader's cancels alone (the
// unloaded latency), then the surge of duration d with the cancels going
// on, then, from surgeQuiet after it, market data at a fifth of the
// backend's capacity with the cancels, of which nothing may be shed.
func (b *bench) surge(ctx context.Context, ps *procs, d time.Duration) (*Surge, error) {
	vegeta, err := findTool(b.o.bins, "vegeta")
	if err != nil {
		return nil, err
	}
	s, err := b.startSurge(ctx, ps)
	if err != nil {
		return nil, err
	}
	defer s.exgate.stop(5 * time.Second)
	defer s.backend.stop(5 * time.Second)
	out := &Surge{Workers: surgeWorkers, ServiceMS: float64(surgeService) / float64(time.Millisecond),
		CapacityRPS: float64(surgeWorkers) * float64(time.Second) / float64(surgeService),
		Conns:       surgeConns, CancelRate: surgeCancelRate, Duration: d.String()}
	cancels := func(d time.Duration) (RateRun, error) {
		return b.vegeta(ctx, vegeta, "DELETE "+s.url+"/api/v1/odr/orders/42/", []string{"X-Forwarded-For: 192.0.2.7"}, 200, surgeCancelRate, d)
	}
	if _, err := cancels(2 * time.Second); err != nil { // connections opened
		return nil, err
	}
	calm, err := cancels(10 * time.Second)
	if err != nil {
		return nil, err
	}
	out.UnloadedCancelP50MS, out.UnloadedCancelP99MS = calm.P50MS, calm.P99MS
	logf("surge: unloaded cancels at %d/s: p50 %.1f ms, p99 %.1f ms, %d failed", surgeCancelRate, calm.P50MS, calm.P99MS, calm.Errors)
	if out.MeasuredRPS, err = s.capacity(ctx, b); err != nil {
		return nil, err
	}
	logf("surge: the backend alone served %.0f/s with %d requests at once (nominal capacity %.0f/s)", out.MeasuredRPS, 2*surgeWorkers, out.CapacityRPS)

	if err := s.during(ctx, b, out, d, cancels); err != nil {
		return nil, err
	}
	logf("surge: cancels: %.0f%% waited for a slot at exgate; their wait for a worker in the backend p50 %.1f ms, p99 %.1f ms",
		100*out.CancelsWaitedShare, out.CancelBackendWaitP50, out.CancelBackendWaitP99)
	logf("surge: CPUs kept busy: exgate %.2f, backend %.2f, wrk %.2f", out.CPU["exgate"], out.CPU["backend"], out.CPU["wrk"])
	logf("surge: %d connections for %v: backend peak %d in flight (%d workers), goodput %.0f/s of %.0f; cancels p50 %.1f ms, p99 %.1f ms, %d failed, %.0f shed; market data %.0f/s answered",
		surgeConns, d, out.BackendPeak, surgeWorkers, out.GoodputRPS, out.CapacityRPS, out.CancelP50MS, out.CancelP99MS, out.CancelsFailed, out.CancelsShed, out.MarketDataRPS)

	select {
	case <-time.After(surgeQuiet):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	shed0, err := s.metric("exgate_overload_shed_total")
	if err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	var after [2]RateRun
	var errs [2]error
	wg.Add(2)
	go func() { defer wg.Done(); after[0], errs[0] = cancels(5 * time.Second) }()
	go func() {
		defer wg.Done()
		after[1], errs[1] = b.vegeta(ctx, vegeta, "GET "+s.url+"/api/v1/mkt/tickers/", []string{"X-Forwarded-For: 198.51.100.9"}, 200, out.CapacityRPS/5, 5*time.Second)
	}()
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	shed1, err := s.metric("exgate_overload_shed_total")
	if err != nil {
		return nil, err
	}
	out.AfterRequests, out.ShedAfter = after[0].Requests+after[1].Requests, shed1-shed0
	logf("surge: from %v after it, %d requests at a fifth of the capacity: %.0f shed", surgeQuiet, out.AfterRequests, out.ShedAfter)
	if s.exgate.exited() {
		return nil, fmt.Errorf("exgate-surge exited:\n%s", s.exgate.tail())
	}
	return out, nil
}

// capacity measures what the backend serves on this machine now: wrk
// straight at it with twice its workers of connections for 5 s.
func (s *surgeStack) capacity(ctx context.Context, b *bench) (float64, error) {
	st0, err := s.stats()
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if _, _, err := runWrk(ctx, wrkRun{threads: 1, conns: 2 * surgeWorkers, duration: 5 * time.Second, cpus: b.wrkCPUs,
		script: b.scripts["get"], url: s.backendURL + "/api/v1/mkt/tickers/"}); err != nil {
		return 0, err
	}
	elapsed := time.Since(start)
	st1, err := s.stats()
	if err != nil {
		return 0, err
	}
	return float64(st1.Served-st0.Served) / elapsed.Seconds(), nil
}

// during runs the surge itself: wrk's market data and the trader's
// cancels at once, the backend's in-flight and exgate's limit sampled
// every 100 ms.
func (s *surgeStack) during(ctx context.Context, b *bench, out *Surge, d time.Duration, cancels func(time.Duration) (RateRun, error)) error {
	if err := s.drained(ctx, 5*time.Second); err != nil {
		return err
	}
	if _, err := httpClient(5*time.Second).Post(s.backendURL+"/bench/peak", "", nil); err != nil {
		return err
	}
	st0, err := s.stats()
	if err != nil {
		return err
	}
	cancelShed0, err := s.metric("exgate_overload_shed_total", `class="cancel"`)
	if err != nil {
		return err
	}
	waited0, err := s.metric("exgate_overload_queue_seconds_count", `class="cancel"`)
	if err != nil {
		return err
	}
	shed0, err := s.metric("exgate_overload_shed_total")
	if err != nil {
		return err
	}
	cpu0 := map[string]time.Duration{"exgate": groupCPU(s.exgate.pid()), "backend": groupCPU(s.backend.pid())}
	sampling, stopSampling := context.WithCancel(ctx)
	var samples sync.WaitGroup
	samples.Add(1)
	start := time.Now()
	go func() {
		defer samples.Done()
		for sampling.Err() == nil {
			st, err1 := s.stats()
			limit, err2 := s.metric("exgate_overload_limit")
			if err1 == nil && err2 == nil {
				out.Timeline = append(out.Timeline, SurgeSample{AtMS: time.Since(start).Milliseconds(), InFlight: st.InFlight, Limit: limit})
			}
			select {
			case <-sampling.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	var cancelRun RateRun
	var cancelErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); cancelRun, cancelErr = cancels(d) }()
	w, wrkCPU, wrkErr := runWrk(ctx, wrkRun{
		threads: b.o.threads, conns: surgeConns, duration: d, cpus: b.wrkCPUs,
		script: b.scripts["surge"], url: s.url + "/api/v1/mkt/tickers/",
	})
	elapsed := time.Since(start)
	out.CPU = map[string]float64{
		"exgate":  (groupCPU(s.exgate.pid()) - cpu0["exgate"]).Seconds() / elapsed.Seconds(),
		"backend": (groupCPU(s.backend.pid()) - cpu0["backend"]).Seconds() / elapsed.Seconds(),
		"wrk":     wrkCPU.Seconds() / elapsed.Seconds(),
	}
	wg.Wait()
	stopSampling()
	samples.Wait()
	if err := errors.Join(wrkErr, cancelErr); err != nil {
		return err
	}
	st1, err := s.stats()
	if err != nil {
		return err
	}
	cancelShed1, err := s.metric("exgate_overload_shed_total", `class="cancel"`)
	if err != nil {
		return err
	}
	waited1, err := s.metric("exgate_overload_queue_seconds_count", `class="cancel"`)
	if err != nil {
		return err
	}
	out.CancelsWaitedShare = div(waited1-waited0, float64(cancelRun.Requests))
	out.CancelBackendWaitP50, out.CancelBackendWaitP99 = st1.CancelWaitP50MS, st1.CancelWaitP99MS
	shed1, err := s.metric("exgate_overload_shed_total")
	if err != nil {
		return err
	}
	out.BackendPeak = st1.Peak
	out.GoodputRPS = float64(st1.Served-st0.Served) / elapsed.Seconds()
	out.CancelP50MS, out.CancelP99MS = cancelRun.P50MS, cancelRun.P99MS
	out.Cancels, out.CancelsFailed, out.CancelsShed = cancelRun.Requests, cancelRun.Errors, cancelShed1-cancelShed0
	out.MarketData = w.Requests
	out.MarketDataRPS = float64(w.Requests-w.Status) / (float64(w.DurationUS) / 1e6)
	out.Shed = shed1 - shed0
	return nil
}

// vegeta runs vegeta at target (a "METHOD URL" line) with header lines
// at rate for d and reads every result. vegeta starts a worker per
// request in flight; the cap (128, twice wrk's connections) keeps a
// stalled target from making it open connections without end, at the
// price of sending late, which the achieved rate shows.
func (b *bench) vegeta(ctx context.Context, vegeta, target string, header []string, want int, rate float64, d time.Duration) (RateRun, error) {
	out := filepath.Join(b.o.work, fmt.Sprintf("vegeta-%d.bin", time.Now().UnixNano()))
	defer os.Remove(out)
	args := []string{vegeta, "attack", "-rate", fmt.Sprintf("%.0f/1s", rate), "-duration", d.String(),
		"-timeout", "5s", "-keepalive=true", "-workers", "16", "-max-workers", "128", "-output", out}
	for _, h := range header {
		args = append(args, "-header", h)
	}
	if b.wrkCPUs != "" {
		args = append([]string{"taskset", "-c", b.wrkCPUs}, args...)
	}
	attack := exec.CommandContext(ctx, args[0], args[1:]...)
	attack.Stdin = strings.NewReader(target + "\n")
	var stderr bytes.Buffer
	attack.Stderr = &stderr
	if err := attack.Run(); err != nil {
		return RateRun{}, fmt.Errorf("vegeta attack %s: %w: %s", target, err, stderr.String())
	}
	csvOut, err := exec.CommandContext(ctx, vegeta, "encode", "-to", "csv", out).Output()
	if err != nil {
		return RateRun{}, fmt.Errorf("vegeta encode: %w", err)
	}
	return parseVegetaCSV(bytes.NewReader(csvOut), want, d)
}

// surgeTargets writes the surge's lines of the targets table.
func surgeTargets(p func(string, ...any), s *Surge) {
	if s == nil {
		return
	}
	peak := float64(s.BackendPeak) / float64(s.Workers)
	p("| overload surge: the backend's peak in-flight ÷ its %d workers (%d at once) | %s | ≤ %.0f× | %s |\n",
		s.Workers, s.BackendPeak, fmtRatio(peak), goalSurgeInFlight, metAtMost(peak, goalSurgeInFlight))
	capacity := s.MeasuredRPS
	if capacity == 0 {
		capacity = s.CapacityRPS
	}
	good := div(s.GoodputRPS, capacity)
	p("| overload surge: goodput ÷ the backend's capacity as measured in the run (%.0f of %.0f req/s; nominal %.0f) | %s | ≥ %.1f× | %s |\n",
		s.GoodputRPS, capacity, s.CapacityRPS, fmtRatio(good), goalSurgeGoodput, met(good, goalSurgeGoodput))
	cancel := div(s.CancelP99MS, s.UnloadedCancelP99MS)
	p("| overload surge: the cancels' p99 ÷ unloaded (%.1f ÷ %.1f ms) | %s | ≤ %.0f× | %s |\n",
		s.CancelP99MS, s.UnloadedCancelP99MS, fmtRatio(cancel), goalSurgeCancelP99, metAtMost(cancel, goalSurgeCancelP99))
	p("| overload surge: cancels shed (of %d; %d not answered 200) | %.0f | 0 | %s |\n",
		s.Cancels, s.CancelsFailed, s.CancelsShed, zeroVerdict(s.CancelsShed+float64(s.CancelsFailed)))
	p("| overload surge: requests shed from %v after the surge (of %d at a fifth of the capacity) | %.0f | 0 | %s |\n",
		surgeQuiet, s.AfterRequests, s.ShedAfter, zeroVerdict(s.ShedAfter))
}

// zeroVerdict is met for a count that must be 0.
func zeroVerdict(v float64) string {
	if v == 0 {
		return "**met**"
	}
	return "**missed**"
}

// surgeSection writes the surge's setup and what it measured.
func surgeSection(p func(string, ...any), s *Surge) {
	if s == nil {
		return
	}
	p("## Overload surge\n\n")
	p("exgate with its overload defaults (`overload:` left out of its configuration; client addresses from X-Forwarded-For) in front of a backend of "+
		"%d workers taking %.0f ms a request (capacity %.0f req/s; past its workers it queues), each a separate process, no race detector. "+
		"Unloaded, a trader cancels %.0f times a second (vegeta) for 10 s. The surge: `wrk -c%d` GET tickers for %s, each request from one "+
		"of thousands of client addresses, while the trader goes on cancelling. From %v after the surge, market data at a fifth of the "+
		"capacity and the trader's cancels for 5 s.\n\n",
		s.Workers, s.ServiceMS, s.CapacityRPS, s.CancelRate, s.Conns, s.Duration, surgeQuiet)
	p("| | unloaded | surge |\n|---|--:|--:|\n")
	p("| cancel p50 ms | %.1f | %.1f |\n", s.UnloadedCancelP50MS, s.CancelP50MS)
	p("| cancel p99 ms | %.1f | %.1f |\n", s.UnloadedCancelP99MS, s.CancelP99MS)
	p("| backend: served req/s (alone, %d requests at once: %.0f) | – | %.0f |\n", 2*s.Workers, s.MeasuredRPS, s.GoodputRPS)
	p("| backend: most requests held at once | – | %d |\n", s.BackendPeak)
	p("| market data answered 200, req/s (of %d completed) | – | %.0f |\n", s.MarketData, s.MarketDataRPS)
	p("| shed by exgate (every class) | – | %.0f |\n\n", s.Shed)
	if len(s.Timeline) > 0 {
		p("The backend's in-flight and exgate's limit, highest in each second of the surge:")
		for sec := int64(0); ; sec++ {
			var in int64
			var limit float64
			seen := false
			for _, x := range s.Timeline {
				if x.AtMS/1000 == sec {
					in, limit, seen = max(in, x.InFlight), max(limit, x.Limit), true
				}
			}
			if !seen {
				break
			}
			p(" %ds %d/%.0f;", sec, in, limit)
		}
		p("\n\n")
	}
}
