package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"text/template"
	"time"
)

// Target names, in the order tables list them.
const (
	tDirect       = "direct"
	tNginx        = "nginx"
	tNginxLimit   = "nginx-limit"
	tCaddy        = "caddy"
	tFloor        = "floor"
	tFloorRP      = "floor-rp"
	tExgateOff    = "exgate-off"
	tExgateMemory = "exgate-memory"
	tExgateRedis  = "exgate-redis"
	// tExgateTraced is exgate-redis with tracing on, 1% of requests
	// sampled, exporting to the trace sink (tracing.go).
	tExgateTraced = "exgate-traced"
	// With -b-bins, a second build of exgate runs beside the first:
	// "<target>-b" for each exgate target.
	bSuffix = "-b"
)

// targetOrder returns the targets in the order tables list them.
func targetOrder() []string {
	return []string{tDirect, tNginx, tNginxLimit, tCaddy, tFloor, tFloorRP, tExgateOff, tExgateOff + bSuffix, tExgateMemory,
		tExgateMemory + bSuffix, tExgateRedis, tExgateRedis + bSuffix, tExgateTraced, tNginxTLS, tCaddyTLS, tExgateTLS}
}

// targetLabel describes a target in the report.
func targetLabel(name string) string {
	if base, ok := strings.CutSuffix(name, bSuffix); ok {
		return targetLabel(base) + " [B build]"
	}
	switch name {
	case tDirect:
		return "direct to backend"
	case tNginx:
		return "NGINX (proxy_pass, keepalive)"
	case tNginxLimit:
		return "NGINX + limit_req"
	case tCaddy:
		return "Caddy (reverse_proxy)"
	case tFloor:
		return "net/http floor proxy"
	case tFloorRP:
		return "ReverseProxy floor proxy"
	case tExgateOff:
		return "exgate, limits off"
	case tExgateMemory:
		return "exgate, memory limits"
	case tExgateRedis:
		return "exgate, Redis limits"
	case tExgateTraced:
		return "exgate, Redis limits, tracing at 1%"
	case tNginxTLS:
		return "NGINX terminating TLS"
	case tCaddyTLS:
		return "Caddy terminating TLS"
	case tExgateTLS:
		return "exgate terminating TLS, Redis limits"
	}
	return name
}

// target is one thing load is driven at.
type target struct {
	name  string
	url   string // base URL, no trailing slash
	proxy *proc  // the proxy process; nil when going straight to the backend
	admin string // exgate's admin address, or ""
}

// keySecret is the HMAC key secret every exgate of the benchmark uses.
const keySecret = "exgate-bench-key-secret-0123456789"

// rateOff is a limit no benchmark reaches: nothing is rejected, yet every
// request is decided.
const rateOff = "1000000000/1h"

// exgateConfig is the YAML of one exgate: the benchmark's routes (orders,
// markets and a default route), limits at rateOff when limits is true,
// the token-spray guard off (one client address presents thousands of
// tokens in the many-keys scenario), access log off, pprof on, no drain
// delay at the end.
var exgateConfig = template.Must(template.New("exgate").Parse(`# Written by bench/cmd/benchrun.
listen: "{{.Listen}}"
admin_listen: "{{.Admin}}"
admin:
  pprof: true
server:
  drain_delay: 0s
{{- if .Cert}}
  tls:
    certificates:
      - {cert_file: "{{.Cert}}", key_file: "{{.Key}}"}
    reload_interval: 0s
{{- end}}
upstream:
  url: "{{.Upstream}}"
log:
  access: false
limiter:
  # limiter.store's former name, which every build reads: -b-bins may run
  # a build from before the rename.
  backend: {{.Backend}}
{{- if .Redis}}
  redis:
    addrs: ["{{.Redis}}"]
{{- end}}
  token_spray:
    max_tokens: 0
{{- if .Trace}}
tracing:
  exporter: otlp
  endpoint: "{{.Trace}}"
  sampler: parentbased_traceidratio
  sampler_arg: 0.01
{{- end}}
routes:
  - name: place_order
    match: POST /api/v1/odr/orders/
    auth: required
    validate: order
{{- if .Limits}}
    limits:
      - {key: token, rate: {{.Rate}}}
{{- end}}
  - name: list_markets
    match: GET /api/v1/mkt/markets/
    auth: optional
{{- if .Limits}}
    limits:
      - {key: address, when: anonymous, rate: {{.Rate}}}
      - {key: token, when: token, rate: {{.Rate}}}
{{- end}}
  - name: default
    match: "*"
    auth: none
`))

// nginxConfig is NGINX in front of the backend, configured as a gateway
// would be: an upstream keep-alive pool, the X-Forwarded-* and request-id
// headers exgate also sets, no access log. With Limit, limit_req applies
// exgate's key rule: a request with a token is counted by token, one
// without by $binary_remote_addr (an empty key is not counted), at a rate
// and burst no benchmark reaches, so nothing is rejected. With Cert and
// Key it terminates TLS (the TLS scenario); keepalive_requests is then
// raised from its default of 1000 so that, like exgate and Caddy, NGINX
// keeps wrk's connections for the whole run instead of making it handshake
// again.
var nginxConfig = template.Must(template.New("nginx").Parse(`# Written by bench/cmd/benchrun.
worker_processes auto;
daemon off;
pid {{.Dir}}/nginx.pid;
error_log {{.Dir}}/error.log warn;
events {
  worker_connections 4096;
}
http {
  access_log off;
  client_body_temp_path {{.Dir}}/body;
  proxy_temp_path {{.Dir}}/proxy;
  fastcgi_temp_path {{.Dir}}/fastcgi;
  uwsgi_temp_path {{.Dir}}/uwsgi;
  scgi_temp_path {{.Dir}}/scgi;
  upstream backend {
    server {{.Backend}};
    keepalive 128;
  }
{{- if .Limit}}
  map $http_authorization $anonymous_addr {
    ""      $binary_remote_addr;
    default "";
  }
  limit_req_zone $anonymous_addr zone=by_addr:16m rate=1000000r/s;
  limit_req_zone $http_authorization zone=by_token:64m rate=1000000r/s;
  limit_req_status 429;
{{- end}}
  server {
{{- if .Cert}}
    listen {{.Listen}} ssl;
    ssl_certificate {{.Cert}};
    ssl_certificate_key {{.Key}};
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_cache shared:SSL:10m;
    keepalive_requests 10000000;
{{- else}}
    listen {{.Listen}};
{{- end}}
    location / {
{{- if .Limit}}
      limit_req zone=by_addr burst=1000000 nodelay;
      limit_req zone=by_token burst=1000000 nodelay;
{{- end}}
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_set_header X-Real-IP $remote_addr;
      proxy_set_header X-Forwarded-Proto $scheme;
      proxy_set_header X-Request-ID $request_id;
    }
  }
}
`))

// caddyConfig is Caddy in front of the backend as a user would first
// write it: a plain reverse_proxy (which sets X-Forwarded-*), no limits,
// no access log, no admin API, no automatic HTTPS; and, as NGINX and
// exgate are given, a keep-alive pool to the backend as large as
// exgate's (upstream.max_idle_conns, 512): at Caddy's default of 32 idle
// connections per host, wrk's 64 connections made it close and open a
// backend connection for about one request in ten. With Cert and Key it
// terminates TLS with them.
var caddyConfig = template.Must(template.New("caddy").Parse(`# Written by bench/cmd/benchrun.
{
	admin off
	auto_https off
}
{{if .Cert}}https{{else}}http{{end}}://{{.Listen}} {
{{- if .Cert}}
	tls {{.Cert}} {{.Key}}
{{- end}}
	reverse_proxy {{.Backend}} {
		transport http {
			keepalive_idle_conns_per_host 512
		}
	}
}
`))

// env is what the stack needs from the outside.
type env struct {
	bins    string // directory holding exgate and exchange-sim
	bBins   string // directory holding a second exgate to compare, or ""
	work    string // scratch directory: configs, logs
	cpus    string // taskset CPU list for the servers, or ""
	targets map[string]*target
	backend *proc
	redis   *proc
	redisAd string
}

// startStack starts the backend, Redis, the three exgates, the two
// NGINXes, Caddy and the net/http floor proxy on free loopback ports and
// waits until each answers. Caddy and the floor are left out, with a
// note, when their binaries are missing (caddy on PATH, floor in bins).
func startStack(ctx context.Context, ps *procs, e *env) error {
	ports, err := freePorts(31)
	if err != nil {
		return err
	}
	next := func() string { p := ports[0]; ports = ports[1:]; return "127.0.0.1:" + strconv.Itoa(p) }
	backendAddr := next()
	e.redisAd = next()
	e.targets = map[string]*target{}
	if err := startBackendAndRedis(ctx, ps, e, backendAddr); err != nil {
		return err
	}
	sink, err := startTraceSink(next())
	if err != nil {
		return err
	}
	if err := startExgates(ps, e, next, backendAddr, sink); err != nil {
		return err
	}
	if err := startNginxes(ps, e, next, backendAddr); err != nil {
		return err
	}
	if err := startGoPeers(ps, e, next(), next(), next(), backendAddr); err != nil {
		return err
	}
	if err := startTLSTargets(ps, e, next, backendAddr); err != nil {
		return err
	}
	return waitTargets(ctx, e)
}

// startBackendAndRedis starts the reference backend on backendAddr and Redis on
// e.redisAd, waits until both answer, and adds the backend as the direct
// target.
func startBackendAndRedis(ctx context.Context, ps *procs, e *env, backendAddr string) error {
	var err error
	e.backend, err = ps.start("exchange-sim", e.cpus, nil, filepath.Join(e.bins, "exchange-sim"), "-listen", backendAddr)
	if err != nil {
		return err
	}
	redisDir := filepath.Join(e.work, "redis")
	if err := os.MkdirAll(redisDir, 0o755); err != nil {
		return err
	}
	_, port, _ := strings.Cut(e.redisAd, ":")
	e.redis, err = ps.start("redis", e.cpus, nil, "redis-server",
		"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", redisDir, "--protected-mode", "no", "--daemonize", "no", "--loglevel", "warning")
	if err != nil {
		return err
	}
	if err := waitHTTP(ctx, e.backend, "http://"+backendAddr+"/api/v1/mkt/markets/"); err != nil {
		return err
	}
	if err := waitTCP(ctx, e.redis, e.redisAd); err != nil {
		return err
	}
	e.targets[tDirect] = &target{name: tDirect, url: "http://" + backendAddr}
	return nil
}

// startExgates starts the exgate targets (limits off, in memory, in
// Redis, traced to sink; and the B build's when there is one), each on
// addresses from next.
func startExgates(ps *procs, e *env, next func() string, backendAddr, sink string) error {
	exgates := []struct {
		name, backend, redis, bins string
		limits                     bool
		trace                      string
	}{
		{tExgateOff, "memory", "", e.bins, false, ""},
		{tExgateMemory, "memory", "", e.bins, true, ""},
		{tExgateRedis, "redis", e.redisAd, e.bins, true, ""},
		{tExgateTraced, "redis", e.redisAd, e.bins, true, sink},
	}
	if e.bBins != "" {
		for _, x := range exgates[:3] {
			x.name, x.bins = x.name+bSuffix, e.bBins
			exgates = append(exgates, x)
		}
	}
	for _, x := range exgates {
		listen, admin := next(), next()
		var buf bytes.Buffer
		if err := exgateConfig.Execute(&buf, map[string]any{
			"Listen": listen, "Admin": admin, "Upstream": "http://" + backendAddr,
			"Backend": x.backend, "Redis": x.redis, "Limits": x.limits, "Rate": rateOff, "Trace": x.trace,
		}); err != nil {
			return err
		}
		path := filepath.Join(e.work, x.name+".yaml")
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			return err
		}
		p, err := ps.start(x.name, e.cpus, []string{"EXGATE_KEY_SECRET=" + keySecret},
			filepath.Join(x.bins, "exgate"), "-config", path)
		if err != nil {
			return err
		}
		e.targets[x.name] = &target{name: x.name, url: "http://" + listen, proxy: p, admin: admin}
	}
	return nil
}

// startNginxes starts the two NGINX targets, without and with a limit.
func startNginxes(ps *procs, e *env, next func() string, backendAddr string) error {
	for _, x := range []struct {
		name  string
		limit bool
	}{{tNginx, false}, {tNginxLimit, true}} {
		dir := filepath.Join(e.work, x.name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		listen := next()
		var buf bytes.Buffer
		if err := nginxConfig.Execute(&buf, map[string]any{
			"Dir": dir, "Backend": backendAddr, "Listen": listen, "Limit": x.limit,
		}); err != nil {
			return err
		}
		conf := filepath.Join(dir, "nginx.conf")
		if err := os.WriteFile(conf, buf.Bytes(), 0o644); err != nil {
			return err
		}
		p, err := ps.start(x.name, e.cpus, nil, "nginx", "-p", dir, "-c", conf, "-e", filepath.Join(dir, "error.log"))
		if err != nil {
			return err
		}
		e.targets[x.name] = &target{name: x.name, url: "http://" + listen, proxy: p}
	}
	return nil
}

// waitTargets waits until every started target answers, and its admin
// listener (an exgate's) is ready.
func waitTargets(ctx context.Context, e *env) error {
	for _, name := range targetOrder() {
		t := e.targets[name]
		if t == nil || t.proxy == nil {
			continue
		}
		p := t.proxy
		if err := waitHTTP(ctx, p, t.url+"/api/v1/mkt/markets/"); err != nil {
			return err
		}
		if t.admin != "" {
			if err := waitHTTP(ctx, p, "http://"+t.admin+"/readyz"); err != nil {
				return err
			}
		}
	}
	return nil
}

// startGoPeers starts Caddy, the net/http floor proxy and the
// ReverseProxy floor proxy (the Go proxies exgate is measured against) on
// caddyAddr, floorAddr and floorRPAddr. A floor whose binary is missing
// from bins is left out, with a note.
func startGoPeers(ps *procs, e *env, caddyAddr, floorAddr, floorRPAddr, backendAddr string) error {
	if caddy, err := exec.LookPath("caddy"); err != nil {
		logf("caddy not found (Debian package caddy): Caddy is left out")
	} else {
		dir := filepath.Join(e.work, tCaddy)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		var buf bytes.Buffer
		if err := caddyConfig.Execute(&buf, map[string]any{"Listen": caddyAddr, "Backend": backendAddr}); err != nil {
			return err
		}
		conf := filepath.Join(dir, "Caddyfile")
		if err := os.WriteFile(conf, buf.Bytes(), 0o644); err != nil {
			return err
		}
		// Caddy keeps state under $HOME and the XDG directories: the
		// scratch directory, not the user's.
		env := []string{"HOME=" + dir, "XDG_DATA_HOME=" + dir, "XDG_CONFIG_HOME=" + dir}
		p, err := ps.start(tCaddy, e.cpus, env, caddy, "run", "--config", conf, "--adapter", "caddyfile")
		if err != nil {
			return err
		}
		e.targets[tCaddy] = &target{name: tCaddy, url: "http://" + caddyAddr, proxy: p}
	}
	for _, f := range []struct{ name, bin, src, addr string }{
		{tFloor, "floor", "nethttp", floorAddr},
		{tFloorRP, "floor-rp", "reverseproxy", floorRPAddr},
	} {
		bin := filepath.Join(e.bins, f.bin)
		if _, err := os.Stat(bin); err != nil {
			logf("%s missing (go build -o %s bench/prototypes/floor/%s/main.go): the %s is left out", bin, bin, f.src, targetLabel(f.name))
			continue
		}
		p, err := ps.start(f.name, e.cpus, []string{"GOGC=400"}, bin, f.addr, "http://"+backendAddr)
		if err != nil {
			return err
		}
		e.targets[f.name] = &target{name: f.name, url: "http://" + f.addr, proxy: p}
	}
	return nil
}

// accessToken signs in to the reference backend with its dev account.
func accessToken(base string) (string, error) {
	res, err := http.Post(base+"/api/v1/usr/authenticate/", "application/json",
		strings.NewReader(`{"api_key":"dev","secret_key":"dev"}`))
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	var v struct {
		Access string `json:"access"`
	}
	if err := json.NewDecoder(res.Body).Decode(&v); err != nil || v.Access == "" {
		return "", fmt.Errorf("authenticate: status %d, %v", res.StatusCode, err)
	}
	return v.Access, nil
}

// orderBody is the order every POST scenario places: a market buy, which
// the reference backend accepts with 201 (filled while its seeded book
// lasts, cancelled unfilled after that; the warm-up drains the book, so
// every measured run sees the same backend work).
const orderBody = `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.001"}`

// probe sends one request of the scenario to the target and checks the
// status, so that a misconfigured target fails the benchmark instead of
// measuring error responses.
func probe(t *target, sc *scenario, token string) error {
	req, err := http.NewRequest(sc.method, t.url+sc.path, nil)
	if err != nil {
		return err
	}
	switch sc.name {
	case scOrders, scOrdersID:
		body := orderBody
		if sc.name == scOrdersID {
			body = strings.TrimSuffix(orderBody, "}") + fmt.Sprintf(`,"identifier":"probe-%d"}`, time.Now().UnixNano())
		}
		req, _ = http.NewRequest(sc.method, t.url+sc.path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
	case scManyKeys:
		req.Header.Set("Authorization", "Bearer bench-probe-token")
	}
	res, err := httpClient(5 * time.Second).Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", t.name, sc.name, err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != sc.want {
		return fmt.Errorf("%s %s: status %d, want %d: %s", t.name, sc.name, res.StatusCode, sc.want, body)
	}
	return nil
}
