package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/exgate/exgate/internal/doctext"
	"github.com/exgate/exgate/internal/testdeps"
	"github.com/exgate/exgate/limiter"
	"github.com/exgate/exgate/metrics"
)

// promqlMetricNames returns the metric names an expression selects, in
// order of appearance, without duplicates. It is a tokenizer, not a
// parser: it skips strings, comments, label-matcher blocks (reading a
// __name__="x" matcher), range and subquery brackets, numbers and
// durations, Grafana variables, functions (identifiers followed by "("),
// aggregation operators, keywords and the label lists of by, without, on,
// ignoring, group_left and group_right. Whatever identifier is left is a
// metric name. A __name__ regex matcher is an error, because it names no
// metric that can be checked.
func promqlMetricNames(expr string) ([]string, error) {
	var names []string
	add := func(n string) {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	s := expr
	i := 0
	for i < len(s) {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			_, n, err := readString(s[i:])
			if err != nil {
				return nil, fmt.Errorf("%q: %w", expr, err)
			}
			i += n
		case c == '{':
			n, name, err := readMatchers(s[i:])
			if err != nil {
				return nil, fmt.Errorf("%q: %w", expr, err)
			}
			if name != "" {
				add(name)
			}
			i += n
		case c == '[':
			j := strings.IndexByte(s[i:], ']')
			if j < 0 {
				return nil, fmt.Errorf("%q: unclosed [", expr)
			}
			i += j + 1
		case c == '$':
			i += grafanaVariableLen(s[i:])
		case isDigit(c) || c == '.' && i+1 < len(s) && isDigit(s[i+1]):
			for i < len(s) && (isIdentChar(s[i]) || s[i] == '.') {
				i++
			}
		case isIdentStart(c):
			j := i
			for j < len(s) && isIdentChar(s[j]) {
				j++
			}
			ident := s[i:j]
			i = j
			next := skipSpace(s, i)
			lower := strings.ToLower(ident)
			switch {
			case labelListKeywords[lower]:
				if next < len(s) && s[next] == '(' {
					k := strings.IndexByte(s[next:], ')')
					if k < 0 {
						return nil, fmt.Errorf("%q: unclosed label list after %s", expr, ident)
					}
					i = next + k + 1
				}
			case promqlKeywords[lower] || aggregators[lower]:
			case next < len(s) && s[next] == '(':
				// A function call.
			default:
				add(ident)
			}
		default:
			i++
		}
	}
	return names, nil
}

var (
	labelListKeywords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}
	promqlKeywords    = map[string]bool{"and": true, "or": true, "unless": true, "offset": true, "bool": true, "atan2": true, "inf": true, "nan": true}
	aggregators       = map[string]bool{
		"sum": true, "avg": true, "count": true, "min": true, "max": true, "group": true,
		"stddev": true, "stdvar": true, "topk": true, "bottomk": true, "count_values": true,
		"quantile": true, "limitk": true, "limit_ratio": true,
	}
)

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
func isIdentChar(c byte) bool { return isIdentStart(c) || isDigit(c) }

func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// readString reads a PromQL string literal at the start of s and returns
// its (unescaped as far as needed) value and length.
func readString(s string) (string, int, error) {
	q := s[0]
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch {
		case s[i] == '\\' && q != '`' && i+1 < len(s):
			i++
			b.WriteByte(s[i])
		case s[i] == q:
			return b.String(), i + 1, nil
		default:
			b.WriteByte(s[i])
		}
	}
	return "", 0, fmt.Errorf("unclosed string")
}

// readMatchers reads a {...} label-matcher block at the start of s and
// returns its length and the metric name of a __name__="x" matcher.
func readMatchers(s string) (n int, name string, err error) {
	i := 1
	for i < len(s) {
		i = skipSpace(s, i)
		if i >= len(s) {
			break
		}
		switch c := s[i]; {
		case c == '}':
			return i + 1, name, nil
		case c == ',':
			i++
		case isIdentStart(c):
			j := i
			for j < len(s) && isIdentChar(s[j]) {
				j++
			}
			label := s[i:j]
			i = skipSpace(s, j)
			k := i
			for k < len(s) && strings.IndexByte("=!~", s[k]) >= 0 {
				k++
			}
			op := s[i:k]
			i = skipSpace(s, k)
			if op == "" || i >= len(s) || strings.IndexByte("\"'`", s[i]) < 0 {
				return 0, "", fmt.Errorf("label matcher %s: want op and string", label)
			}
			val, l, err := readString(s[i:])
			if err != nil {
				return 0, "", err
			}
			i += l
			if label == "__name__" {
				if op != "=" {
					return 0, "", fmt.Errorf("__name__%s%q names no single metric", op, val)
				}
				name = val
			}
		case c == '"' || c == '\'' || c == '`':
			// A quoted metric name (UTF-8 names): {"name"}.
			val, l, err := readString(s[i:])
			if err != nil {
				return 0, "", err
			}
			name = val
			i += l
		default:
			return 0, "", fmt.Errorf("unexpected %q in label matchers", c)
		}
	}
	return 0, "", fmt.Errorf("unclosed {")
}

// grafanaVariableLen returns the length of a Grafana variable reference
// ($name or ${name...}) at the start of s.
func grafanaVariableLen(s string) int {
	if strings.HasPrefix(s, "${") {
		if j := strings.IndexByte(s, '}'); j >= 0 {
			return j + 1
		}
		return len(s)
	}
	i := 1
	for i < len(s) && isIdentChar(s[i]) {
		i++
	}
	return i
}

func TestPromqlMetricNames(t *testing.T) {
	for _, c := range []struct {
		expr string
		want []string
	}{
		{`rate(exgate_requests_total{code=~"5.."}[5m])`, []string{"exgate_requests_total"}},
		{`sum by (route, code) (rate(a_total{x="y",route=~"$route"}[$__rate_interval]))`, []string{"a_total"}},
		{`a / ignoring (kind) group_left b`, []string{"a", "b"}},
		{"sum without(instance)(x)\n  > on(job) group_right(route) y", []string{"x", "y"}},
		{`sum(x) BY (le) AND y`, []string{"x", "y"}},
		{`{__name__="foo", job="x"}`, []string{"foo"}},
		{`{"utf8.name", job="x"}`, []string{"utf8.name"}},
		{`histogram_quantile(0.99, sum by (le) (rate(h_bucket[5m])))`, []string{"h_bucket"}},
		{`label_replace(up, "dst", "$1", "src", "(.*)")`, []string{"up"}},
		{`x offset 1h @ start()`, []string{"x"}},
		{`m > bool 1 unless n`, []string{"m", "n"}},
		{`count_values("version", exgate_build_info)`, []string{"exgate_build_info"}},
		{"# comment mentions foo_total\nbar", []string{"bar"}},
		{`1 + 2e3 * .5 - 0x1F`, nil},
		{`m{label="a}b", other='x"y'}`, []string{"m"}},
		{`abs(-m) + m`, []string{"m"}},
		{`sum(rate(x[5m:1m])) / scalar(y)`, []string{"x", "y"}},
		{`$metric + ${other:raw} + z`, []string{"z"}},
		{`topk(5, sum by (route) (q:recorded_rate5m))`, []string{"q:recorded_rate5m"}},
		{`vector(1) or absent(nothing_here{job="x"})`, []string{"nothing_here"}},
	} {
		t.Run(c.expr, func(t *testing.T) {
			got, err := promqlMetricNames(c.expr)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
	for _, bad := range []string{`{__name__=~"exgate_.*"}`, `m{x="y`, `rate(m[5m`, `m{x}`} {
		t.Run("error "+bad, func(t *testing.T) {
			if got, err := promqlMetricNames(bad); err == nil {
				t.Errorf("no error; got %q", got)
			}
		})
	}
}

// exported returns exgate's metric families by name with their types, from
// a real registry after every collector has been used once. It checks
// that they equal metrics.Names().
func exported(t *testing.T) map[string]dto.MetricType {
	t.Helper()
	types := map[string]dto.MetricType{}
	for _, mf := range gathered(t) {
		types[mf.GetName()] = mf.GetType()
	}
	return types
}

// gathered returns exgate's metric families from a real registry after
// every collector has been used once, each with at least one series. It
// checks that they equal metrics.Names().
func gathered(t *testing.T) []*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.BuildInfo{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterCatalogueAge(reg); err != nil {
		t.Fatal(err)
	}
	m.SetReplica("exgate-0")
	dup, err := metrics.NewDuplicateStore(reg)
	if err != nil {
		t.Fatal(err)
	}
	dup.Observe(metrics.IdempotencyOpClaim, time.Millisecond, nil)
	dup.SetScriptRuns(scriptRunCounts{})
	edge, err := metrics.NewEdge(reg)
	if err != nil {
		t.Fatal(err)
	}
	edge.CertReload(false)
	edge.SetCertNotAfter(time.Now())
	edge.ProxyRefused(metrics.ProxyMissing)
	edge.HTTP2Error("conn_ENHANCE_YOUR_CALM_too_many_early_resets")
	tr, err := metrics.NewTracing(reg)
	if err != nil {
		t.Fatal(err)
	}
	disc, err := metrics.NewDiscovery(reg)
	if err != nil {
		t.Fatal(err)
	}
	disc.DNSLookup("orders")("error")
	disc.BackendTLS([]string{"orders"}, time.Time{})(true, time.Now())
	tr.Exported(3)
	tr.Dropped("queue_full", 1)
	tr.Dropped("export_failed", 2)
	r := m.Route("place_order")
	r.ObserveRequest("POST", 201, time.Millisecond)
	r.ObserveUpstream(time.Millisecond)
	r.UpstreamError(metrics.UpstreamTimeout)
	r.Fallback(metrics.FallbackLocal)
	m.Limit("place_order", "token", "").Observe(limiter.Limited, "")
	m.ObserveStore(time.Millisecond, os.ErrDeadlineExceeded)
	m.ValidationRejected("invalid_price")
	m.Idempotency(metrics.IdempotencyClaimed)
	m.SetCatalogueLoaded(time.Now())
	m.IncInflight()
	m.ConfigReload(true)
	m.AuthFailure("expired")
	m.AuthFailureCached("bad_signature")
	m.LogRefusalSuppressed("token_not_valid")
	m.JWKSFetch(true)
	m.Overload("list_tickers", "market_data").Shed()
	m.Overload("list_tickers", "market_data").Queued(time.Millisecond)
	m.SetFleetSource(fleet{{Name: "default", Available: true, Instances: []metrics.InstanceStatus{{Addr: "10.0.0.1:9000", State: "healthy",
		Requests: map[string]uint64{"success": 1}, Ejections: map[string]uint64{"consecutive_5xx": 0}}}}})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	want := slices.Concat(metrics.Names(), metrics.IdempotencyStoreNames(), metrics.EdgeNames(), metrics.TracingNames(), metrics.DiscoveryNames())
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("gathered families %v differ from metrics.Names(), IdempotencyStoreNames(), EdgeNames() and TracingNames() %v", names, want)
	}
	return mfs
}

// checkExported reports an error for a name that exgate does not export:
// a family name, a histogram's or summary's _bucket/_sum/_count series, or
// Prometheus's synthetic "up".
func checkExported(types map[string]dto.MetricType, name string) error {
	if _, ok := types[name]; ok || name == "up" {
		return nil
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suf)
		if !ok {
			continue
		}
		switch types[base] {
		case dto.MetricType_HISTOGRAM:
			return nil
		case dto.MetricType_SUMMARY:
			if suf != "_bucket" {
				return nil
			}
		}
	}
	return fmt.Errorf("%s is not a metric exgate exports", name)
}

func TestCheckExported(t *testing.T) {
	types := exported(t)
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"exgate_requests_total", true},
		{"exgate_request_duration_seconds_bucket", true},
		{"exgate_request_duration_seconds_count", true},
		{"go_gc_duration_seconds_sum", true},
		{"go_gc_duration_seconds_bucket", false}, // a summary has no buckets
		{"exgate_requests_total_count", false},   // a counter has no _count
		{"process_cpu_seconds_total", true},
		{"up", true},
		{"exgate_request_total", false},
		{"exgate_ratelimit_fallbacks_total", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := checkExported(types, c.name); (err == nil) != c.ok {
				t.Errorf("checkExported(%s) = %v, want ok=%v", c.name, err, c.ok)
			}
		})
	}
}

// alertRules is alerts.yaml.
type alertRules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func TestPromtoolChecksRulesAndConfig(t *testing.T) {
	promtool := testdeps.Command(t, "promtool", "prometheus")
	for _, args := range [][]string{
		{"check", "rules", "prometheus/alerts.yaml"},
		{"check", "config", "prometheus/prometheus.yaml"},
		{"test", "rules", "prometheus/alerts_test.yaml"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			out, err := exec.Command(promtool, args...).CombinedOutput()
			if err != nil {
				t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			if !strings.Contains(string(out), "SUCCESS") {
				t.Errorf("promtool %s said no SUCCESS:\n%s", strings.Join(args, " "), out)
			}
		})
	}
	// promtool is not vacuous here: it refuses a rule naming a bad
	// duration, and a rules unit test whose expectation is wrong.
	dir := t.TempDir()
	writeFile(t, dir+"/bad.yaml", "groups:\n  - name: x\n    rules:\n      - alert: X\n        expr: up == 0\n        for: 5x\n")
	if out, err := exec.Command(promtool, "check", "rules", dir+"/bad.yaml").CombinedOutput(); err == nil {
		t.Errorf("promtool check rules accepted a bad rule:\n%s", out)
	}
	tests := readFile(t, "prometheus/alerts_test.yaml")
	wrong := strings.Replace(tests, "place_order: 10% of answers are 5xx", "place_order: 11% of answers are 5xx", 1)
	if wrong == tests {
		t.Fatal("alerts_test.yaml lacks the 5xx summary this test alters")
	}
	writeFile(t, dir+"/alerts.yaml", readFile(t, "prometheus/alerts.yaml"))
	writeFile(t, dir+"/alerts_test.yaml", wrong)
	if out, err := exec.Command(promtool, "test", "rules", dir+"/alerts_test.yaml").CombinedOutput(); err == nil {
		t.Errorf("promtool test rules passed a wrong expectation:\n%s", out)
	}
}

func TestAlertRules(t *testing.T) {
	types := exported(t)
	var rules alertRules
	decodeStrict(t, "prometheus/alerts.yaml", &rules)
	ops := readFile(t, "../docs/operations.md")
	unitTests := readFile(t, "prometheus/alerts_test.yaml")

	var alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s: a rule without alert (recording rules belong elsewhere): %q", g.Name, r.Record)
				continue
			}
			alerts = append(alerts, r.Alert)
			t.Run(r.Alert, func(t *testing.T) {
				if d, err := time.ParseDuration(r.For); err != nil || r.For == "" {
					t.Errorf("for: %q: want a duration", r.For)
				} else if d == 0 && !strings.Contains(r.Expr, "increase(") {
					t.Errorf("for: 0 on a level-based alert")
				}
				if s := r.Labels["severity"]; s != "critical" && s != "warning" && s != "info" {
					t.Errorf("labels.severity = %q, want critical, warning or info", s)
				}
				for _, a := range []string{"summary", "description", "runbook_url"} {
					if strings.TrimSpace(r.Annotations[a]) == "" {
						t.Errorf("annotations.%s is missing", a)
					}
				}
				anchor := "#" + strings.ToLower(r.Alert)
				if !strings.HasSuffix(r.Annotations["runbook_url"], "/docs/operations.md"+anchor) {
					t.Errorf("runbook_url %q does not point at docs/operations.md%s", r.Annotations["runbook_url"], anchor)
				}
				if !regexp.MustCompile(`(?m)^#+ ` + regexp.QuoteMeta(r.Alert) + `$`).MatchString(ops) {
					t.Errorf("docs/operations.md has no heading %q for the runbook", r.Alert)
				}
				if !strings.Contains(unitTests, "alertname: "+r.Alert+"\n        exp_alerts:\n          - exp_labels:") {
					t.Errorf("prometheus/alerts_test.yaml has no test where %s fires", r.Alert)
				}
				names, err := promqlMetricNames(r.Expr)
				if err != nil {
					t.Fatal(err)
				}
				if len(names) == 0 {
					t.Errorf("expr names no metric: %s", r.Expr)
				}
				for _, n := range names {
					if err := checkExported(types, n); err != nil {
						t.Error(err)
					}
				}
				if !strings.Contains(r.Expr, `job="exgate"`) {
					t.Errorf(`expr does not select job="exgate" (the scrape job prometheus.yaml names)`)
				}
				// The alerts table: "| name | severity | fires when …, for N m |".
				row := regexp.MustCompile(`(?m)^\| ` + regexp.QuoteMeta(r.Alert) + ` \| (\w+) \| (.*) \|$`).FindStringSubmatch(ops)
				if row == nil {
					t.Fatalf("docs/operations.md's alerts table has no row for %s", r.Alert)
				}
				if row[1] != r.Labels["severity"] {
					t.Errorf("docs/operations.md gives %s severity %s; the rule says %s", r.Alert, row[1], r.Labels["severity"])
				}
				if m := regexp.MustCompile(`for (\d+) ?m\b`).FindStringSubmatch(row[2]); m != nil {
					if d, _ := time.ParseDuration(r.For); d.String() != m[1]+"m0s" {
						t.Errorf("docs/operations.md says %s fires after %s m; the rule's for is %s", r.Alert, m[1], r.For)
					}
				} else if d, _ := time.ParseDuration(r.For); d != 0 {
					t.Errorf("docs/operations.md does not say how long %s must hold (for: %s)", r.Alert, r.For)
				}
			})
		}
	}
	for _, want := range []string{
		"ExgateHigh5xxRatio", "ExgateRateLimitStoreFallback", "ExgateMarketCatalogueStale",
		"Exgate429Surge", "ExgateUpstreamErrors", "ExgateInstanceDown", "ExgateShedding", "ExgateCancelsShed",
	} {
		if !slices.Contains(alerts, want) {
			t.Errorf("alerts.yaml lacks %s", want)
		}
	}
}

// grafanaDashboard is the part of the dashboard JSON the tests read.
type grafanaDashboard struct {
	UID        string         `json:"uid"`
	Title      string         `json:"title"`
	Panels     []grafanaPanel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Definition string          `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

type grafanaPanel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"`
}

func TestDashboard(t *testing.T) {
	types := exported(t)
	var d grafanaDashboard
	if err := json.Unmarshal([]byte(readFile(t, "grafana/exgate-dashboard.json")), &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q: both required for provisioning", d.UID, d.Title)
	}
	vars := dashboardVariables(t, types, &d)
	if !vars["datasource"] {
		t.Error("no datasource variable: panels cannot follow the provisioned Prometheus")
	}

	var all []grafanaPanel
	for _, p := range d.Panels {
		all = append(all, p)
		all = append(all, p.Panels...)
	}
	ids := map[int]bool{}
	used := map[string]bool{}
	exprs := 0
	varRef := regexp.MustCompile(`\$\{?(\w+)`)
	for _, p := range all {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %+v, want prometheus ${datasource}", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs++
			names, err := promqlMetricNames(tg.Expr)
			if err != nil {
				t.Errorf("panel %q: %v", p.Title, err)
				continue
			}
			if len(names) == 0 {
				t.Errorf("panel %q: %q names no metric", p.Title, tg.Expr)
			}
			for _, n := range names {
				used[n] = true
				if err := checkExported(types, n); err != nil {
					t.Errorf("panel %q: %v", p.Title, err)
				}
			}
			for _, m := range varRef.FindAllStringSubmatch(tg.Expr, -1) {
				if !vars[m[1]] {
					t.Errorf("panel %q uses undefined variable $%s", p.Title, m[1])
				}
			}
		}
	}
	checkNoOverlap(t, all)
	if exprs < 15 {
		t.Errorf("only %d queries in the dashboard; the extractor or the dashboard lost panels", exprs)
	}
	// The list: traffic by route and code, p50/p99 latency, 429
	// by route and tier, store errors and fallbacks, validation
	// rejections, upstream errors, catalogue age (and inflight, build info).
	for _, want := range []string{
		"exgate_requests_total", "exgate_request_duration_seconds_bucket",
		"exgate_upstream_duration_seconds_bucket", "exgate_ratelimit_decisions_total",
		"exgate_ratelimit_store_errors_total", "exgate_ratelimit_fallback_total",
		"exgate_validation_rejections_total", "exgate_upstream_errors_total",
		"exgate_market_catalogue_age_seconds", "exgate_inflight_requests", "exgate_build_info",
		"exgate_idempotency_total", "exgate_ratelimit_store_duration_seconds_bucket",
	} {
		if !used[want] {
			t.Errorf("the dashboard does not show %s", want)
		}
	}
	if !strings.Contains(readFile(t, "grafana/exgate-dashboard.json"), `decision=\"limited\"`) {
		t.Error(`no panel selects decision="limited" (429 by route and tier)`)
	}
}

// dashboardVariables checks that every query variable of d is
// label_values over one exported metric, and returns the variables panels
// may use: d's and Grafana's built-in intervals.
func dashboardVariables(t *testing.T, types map[string]dto.MetricType, d *grafanaDashboard) map[string]bool {
	t.Helper()
	vars := map[string]bool{"__rate_interval": true, "__interval": true, "__range": true}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if v.Type == "query" {
			// label_values(expr, label): the expression names metrics too.
			m := regexp.MustCompile(`^label_values\((.*),\s*\w+\)$`).FindStringSubmatch(v.Definition)
			if m == nil {
				t.Errorf("variable %s: query %q is not label_values(expr, label)", v.Name, v.Definition)
				continue
			}
			names, err := promqlMetricNames(m[1])
			if err != nil || len(names) != 1 {
				t.Errorf("variable %s: %q names %v (%v), want one metric", v.Name, m[1], names, err)
			}
			for _, n := range names {
				if err := checkExported(types, n); err != nil {
					t.Errorf("variable %s: %v", v.Name, err)
				}
			}
		}
	}
	return vars
}

// checkNoOverlap reports panels whose grid rectangles overlap.
func checkNoOverlap(t *testing.T, ps []grafanaPanel) {
	t.Helper()
	for i, a := range ps {
		for _, b := range ps[i+1:] {
			ga, gb := a.GridPos, b.GridPos
			if ga.X < gb.X+gb.W && gb.X < ga.X+ga.W && ga.Y < gb.Y+gb.H && gb.Y < ga.Y+ga.H {
				t.Errorf("panels %q %+v and %q %+v overlap", a.Title, ga, b.Title, gb)
			}
		}
	}
}

func TestEveryQueriedMetricIsExported(t *testing.T) {
	// The union over the rules and the dashboard: a plausible number of
	// distinct names proves the extractor is finding them.
	var rules alertRules
	decodeStrict(t, "prometheus/alerts.yaml", &rules)
	var d grafanaDashboard
	if err := json.Unmarshal([]byte(readFile(t, "grafana/exgate-dashboard.json")), &d); err != nil {
		t.Fatal(err)
	}
	var exprs []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	types := exported(t)
	seen := map[string]bool{}
	for _, e := range exprs {
		names, err := promqlMetricNames(e)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			seen[n] = true
			if err := checkExported(types, n); err != nil {
				t.Error(err)
			}
		}
	}
	if len(seen) < 15 {
		t.Errorf("found %d distinct metric names in the rules and dashboard, want at least 15: %v", len(seen), seen)
	}
}

// metricsTableRow is a row of docs/operations.md's metrics table:
// "| `exgate_requests_total` | counter | `route`, `method`, `code` | …".
var metricsTableRow = regexp.MustCompile("(?m)^\\| `(exgate_[a-z0-9_]+)` \\| ([a-z]+) \\| ([^|]*) \\|")

// TestDocumentedMetrics keeps what the docs say about metrics true: every
// row of docs/operations.md's metrics table has the type and exactly the
// labels of the family exgate exports, every family has a row, and every
// exgate_ name written anywhere in README.md or docs/ is one exgate
// exports (a family, or a histogram's _bucket, _sum or _count series).
func TestDocumentedMetrics(t *testing.T) {
	families := map[string]*dto.MetricFamily{}
	for _, mf := range gathered(t) {
		families[mf.GetName()] = mf
	}
	ops := readFile(t, "../docs/operations.md")
	rows := metricsTableRow.FindAllStringSubmatch(ops, -1)
	inTable := map[string]bool{}
	for _, r := range rows {
		name, typ, labels := r[1], r[2], r[3]
		inTable[name] = true
		mf := families[name]
		if mf == nil {
			t.Errorf("docs/operations.md lists %s; exgate exports no such family", name)
			continue
		}
		if want := strings.ToLower(mf.GetType().String()); typ != want {
			t.Errorf("docs/operations.md: %s is a %s, not a %s", name, want, typ)
		}
		var documented []string
		for _, l := range strings.Split(labels, ",") {
			if l = strings.Trim(strings.TrimSpace(l), "`"); l != "" && l != "—" {
				documented = append(documented, l)
			}
		}
		var actual []string
		for _, lp := range mf.GetMetric()[0].GetLabel() {
			actual = append(actual, lp.GetName())
		}
		slices.Sort(documented)
		slices.Sort(actual)
		if !slices.Equal(documented, actual) {
			t.Errorf("docs/operations.md: %s has labels %q, exgate labels it %q", name, documented, actual)
		}
		// Every value of a label from a known set (a kind, a mode, an
		// outcome…) is named in the row; names and free values are not.
		line := ops[strings.Index(ops, r[0]):]
		line = line[:strings.IndexByte(line, '\n')]
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				switch lp.GetName() {
				case "route", "limit", "tier", "method", "code", "version", "revision", "goversion", "replica", "service", "upstream_instance":
					continue
				}
				if !strings.Contains(line, "`"+lp.GetValue()+"`") {
					t.Errorf("docs/operations.md: %s{%s=%q} is exported; its row does not name the value", name, lp.GetName(), lp.GetValue())
				}
			}
		}
	}
	for name := range families {
		if strings.HasPrefix(name, "exgate_") && !inTable[name] {
			t.Errorf("docs/operations.md's metrics table has no row for %s", name)
		}
	}
	if len(rows) < 20 {
		t.Errorf("found %d rows in the metrics table, want at least 20", len(rows))
	}

	types := exported(t)
	name := regexp.MustCompile(`\bexgate_[a-z0-9_]+`)
	for _, d := range doctext.Docs(t, "..") {
		for _, n := range name.FindAllString(d.Text, -1) {
			if err := checkExported(types, n); err != nil {
				t.Errorf("%s: %v", d.Name, err)
			}
		}
	}
}

// fleet is a fixed backend fleet for the metrics.
type fleet []metrics.ServiceStatus

func (f fleet) FleetStatus() []metrics.ServiceStatus { return f }

// scriptRunCounts is a metrics.ScriptRunSource of fixed counts.
type scriptRunCounts struct{ claims, finishes uint64 }

func (c scriptRunCounts) ScriptRuns() (uint64, uint64) { return c.claims, c.finishes }
