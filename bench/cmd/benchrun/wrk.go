package main

import (
	"bufio"
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

//go:embed lua/*.lua
var luaFS embed.FS

// Scenario names.
const (
	scMarkets  = "get-markets"
	scOrders   = "post-order"
	scOrdersID = "post-order-id"
	scManyKeys = "many-keys"
)

// scenario is one kind of request driven at a set of targets.
type scenario struct {
	name    string
	title   string
	method  string
	path    string
	script  string // lua/<script>.lua
	want    int    // status every response must have
	targets []string
}

// scenarios returns the benchmark's scenarios. Many keys leaves out the
// proxies that do not limit (plain NGINX, Caddy, the floor: keys change
// nothing for them). exgate with memory limits runs only when asked for
// (-targets), to keep make bench short.
func scenarios() []*scenario {
	return []*scenario{
		{name: scMarkets, title: "GET /api/v1/mkt/markets/ (anonymous: one client address, one hot limiter key)",
			method: "GET", path: "/api/v1/mkt/markets/", script: "get", want: 200,
			targets: []string{tDirect, tNginx, tNginxLimit, tCaddy, tFloor, tFloorRP, tExgateOff, tExgateMemory, tExgateRedis, tExgateTraced}},
		{name: scOrders, title: "POST /api/v1/odr/orders/ (one valid token, market order)",
			method: "POST", path: "/api/v1/odr/orders/", script: "order", want: 201,
			targets: []string{tDirect, tNginx, tNginxLimit, tCaddy, tFloor, tFloorRP, tExgateOff, tExgateMemory, tExgateRedis, tExgateTraced}},
		{name: scOrdersID, title: "POST /api/v1/odr/orders/ with an identifier of its own (one valid token, market order, duplicate protection in Redis)",
			method: "POST", path: "/api/v1/odr/orders/", script: "orderid", want: 201,
			targets: []string{tExgateRedis}},
		{name: scManyKeys, title: "GET /api/v1/mkt/markets/ with many tokens (a new limiter key on every request)",
			method: "GET", path: "/api/v1/mkt/markets/", script: "manykeys", want: 200,
			targets: []string{tDirect, tNginxLimit, tExgateOff, tExgateMemory, tExgateRedis}},
		{name: scTLS, title: "GET /api/v1/mkt/markets/ over TLS (HTTP/1.1 keep-alive, one self-signed ECDSA P-256 certificate, anonymous)",
			method: "GET", path: "/api/v1/mkt/markets/", script: "get", want: 200,
			targets: []string{tNginxTLS, tCaddyTLS, tExgateTLS}},
	}
}

// writeScripts writes each scenario's wrk script, with the reporting
// function appended, into dir and returns their paths by script name.
func writeScripts(dir string) (map[string]string, error) {
	report, err := luaFS.ReadFile("lua/report.lua")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, name := range []string{"get", "order", "orderid", "manykeys", "surge"} {
		body, err := luaFS.ReadFile("lua/" + name + ".lua")
		if err != nil {
			return nil, err
		}
		path := filepath.Join(dir, name+".lua")
		if err := os.WriteFile(path, append(append(body, '\n'), report...), 0o644); err != nil {
			return nil, err
		}
		out[name] = path
	}
	return out, nil
}

// wrkOut is what report.lua prints.
type wrkOut struct {
	Requests   int64   `json:"requests"`
	DurationUS int64   `json:"duration_us"`
	P50US      float64 `json:"p50_us"`
	P90US      float64 `json:"p90_us"`
	P99US      float64 `json:"p99_us"`
	MaxUS      float64 `json:"max_us"`
	Connect    int64   `json:"connect"`
	Read       int64   `json:"read"`
	Write      int64   `json:"write"`
	Status     int64   `json:"status"` // responses other than 2xx/3xx
	Timeout    int64   `json:"timeout"`
}

// errors returns the number of failed requests of every kind.
func (w wrkOut) errors() int64 { return w.Connect + w.Read + w.Write + w.Status + w.Timeout }

// parseWrk finds report.lua's line in wrk's output.
func parseWrk(out []byte) (wrkOut, error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "BENCHJSON "); ok {
			var w wrkOut
			if err := json.Unmarshal([]byte(rest), &w); err != nil {
				return wrkOut{}, fmt.Errorf("wrk report: %w", err)
			}
			if w.Requests == 0 || w.DurationUS <= 0 {
				return wrkOut{}, errors.New("wrk completed no request")
			}
			return w, nil
		}
	}
	return wrkOut{}, fmt.Errorf("no report line in wrk output:\n%s", out)
}

// wrkRun is one wrk invocation's settings.
type wrkRun struct {
	threads, conns int
	duration       time.Duration
	cpus           string // taskset CPU list, or ""
	script         string
	url            string
	args           []string
}

// runWrk runs wrk and returns its report and the CPU time it used. ctx
// ending kills it.
func runWrk(ctx context.Context, r wrkRun) (wrkOut, time.Duration, error) {
	args := []string{"-t", strconv.Itoa(r.threads), "-c", strconv.Itoa(r.conns),
		"-d", fmt.Sprintf("%.0fs", r.duration.Seconds()), "--timeout", "5s", "-s", r.script, r.url}
	if len(r.args) > 0 {
		args = append(append(args, "--"), r.args...)
	}
	bin := "wrk"
	if r.cpus != "" {
		args = append([]string{"-c", r.cpus, bin}, args...)
		bin = "taskset"
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var cpu time.Duration
	if cmd.ProcessState != nil {
		cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	if ctx.Err() != nil {
		return wrkOut{}, 0, ctx.Err()
	}
	if err != nil {
		return wrkOut{}, 0, fmt.Errorf("wrk: %v\n%s", err, out.Bytes())
	}
	w, err := parseWrk(out.Bytes())
	return w, cpu, err
}
