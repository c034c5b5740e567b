package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/doctext"
	"github.com/exgate/exgate/internal/redistest"
)

// A documented example is a fenced block in README.md or docs/*.md right
// after a line "<!-- example: NAME -->". TestDocumentedExamples produces
// each one with the real gateway and compares:
//   - a ```sh block: each command is run by bash against the gateway
//     (localhost:8080 replaced by its address, $TOKEN set) and its output
//     must equal the "# " line that follows it;
//   - a ```json block: each line must equal, as JSON, the body of the
//     request its generator sends, in turn;
//   - an ```http block: the status line, the headers it shows and the
//     body must be those of the generator's one answer;
//   - a ```text block: the output of `exgate check-config` on
//     testdata/docs/NAME.yaml (with the environment checkConfigEnv gives
//     it), line for line;
//   - a ```json block of log lines (an example whose generator is in
//     logExamples): each field a line shows must be in the logged entry
//     its generator returns, with that value ("level" and "msg" are the
//     entry's level and message; a string ending in "…" matches any
//     value it begins).
//
// The marker and its block may be indented alike (inside a list item);
// the indentation is not part of the example.
var exampleMarker = regexp.MustCompile("(?m)^([ \t]*)<!-- example: ([a-z0-9_]+) -->\n[ \t]*```([a-z]*)\n((?s:.*?))[ \t]*```")

// docExample is one marked block.
type docExample struct {
	file, lang, body string
}

// docExamples returns every marked block by name.
func docExamples(t *testing.T) map[string]docExample {
	t.Helper()
	out := map[string]docExample{}
	for _, d := range doctext.Docs(t, "../..") {
		for _, m := range exampleMarker.FindAllStringSubmatch(d.Text, -1) {
			if _, dup := out[m[2]]; dup {
				t.Errorf("example %s is marked twice", m[2])
			}
			body := m[4]
			if indent := m[1]; indent != "" {
				lines := strings.Split(body, "\n")
				for i, l := range lines {
					lines[i] = strings.TrimPrefix(l, indent)
				}
				body = strings.Join(lines, "\n")
			}
			out[m[2]] = docExample{file: d.Name, lang: m[3], body: body}
		}
	}
	return out
}

// exampleRequest is what a json or http example's answer comes from.
type exampleRequest struct {
	method, path, body string
	header             []string
	admin              bool // sent to the admin listener
	still              bool // sent to the gateway whose clock stands still
}

func TestDocumentedExamples(t *testing.T) {
	// The limits and duplicate protection in a real Redis, as in
	// production (and as /readyz's example shows).
	rs := redistest.Start(t)
	matchesLimit := func(c *config.Config) {
		l := &c.Route("list_matches").Limits[0]
		l.Rate, l.Burst = config.Rate{N: 5, Period: time.Minute}, 5
	}
	st := startStackEnv(t, func(c *config.Config) {
		c.Limiter.Store = config.StoreRedis
		c.Limiter.Redis.Addrs = []string{rs.Addr}
		// Store deadlines far beyond a loaded machine's stalls: a limit
		// decided by the local fallback, or an order refused 503, is
		// not what the docs show.
		c.Limiter.Redis.Timeout = time.Second
		c.Idempotency.Timeout = 2 * time.Second
		matchesLimit(c)
		c.Route("place_order").Limits[0].Burst = 10 // bulks of at most 10 orders
		c.Validation.Bulk.MaxOrders = 12            // bulk cancels of up to 12 ids
		c.Route("list_tickers").MaxInFlight = 1     // one held request fills it
	}, secretEnv)
	// A throttled request's answer counts whole seconds from the first
	// request it follows: those requests go to a gateway whose limits
	// are in memory, on a clock that stands still, so that however slowly
	// a loaded machine sends them nothing refills in between.
	stillAt := time.Now()
	still := startStackDeps(t, matchesLimit, deps{getenv: secretEnv, now: func() time.Time { return stillAt }})
	token := authenticate(t, st.url)
	before := exampleSetUps(t, st, still, token)
	requests := exampleRequests(token)
	examples := docExamples(t)
	for name := range logExamples {
		requests[name] = nil
	}
	for name := range requests {
		if _, ok := examples[name]; !ok {
			t.Errorf("example %s is produced here but marked nowhere in the docs", name)
		}
	}
	names := make([]string, 0, len(examples))
	for name := range examples {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		ex := examples[name]
		t.Run(name, func(t *testing.T) {
			if f := before[name]; f != nil {
				f()
			}
			checkExample(t, name, ex, requests[name], st, still, rs.Addr, token)
		})
	}
}

// exampleOrder is an order placement with body, by token's client.
func exampleOrder(token, body string) exampleRequest {
	return exampleRequest{method: "POST", path: "/api/v1/odr/orders/", body: body, header: []string{"Authorization", "Bearer " + token, "Content-Type", "application/json"}}
}

// limitOrderJSON is a limit order buying 0.001 BTC at price, with the
// identifier if it is not empty.
func limitOrderJSON(price, identifier string) string {
	o := `{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"` + price + `","base_amount":"0.001"`
	if identifier != "" {
		o += `,"identifier":"` + identifier + `"`
	}
	return o + "}"
}

// exampleSetUps returns, by example, the requests sent before the
// example's own (to use up a limit, use an identifier, fill the backend).
func exampleSetUps(t *testing.T, st, still *stack, token string) map[string]func() {
	return map[string]func(){
		"limits_throttled": func() {
			for i := 0; i < 5; i++ {
				call(t, "GET", still.url+"/api/v1/mth/matches/ETH_USDT/", "")
			}
		},
		"validation_bulk_duplicate": func() {
			r := exampleOrder(token, limitOrderJSON("59000", "grid-7"))
			if code, _, body := call(t, r.method, st.url+r.path, r.body, r.header...); code != http.StatusCreated {
				t.Fatalf("placing the first order: %d %s", code, body)
			}
		},
		"operations_overloaded": func() {
			go func() { // held at the backend until the test ends
				resp, err := http.Get(st.url + "/api/v1/mkt/tickers/?" + holdQuery)
				if err == nil {
					resp.Body.Close()
				}
			}()
			for deadline := time.Now().Add(5 * time.Second); st.backend.held.Load() == 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the held request did not reach the backend")
				}
			}
		},
	}
}

// exampleRequests returns, by example, the requests whose answers a json or
// http example shows, sent as token's client where they need one.
func exampleRequests(token string) map[string][]exampleRequest {
	bulk := func(orders ...string) exampleRequest {
		return exampleRequest{method: "POST", path: "/api/v1/odr/orders/bulk/", body: "[" + strings.Join(orders, ",") + "]", header: exampleOrder(token, "").header}
	}
	return map[string][]exampleRequest{
		"readme_error_shape":     {{method: "TRACE", path: "/api/v1/mkt/markets/"}},
		"api_error_shape":        {{method: "POST", path: "/api/v1/odr/orders/", body: "{}"}},
		"architecture_error":     {{method: "POST", path: "/api/v1/odr/orders/", body: "{}"}},
		"identity_token_invalid": {{method: "GET", path: "/api/v1/mkt/markets/", header: []string{"Authorization", "Bearer eyJhbGciOiJIUzI1NiJ9.e30.c2l+"}}},
		"validation_errors": {
			exampleOrder(token, `{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"64000.005","base_amount":"0.0000001"}`),
			exampleOrder(token, `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.001"} {"symbol":"BTC_USDT"}`),
		},
		"limits_throttled":          {{method: "GET", path: "/api/v1/mth/matches/ETH_USDT/", still: true}},
		"identity_token_spelling":   {{method: "GET", path: "/api/v1/mkt/markets/", header: []string{"Authorization", "Bearer " + token + "="}}},
		"validation_bulk_invalid":   {bulk(limitOrderJSON("60000", ""), limitOrderJSON("60000.5", ""), limitOrderJSON("60000.005", ""))},
		"validation_bulk_duplicate": {bulk(limitOrderJSON("60000", "grid-5"), limitOrderJSON("60000", "grid-6"), limitOrderJSON("60000", "grid-7"))},
		"operations_overloaded":     {{method: "GET", path: "/api/v1/mkt/tickers/"}},
		"operations_readyz":         {{method: "GET", path: "/readyz", admin: true}},
		"limits_bulk_exceeds_burst": {bulk(strings.Split(strings.Repeat(limitOrderJSON("60000", "")+"\n", 12), "\n")[:12]...)},
		"validation_order_ids": {
			{method: "GET", path: "/api/v1/odr/orders/3,,2/", header: exampleOrder(token, "").header},
			{method: "POST", path: "/api/v1/odr/orders/bulk/", body: `{"ids": ["3", ""]}`, header: exampleOrder(token, "").header},
		},
	}
}

// checkExample checks the documented example name, ex, against what
// exgate does: a json or http example against the answers to reqs, sent to
// the gateway st (or still, whose clock stands still, or st's admin
// listener); a log example against what it logs with Redis at redisAddr.
func checkExample(t *testing.T, name string, ex docExample, reqs []exampleRequest, st, still *stack, redisAddr, token string) {
	t.Helper()
	switch ex.lang {
	case "sh":
		checkShellExample(t, ex, st.url, token)
	case "json":
		if gen := logExamples[name]; gen != nil {
			checkLogExample(t, ex, gen(t, redisAddr))
			break
		}
		lines := strings.Split(strings.TrimSpace(ex.body), "\n")
		if len(reqs) != len(lines) {
			t.Fatalf("%s: %d lines, %d requests to produce them", ex.file, len(lines), len(reqs))
		}
		for i, r := range reqs {
			_, _, body := call(t, r.method, st.url+r.path, r.body, r.header...)
			if !sameJSON(lines[i], string(body)) {
				t.Errorf("%s shows\n  %s\nexgate answers\n  %s", ex.file, lines[i], body)
			}
		}
	case "http":
		if len(reqs) != 1 {
			t.Fatalf("%s: an http example needs one request, has %d", ex.file, len(reqs))
		}
		base := st.url
		switch {
		case reqs[0].admin:
			base = "http://" + st.app.adminAd
		case reqs[0].still:
			base = still.url
		}
		checkHTTPExample(t, ex, base, reqs[0])
	case "text":
		checkConfigExample(t, ex, name)
	default:
		t.Fatalf("%s: example %s is a %q block; want sh, json, http or text", ex.file, name, ex.lang)
	}
}

// checkShellExample runs each command of a sh example and compares its
// output with the "# " line after it.
func checkShellExample(t *testing.T, ex docExample, base, token string) {
	var cmd []string
	checked := 0
	for _, line := range strings.Split(ex.body, "\n") {
		want, isOutput := strings.CutPrefix(line, "# ")
		if !isOutput {
			if strings.TrimSpace(line) != "" {
				cmd = append(cmd, line)
			}
			continue
		}
		script := strings.ReplaceAll(strings.Join(cmd, "\n"), "localhost:8080", strings.TrimPrefix(base, "http://"))
		cmd = nil
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
		c.Env = append(os.Environ(), "TOKEN="+token)
		out, err := c.Output()
		cancel()
		if err != nil {
			t.Fatalf("%s: %s: %v", ex.file, script, err)
		}
		if got := strings.TrimSuffix(string(out), "\n"); got != want {
			t.Errorf("%s: %s\nshows\n  %s\nprints\n  %s", ex.file, script, want, got)
		}
		checked++
	}
	if checked == 0 {
		t.Errorf("%s: a sh example without a \"# \" output line", ex.file)
	}
}

// checkHTTPExample compares an http example with the answer to r: status
// line, the headers the example shows, and the body.
func checkHTTPExample(t *testing.T, ex docExample, base string, r exampleRequest) {
	code, h, body := call(t, r.method, base+r.path, r.body, r.header...)
	head, wantBody, _ := strings.Cut(ex.body, "\n\n")
	lines := strings.Split(head, "\n")
	if want := fmt.Sprintf("HTTP/1.1 %d %s", code, http.StatusText(code)); lines[0] != want {
		t.Errorf("%s: status line %q, exgate answers %q", ex.file, lines[0], want)
	}
	for _, l := range lines[1:] {
		k, v, _ := strings.Cut(l, ": ")
		if got := h.Get(k); got != v {
			t.Errorf("%s: %s: %s, exgate answers %q", ex.file, k, v, got)
		}
	}
	if !sameJSON(strings.TrimSpace(wantBody), string(body)) {
		t.Errorf("%s: body\n  %s\nexgate answers\n  %s", ex.file, strings.TrimSpace(wantBody), body)
	}
}

// sameJSON reports whether a and b are the same JSON text up to
// insignificant white space.
func sameJSON(a, b string) bool {
	var ca, cb bytes.Buffer
	if json.Compact(&ca, []byte(a)) != nil || json.Compact(&cb, []byte(b)) != nil {
		return false
	}
	return ca.String() == cb.String()
}

// checkConfigEnv is the environment of a text example's check-config run.
var checkConfigEnv = map[string]map[string]string{
	"configuration_problems": {"EXGATE_UPSTREAM_URL": "ftp://backend"},
}

// checkConfigExample compares a text example with what `exgate
// check-config testdata/docs/NAME.yaml` prints; problems exit 1.
func checkConfigExample(t *testing.T, ex docExample, name string) {
	env := checkConfigEnv[name]
	getenv := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	var out bytes.Buffer
	code := checkConfigCommand([]string{filepath.Join("testdata", "docs", name+".yaml")}, getenv, nil, &out, &out)
	want := 1
	if strings.TrimSpace(ex.body) == "ok" {
		want = 0
	}
	if code != want {
		t.Errorf("exgate check-config exits %d, want %d", code, want)
	}
	if got, shown := strings.TrimSpace(out.String()), strings.TrimSpace(ex.body); got != shown {
		t.Errorf("%s shows\n%s\nexgate check-config prints\n%s", ex.file, shown, got)
	}
}

// logExamples produce the log lines the docs show, by example name.
var logExamples = map[string]func(t *testing.T, redisAddr string) []observer.LoggedEntry{
	"limits_reload_failed": func(t *testing.T, redisAddr string) []observer.LoggedEntry {
		return reloadLogs(t, redisAddr)[:1]
	},
	"limits_reloaded": func(t *testing.T, redisAddr string) []observer.LoggedEntry {
		return reloadLogs(t, redisAddr)[1:]
	},
}

// reloadLogs starts a gateway on liveConfig, reloads it with a file whose
// first limit has a bad rate, then with live and restart-only settings
// changed, and returns the two log lines.
func reloadLogs(t *testing.T, redisAddr string) []observer.LoggedEntry {
	path := filepath.Join(t.TempDir(), "exgate.yaml")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const backend = "http://127.0.0.1:9"
	write(fmt.Sprintf(liveConfig, backend, "2s", "info", redisAddr, 1, "local", "100ms"))
	cfg, err := config.Load(path, secretEnv)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	a := startApp(t, cfg, deps{log: zap.New(core), now: time.Now, getenv: secretEnv, configPath: path})
	bad := strings.Replace(fmt.Sprintf(liveConfig, backend, "2s", "info", redisAddr, 1, "local", "100ms"),
		"{ name: slow, match: GET /slow/ }", "{ name: slow, match: GET /slow/, limits: [{ key: address, rate: 0/1h }] }", 1)
	write(bad)
	a.reloadNow()
	write(fmt.Sprintf(liveConfig, backend, "100ms", "debug", redisAddr, 4, "closed", "1s"))
	a.reloadNow()
	var out []observer.LoggedEntry
	for _, e := range logs.TakeAll() {
		if strings.HasPrefix(e.Message, "configuration reload") {
			out = append(out, e)
		}
	}
	if len(out) != 2 {
		t.Fatalf("%d reload log lines, want 2: %v", len(out), out)
	}
	return out
}

// checkLogExample compares the log lines of a json example with entries.
func checkLogExample(t *testing.T, ex docExample, entries []observer.LoggedEntry) {
	lines := strings.Split(strings.TrimSpace(ex.body), "\n")
	if len(lines) != len(entries) {
		t.Fatalf("%s: %d log lines, %d entries to produce them", ex.file, len(lines), len(entries))
	}
	for i, l := range lines {
		var shown map[string]any
		if err := json.Unmarshal([]byte(l), &shown); err != nil {
			t.Fatalf("%s: %v: %s", ex.file, err, l)
		}
		logged := map[string]any{}
		b, err := json.Marshal(entries[i].ContextMap())
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &logged); err != nil {
			t.Fatal(err)
		}
		logged["level"], logged["msg"] = entries[i].Level.String(), entries[i].Message
		for k, want := range shown {
			got, ok := logged[k]
			if s, isString := want.(string); isString && strings.HasSuffix(s, "…") {
				if g, _ := got.(string); ok && strings.HasPrefix(g, strings.TrimSuffix(s, "…")) {
					continue
				}
			} else if ok && fmt.Sprint(got) == fmt.Sprint(want) {
				continue
			}
			t.Errorf("%s: %q shows %v; exgate logs %v", ex.file, k, want, got)
		}
	}
}
