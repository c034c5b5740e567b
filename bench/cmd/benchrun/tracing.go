package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// startTraceSink serves, on addr, an OTLP/HTTP trace endpoint that
// accepts every export and keeps nothing: the traced exgate's collector,
// so that exporting costs what it costs against a collector that keeps
// up, and no more. It runs in benchrun's own process, whose CPU is not
// counted. It returns the URL spans are sent to.
func startTraceSink(addr string) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String() + "/v1/traces", nil
}

// tracedTargets writes issue 34's target: with tracing on and 1% of
// requests sampled, exgate and Redis spend at most 5% more CPU per
// request than with tracing off, on GET markets and POST orders. It is
// judged at the fixed rate (TracedRate) where that ran; the closed loop's
// ratio is then reported beside it.
func tracedTargets(p func(string, ...any), res *Results, roles []string) {
	tracedRateTargets(p, res.Traced)
	for _, sc := range getAndPost {
		on, off := res.row(sc.name, tExgateTraced), res.row(sc.name, tExgateRedis)
		if on == nil || off == nil {
			continue
		}
		rs := perRoundCPU(on, off, roles, roles)
		goal, verdict := fmt.Sprintf("≤ %.2f×", goalCPUTraced), metCPU(median(rs), goalCPUTraced, rs)
		if res.Traced.traced(sc.name) != nil {
			goal, verdict = "(judged at the fixed rate)", ""
		}
		p("| %s: exgate with Redis limits, tracing on at 1%% ÷ off, CPU per request in the closed loop (exgate and Redis %.1f ÷ %.1f µs) | %s | %s | %s |\n",
			sc.label, cpuOf(on, roleProxy)+cpuOf(on, roleRedis), cpuOf(off, roleProxy)+cpuOf(off, roleRedis),
			fmtRatio(median(rs)), goal, verdict)
	}
}
