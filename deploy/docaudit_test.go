package deploy

import (
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/exgate/exgate/internal/doctext"
)

// The docs audit's metric and alert parts (the rest is in config's
// TestDocsProseDefaults and cmd/exgate's docaudit_test.go).

// metricMention is a metric named in the docs, with the labels it is
// written with: exgate_requests_total{route,method,code},
// exgate_idempotency_total{outcome="store_error"}.
var metricMention = regexp.MustCompile(`\bexgate_[a-z0-9_]+[a-z0-9](?:\{[^}\n]*\})?`)

// TestDocsMetricMentions: every metric the README and docs name, in
// prose, tables and queries, is one exgate exports, under its family's
// name or one of a histogram's series; the labels written with it are
// its labels, and a list of bare label names is all of them.
func TestDocsMetricMentions(t *testing.T) {
	labels := map[string][]string{}
	for _, mf := range gathered(t) {
		var ls []string
		for _, lp := range mf.GetMetric()[0].GetLabel() {
			ls = append(ls, lp.GetName())
		}
		slices.Sort(ls)
		labels[mf.GetName()] = ls
		if mf.GetType().String() == "HISTOGRAM" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				labels[mf.GetName()+s] = ls
			}
			labels[mf.GetName()+"_bucket"] = append(slices.Clone(ls), "le")
		}
	}
	found := 0
	for _, d := range doctext.Docs(t, "..") {
		if d.Name == "performance.md" || d.Name == "performance-history.md" {
			continue // a history of measurements, some of names since removed (TestDocsNameOnlyWhatExists)
		}
		for _, m := range metricMention.FindAllStringIndex(d.Text, -1) {
			mention := d.Text[m[0]:m[1]]
			line := 1 + strings.Count(d.Text[:m[0]], "\n")
			name, sel, _ := strings.Cut(mention, "{")
			if strings.HasSuffix(d.Text[:m[0]], "/") || strings.HasPrefix(d.Text[m[1]:], ".") || strings.HasPrefix(d.Text[m[1]:], "/") {
				continue // a path or a file name
			}
			have, ok := labels[name]
			if !ok {
				if !doctext.SaysGone(d.Text, m[0], m[1], regexp.MustCompile(`\b(?:removed|is gone|no longer)\b`)) {
					t.Errorf("%s:%d: %s: exgate exports no such metric", d.Name, line, name)
				}
				continue
			}
			found++
			if sel == "" {
				continue
			}
			var bare []string
			for _, item := range strings.Split(strings.TrimSuffix(sel, "}"), ",") {
				item = strings.TrimSpace(item)
				l := regexp.MustCompile(`^[a-z_]+`).FindString(item)
				if l == "" {
					continue
				}
				if !slices.Contains(have, l) {
					t.Errorf("%s:%d: %s: %s has no label %q (its labels: %v)", d.Name, line, mention, name, l, have)
				}
				if l == item {
					bare = append(bare, l)
				}
			}
			if len(bare) > 0 && len(bare) == len(strings.Split(strings.TrimSuffix(sel, "}"), ",")) {
				slices.Sort(bare)
				if want := labels[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")]; !slices.Equal(bare, want) {
					t.Errorf("%s:%d: %s: the labels of %s are %v", d.Name, line, mention, name, want)
				}
			}
		}
	}
	if found < 40 {
		t.Errorf("only %d metric mentions found; the pattern broke", found)
	}
}

// alertRow is a row of docs/operations.md's table of alerts:
// "| ExgateRateLimitStoreSlow | warning | … over 20 ms for 10 m |".
var alertRow = regexp.MustCompile(`(?m)^\| (Exgate[A-Za-z0-9]+) \| [a-z]+ \| (.*) \|$`)

// stated quantities in an alert's description: durations, percentages,
// rates and plain amounts with their unit.
var (
	statedDuration = regexp.MustCompile(`(\d+(?:\.\d+)?) ?(ms|s|m|min|h|days?)\b|\bevery (minute)\b`)
	statedPercent  = regexp.MustCompile(`(\d+(?:\.\d+)?)%`)
	statedRate     = regexp.MustCompile(`(\d+(?:\.\d+)?) ?(?:req/s|/s|connections/s)`)
	exprNumber     = regexp.MustCompile(`(\d+(?:\.\d+)?)(?: \* (\d+))?`)
	exprRange      = regexp.MustCompile(`\[(\d+[smh])\]`)
)

// TestDocsAlertWindows: each alert's line in docs/operations.md states
// only the numbers its rule uses — every duration is the rule's for, one
// of its expression's windows, or a threshold (in seconds); every
// percentage and rate a threshold — and names the rule's for.
func TestDocsAlertWindows(t *testing.T) {
	var rules alertRules
	decodeStrict(t, "prometheus/alerts.yaml", &rules)
	type rule struct{ expr, forDur string }
	byName := map[string]rule{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			byName[r.Alert] = rule{r.Expr, r.For}
		}
	}
	rows := alertRow.FindAllStringSubmatch(readFile(t, "../docs/operations.md"), -1)
	if len(rows) != len(byName) {
		t.Fatalf("the alerts table has %d rows, the rules %d alerts", len(rows), len(byName))
	}
	for _, row := range rows {
		name, text := row[1], row[2]
		r, ok := byName[name]
		if !ok {
			t.Errorf("the alerts table lists %s, which no rule defines", name)
			continue
		}
		forDur, err := time.ParseDuration(r.forDur)
		if err != nil {
			t.Errorf("%s: for %q", name, r.forDur)
			continue
		}
		var windows []float64
		for _, m := range exprRange.FindAllStringSubmatch(r.expr, -1) {
			d, err := time.ParseDuration(m[1])
			if err != nil {
				t.Errorf("%s: window %s: %v", name, m[1], err)
			}
			windows = append(windows, d.Seconds())
		}
		var numbers []float64
		for _, m := range exprNumber.FindAllStringSubmatch(exprRange.ReplaceAllString(r.expr, ""), -1) {
			n, _ := strconv.ParseFloat(m[1], 64)
			if m[2] != "" {
				f, _ := strconv.ParseFloat(m[2], 64)
				n *= f
			}
			numbers = append(numbers, n)
		}
		near := func(xs []float64, v float64) bool {
			return slices.ContainsFunc(xs, func(x float64) bool { return math.Abs(x-v) < 1e-9*math.Max(1, v) })
		}
		statesFor := forDur == 0
		for _, m := range statedDuration.FindAllStringSubmatch(text, -1) {
			secs := 60.0
			if m[3] == "" {
				v, _ := strconv.ParseFloat(m[1], 64)
				secs = v * map[string]float64{"ms": 0.001, "s": 1, "m": 60, "min": 60, "h": 3600, "day": 86400, "days": 86400}[m[2]]
			}
			switch {
			case secs == forDur.Seconds():
				statesFor = true
			case near(windows, secs), near(numbers, secs):
			default:
				t.Errorf("%s: the table says %q; the rule has for %s, windows %v and thresholds %v", name, m[0], r.forDur, windows, numbers)
			}
		}
		for _, m := range statedPercent.FindAllStringSubmatch(text, -1) {
			if v, _ := strconv.ParseFloat(m[1], 64); !near(numbers, v/100) {
				t.Errorf("%s: the table says %s; the rule's thresholds are %v", name, m[0], numbers)
			}
		}
		for _, m := range statedRate.FindAllStringSubmatch(text, -1) {
			if v, _ := strconv.ParseFloat(m[1], 64); !near(numbers, v) {
				t.Errorf("%s: the table says %s; the rule's thresholds are %v", name, m[0], numbers)
			}
		}
		if !statesFor {
			t.Errorf("%s: the table does not say the rule's for, %s: %q", name, r.forDur, text)
		}
	}
}
