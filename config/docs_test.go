package config

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/exgate/exgate/internal/doctext"
)

// TestDocsListEveryVariable keeps docs/configuration.md true: every
// EXGATE_ override the loader would consult appears in it, in the generic
// form used by its table (EXGATE_ROUTES_<i>_..., EXGATE_TIERS_<TIER>_<ROUTE>_...).
func TestDocsListEveryVariable(t *testing.T) {
	doc, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	c := Default()
	c.Tiers = map[string]map[string]TierLimit{"tier": {"route": {}}}
	var asked []string
	e := &envApplier{
		getenv: func(k string) (string, bool) { asked = append(asked, k); return "", false },
		col:    &collector{},
		src:    &sources{lines: map[string]int{}, envs: map[string]string{}},
	}
	e.walk(reflect.ValueOf(c).Elem(), "", "EXGATE")

	routes := regexp.MustCompile(`^EXGATE_ROUTES_\d+_`)
	limits := regexp.MustCompile(`_LIMITS_\d+_`)
	keys := regexp.MustCompile(`_JWT_KEYS_\d+_`)
	seen := map[string]bool{}
	for _, k := range asked {
		k = routes.ReplaceAllString(k, "EXGATE_ROUTES_<i>_")
		k = limits.ReplaceAllString(k, "_LIMITS_<j>_")
		k = keys.ReplaceAllString(k, "_JWT_KEYS_<i>_")
		k = strings.Replace(k, "EXGATE_TIERS_TIER_ROUTE_", "EXGATE_TIERS_<TIER>_<ROUTE>_", 1)
		if seen[k] {
			continue
		}
		seen[k] = true
		if !strings.Contains(string(doc), "`"+k+"`") {
			t.Errorf("docs/configuration.md does not list %s", k)
		}
	}
	if len(seen) < 40 {
		t.Errorf("only %d variables found; the walk is broken", len(seen))
	}
}

// TestReadmeDefaultsAreTheDefaults keeps the README's defaults block true:
// it must load to exactly Default(), and show every key -print-config
// prints. Within a route, a key the block leaves out must be one the
// paragraph after the block names (the routes there write only what they
// set).
func TestReadmeDefaultsAreTheDefaults(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	begin := strings.Index(s, "<!-- defaults:begin -->")
	end := strings.Index(s, "<!-- defaults:end -->")
	if begin < 0 || end < begin {
		t.Fatal("README has no defaults block")
	}
	block := s[begin:end]
	block = block[strings.Index(block, "```yaml\n")+len("```yaml\n"):]
	block = block[:strings.LastIndex(block, "```")]
	c, err := Parse("README.md", []byte(block), nil)
	if err != nil {
		t.Fatalf("README defaults do not load: %v", err)
	}
	if !reflect.DeepEqual(c, Default()) {
		got, _ := c.Marshal()
		want, _ := Default().Marshal()
		t.Errorf("README defaults differ from Default():\n%s", diffLines(string(got), string(want)))
	}
	printed, err := Default().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	shown := yamlKeys(t, []byte(block))
	after := s[end:]
	if i := strings.Index(after, "\n\n"); i >= 0 {
		after = after[i+2:]
	}
	if i := strings.Index(after, "\n\n"); i >= 0 {
		after = after[:i]
	}
	routeKey := regexp.MustCompile(`^routes\[\d+\]\.(?:limits\[\d+\]\.)?([a-z_]+)`)
	for _, k := range yamlKeys(t, printed) {
		if slices.Contains(shown, k) {
			continue
		}
		if m := routeKey.FindStringSubmatch(k); m != nil {
			if !strings.Contains(after, "`"+m[1]+"`") {
				t.Errorf("README's defaults block leaves out %s, and the paragraph after it does not name `%s`", k, m[1])
			}
			continue
		}
		t.Errorf("README's defaults block lacks %s, which -print-config prints", k)
	}
}

// yamlKeys returns the path of every key of the YAML document data, as
// the loader names them ("server.tls.reload_interval", "routes[2].limits[0].rate").
func yamlKeys(t *testing.T, data []byte) []string {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || len(doc.Content) == 0 {
		t.Fatalf("cannot read YAML: %v", err)
	}
	var keys []string
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				kp := joinKey(path, n.Content[i].Value)
				keys = append(keys, kp)
				walk(n.Content[i+1], kp)
			}
		case yaml.SequenceNode:
			for i, item := range n.Content {
				walk(item, joinIndex(path, i))
			}
		}
	}
	walk(doc.Content[0], "")
	return keys
}

// diffLines lists the lines of a missing from b and of b missing from a,
// each after the name of its side.
func diffLines(a, b string) string { return diffNamed("README", a, "Default", b) }

// diffNamed is diffLines with the sides named an and bn.
func diffNamed(an, a, bn, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	ma, mb := in(a), in(b)
	var out []string
	for _, l := range strings.Split(a, "\n") {
		if !mb[l] {
			out = append(out, an+": "+l)
		}
	}
	for _, l := range strings.Split(b, "\n") {
		if !ma[l] {
			out = append(out, bn+": "+l)
		}
	}
	return strings.Join(out, "\n")
}

// keysTableRow is a row of docs/configuration.md's keys table:
// "| `server.read_timeout` | duration | `30s` | `EXGATE_SERVER_READ_TIMEOUT` | …".
var keysTableRow = regexp.MustCompile("(?m)^\\| `([a-z0-9_.<>\\[\\]]+)` \\| [^|]*(?:\\\\\\|[^|]*)* \\| ([^|]*) \\| ([^|]*) \\|")

// TestDocsKeysAreTheKeys keeps docs/configuration.md's keys table true:
// every key it lists is one the loader accepts, named by the variable
// its environment column gives, and every default it shows as one value
// is the default: writing that value into a file loads to exactly
// Default().
func TestDocsKeysAreTheKeys(t *testing.T) {
	doc, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	want, err := Default().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	rows := keysTableRow.FindAllStringSubmatch(string(doc), -1)
	defaults := 0
	for _, r := range rows {
		key, def, env := r[1], strings.TrimSpace(r[2]), strings.TrimSpace(r[3])
		t.Run(key, func(t *testing.T) {
			// The variable is the key's path, upper case, "." and list
			// indexes written as "_".
			v := "EXGATE_" + strings.NewReplacer("[<I>]", "_<i>", "[<J>]", "_<j>", ".", "_").Replace(strings.ToUpper(key))
			if env != "—" && !strings.HasPrefix(env, "`"+v+"`") {
				t.Errorf("environment column %s, want `%s`", env, v)
			}
			if strings.Contains(key, "<") {
				return
			}
			// One backticked value, optionally followed by a remark in
			// parentheses: `30s`, `0` (= N), `[]` (off).
			value, rest, ok := strings.Cut(strings.TrimPrefix(def, "`"), "`")
			if !strings.HasPrefix(def, "`") || !ok || (rest != "" && !strings.HasPrefix(rest, " (")) {
				if !strings.HasPrefix(def, "—") && def != "the table below" && key != "identity.jwt.keys" && key != "cors.exposed_headers" {
					t.Errorf("default %q is not one value; write it as `value` (remark)", def)
				}
				return
			}
			defaults++
			parts := strings.Split(key, ".")
			var y strings.Builder
			for i, p := range parts[:len(parts)-1] {
				y.WriteString(strings.Repeat("  ", i) + p + ":\n")
			}
			last := strings.Repeat("  ", len(parts)-1) + parts[len(parts)-1] + ": "
			c, err := Parse("configuration.md", []byte(y.String()+last+value+"\n"), nil)
			if err != nil {
				c, err = Parse("configuration.md", []byte(y.String()+last+strconv.Quote(value)+"\n"), nil)
			}
			if err != nil {
				t.Fatalf("the documented default does not load: %v", err)
			}
			got, err := c.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Errorf("%s: %s is not the default:\n%s", key, value, diffNamed("documented", string(got), "Default", string(want)))
			}
		})
	}
	if len(rows) < 100 || defaults < 80 {
		t.Errorf("found %d keys and %d defaults in the table; the table's form changed", len(rows), defaults)
	}
}

// docKey is a configuration path written in backticks in the docs:
// `limiter.redis.timeout`, `routes[0].limits`, `tiers.vip.place_order.rate`,
// `limiter.store: redis`.
var docKey = regexp.MustCompile("`([a-z_]+(?:\\[[^\\]` ]+\\])?(?:\\.[a-z0-9_<>]+(?:\\[[^\\]` ]+\\])?)+)(?:[:=][^`\n]*)?`")

// historic says a name is mentioned as something that no longer
// exists: the text around it (same paragraph, about two lines either
// side) says it was removed or is gone.
var historic = regexp.MustCompile(`\b(?:removed|is gone|are gone|no longer exists?)\b`)

// isHistoric reports whether the mention at doc[start:end] is of
// something gone, by the text around it within its paragraph.
func isHistoric(doc string, start, end int) bool {
	return doctext.SaysGone(doc, start, end, historic)
}

// isKeyPath reports whether path names a key, or a section, of the
// configuration of type t: struct fields by their YAML names, any map key
// (`<tier>`, `vip`), any list index (`[0]`, `[<i>]`).
func isKeyPath(t reflect.Type, path string) bool {
	for _, seg := range strings.Split(path, ".") {
		name, index, _ := strings.Cut(seg, "[")
		if t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch {
		case t.Kind() == reflect.Map:
			t = t.Elem()
		case t.Kind() == reflect.Struct:
			found := false
			for i := 0; i < t.NumField(); i++ {
				if yamlName(t.Field(i)) == name {
					t, found = t.Field(i).Type, true
					break
				}
			}
			if !found {
				return false
			}
		default:
			return false
		}
		for ; index != ""; _, index, _ = strings.Cut(index, "[") {
			if t.Kind() != reflect.Slice {
				return false
			}
			t = t.Elem()
		}
	}
	return true
}

// TestDocsNameOnlyKeysThatExist keeps every configuration path the README
// and docs/ write in backticks a key or section exgate reads, unless the
// text around it says it was removed.
func TestDocsNameOnlyKeysThatExist(t *testing.T) {
	cfg := reflect.TypeOf(Config{})
	sections := map[string]bool{}
	for i := 0; i < cfg.NumField(); i++ {
		if n := yamlName(cfg.Field(i)); n != "" {
			sections[n] = true
		}
	}
	for _, c := range []struct {
		path string
		ok   bool
	}{
		{"limiter.redis.timeout", true}, {"routes[0].limits[<j>].rate", true}, {"tiers.vip.place_order.burst", true},
		{"server.tls.certificates[<i>].cert_file", true}, {"validation.markets.BTC_USDT.min_price", true},
		{"upstream.transport", false}, {"routes.limits", false}, {"limiter.redis.timeout.x", false}, {"server[0]", false},
	} {
		if got := isKeyPath(cfg, c.path); got != c.ok {
			t.Errorf("isKeyPath(%s) = %v, want %v", c.path, got, c.ok)
		}
	}
	checked := 0
	for _, d := range doctext.Docs(t, "..") {
		doc := d.Text
		for _, m := range docKey.FindAllStringSubmatchIndex(doc, -1) {
			path := doc[m[2]:m[3]]
			first, _, _ := strings.Cut(path, ".")
			first, _, _ = strings.Cut(first, "[")
			if !sections[first] || regexp.MustCompile(`\.(go|md|yaml|json|lua|py)$`).MatchString(path) {
				continue
			}
			checked++
			if strings.Contains(doc[m[0]:m[1]], "unknown key") {
				continue // an error message about a misspelt key
			}
			if !isKeyPath(cfg, path) && !isHistoric(doc, m[0], m[1]) {
				line := strings.Count(doc[:m[0]], "\n") + 1
				t.Errorf("%s:%d: `%s` is not a configuration key (say \"since removed\" next to a key that is gone)", d.Name, line, path)
			}
		}
	}
	if checked < 200 {
		t.Errorf("checked %d keys in the docs, want at least 200", checked)
	}
}

// TestDocsReloadListsAreTheModes keeps docs/limits.md's "Reloading" true
// to the reload tags: every setting under a key its live list names
// (but what it excepts: "`validation` except its `catalogue`") reloads
// live, and no live setting is missing from it; every setting under a key
// its restart list names waits for a restart, unless the live list names
// it more closely (`server.tls.certificates` within `server`).
func TestDocsReloadListsAreTheModes(t *testing.T) {
	b, err := os.ReadFile("../docs/limits.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	between := func(from, to string) string {
		i := strings.Index(doc, from)
		j := strings.Index(doc[max(i, 0):], to)
		if i < 0 || j < 0 {
			t.Fatalf("docs/limits.md lacks %q … %q", from, to)
		}
		return doc[i : i+j]
	}
	modes := ReloadModes()
	name := regexp.MustCompile("`([a-z0-9_.*]+)`(?: except its `([a-z_]+)`)?")
	under := func(path, key string) bool {
		key = strings.TrimSuffix(key, ".*")
		return path == key || strings.HasPrefix(path, key+".")
	}
	liveText := between("settings apply to requests that start from then on:", "Requests under way")
	restartText := between("Everything else is fixed at start:", "Adding")

	listed := map[string]bool{} // the settings the live list covers
	for _, m := range name.FindAllStringSubmatch(liveText, -1) {
		for p := range modes {
			if under(p, m[1]) && (m[2] == "" || !under(p, m[1]+"."+m[2])) {
				listed[p] = true
			}
		}
	}
	for p, mode := range modes {
		if listed[p] && mode != ReloadLive {
			t.Errorf("docs/limits.md lists %s as applied by a reload; it waits for a restart", p)
		}
		if !listed[p] && mode == ReloadLive {
			t.Errorf("%s reloads live; docs/limits.md's live list does not name it", p)
		}
	}
	restartNames := 0
	for _, m := range name.FindAllStringSubmatch(restartText, -1) {
		for p, mode := range modes {
			if under(p, m[1]) {
				restartNames++
				if mode != ReloadRestart && !listed[p] {
					t.Errorf("docs/limits.md says %s (under %s) waits for a restart; it reloads live", p, m[1])
				}
			}
		}
	}
	if len(listed) < 20 || restartNames < 20 {
		t.Errorf("the lists cover %d live and %d restart-only settings; their form changed", len(listed), restartNames)
	}
}

// defaultRouteRow is a row of docs/configuration.md's default route table:
// "| 0 | `place_order` | `POST /api/v1/odr/orders/` | required | order | token: 5400/1h | place |".
var defaultRouteRow = regexp.MustCompile("(?m)^\\| (\\d+) \\| `([a-z_]+)` \\| `([^`]+)`[^|]* \\| ([a-z]+) \\|\\s*([a-z_]*)\\s*\\| ([^|]+) \\| ([a-z_]+)[^|]* \\|$")

// TestDocsDefaultRouteTable keeps docs/configuration.md's default route
// table equal to DefaultRoutes: order, names, matches, auth, validation,
// priority, and the limits of every row that spells them out.
func TestDocsDefaultRouteTable(t *testing.T) {
	b, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	c := Default()
	if err := c.Validate(); err != nil { // normalises priorities and names
		t.Fatal(err)
	}
	rows := defaultRouteRow.FindAllStringSubmatch(string(b), -1)
	if len(rows) != len(c.Routes) {
		t.Fatalf("the table has %d rows; DefaultRoutes has %d routes", len(rows), len(c.Routes))
	}
	for i, row := range rows {
		r := c.Routes[i]
		t.Run(r.Name, func(t *testing.T) {
			m, _ := r.Match.MarshalText()
			got := []string{row[1], row[2], row[3], row[4], row[5], row[7]}
			want := []string{strconv.Itoa(i), r.Name, string(m), r.Auth, r.Validate, r.Priority}
			if !slices.Equal(got, want) {
				t.Errorf("row %q, DefaultRoutes says %q", got, want)
			}
			limits := strings.ReplaceAll(strings.TrimSpace(row[6]), "`", "")
			if strings.HasPrefix(limits, "as ") || strings.HasPrefix(limits, "none") {
				return
			}
			var parts []string
			for _, l := range r.Limits {
				p := l.Name
				if l.When != WhenAlways {
					p += " when " + l.When
				}
				parts = append(parts, p+": "+l.Rate.String())
				if l.Burst != int(l.Rate.N) || l.Shadow {
					t.Errorf("limit %s: burst %d, shadow %v; the table says every default limit has burst N and no shadow", l.Name, l.Burst, l.Shadow)
				}
			}
			if want := strings.Join(parts, "; "); limits != want {
				t.Errorf("limits %q, DefaultRoutes says %q", limits, want)
			}
		})
	}
}

// proseDefault is a default stated in the docs' prose: "`server.idle_timeout`
// (2 minutes by default)", "`limiter.redis.timeout` (default 25 ms)",
// "`validation.catalogue.refresh`, 30 s by default",
// "`idempotency.max_per_account` (20,000)".
var proseDefault = regexp.MustCompile("`([a-z_]+(?:\\.[a-z0-9_]+)+)`(?: \\((?:default )?|, )" +
	"((?:\\d[\\d,.]*)(?: ?(?:ms|s|m|h|minutes?|hours?|seconds?|days?|KiB|MiB|GiB))?|on|off|`[^`]+`)" +
	"( by default|[);,])")

// proseValue turns a value as the prose writes it into YAML: "2 minutes"
// → 2m, "30 s" → 30s, "20,000" → 20000, "64 MiB" → 64MiB, on → true.
func proseValue(v string) string {
	v = strings.Trim(v, "`")
	switch v {
	case "on":
		return "true"
	case "off":
		return "false"
	}
	v = strings.ReplaceAll(v, ",", "")
	// Plurals first: " minute" would leave the s of " minutes" behind.
	for _, u := range [][2]string{{" minutes", "m"}, {" minute", "m"}, {" hours", "h"}, {" hour", "h"}, {" seconds", "s"}, {" second", "s"}, {" days", "d"}, {" day", "d"}} {
		v = strings.Replace(v, u[0], u[1], 1)
	}
	if n, unit, ok := strings.Cut(v, " "); ok {
		if unit == "d" {
			if d, err := strconv.Atoi(n); err == nil {
				return strconv.Itoa(24*d) + "h"
			}
		}
		v = n + unit
	}
	return v
}

// TestDocsProseDefaults keeps the defaults the docs state in their prose
// true, as TestDocsKeysAreTheKeys does for the keys table: each value
// written after a key, in parentheses or followed by "by default", loads
// to exactly Default() when written into a file at that key.
func TestDocsProseDefaults(t *testing.T) {
	want, err := Default().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, d := range doctext.Docs(t, "..") {
		if d.Name == "performance.md" || d.Name == "performance-history.md" || d.Name == "configuration.md" {
			continue // measurements of other settings; the keys table has its own test
		}
		for _, m := range proseDefault.FindAllStringSubmatchIndex(d.Text, -1) {
			key, raw := d.Text[m[2]:m[3]], d.Text[m[4]:m[5]]
			line := 1 + strings.Count(d.Text[:m[0]], "\n")
			switch {
			case strings.HasPrefix(raw, "`") && !strings.HasSuffix(d.Text[:m[4]], "(default "):
				continue // a list of keys ("`a`, `b`"), not a value
			case strings.HasPrefix(d.Text[m[1]:], " with "):
				continue // a default that depends on another setting ("1 by default with Cluster")
			}
			if !isKeyPath(reflect.TypeOf(Config{}), key) || strings.HasPrefix(key, "tiers.") || strings.HasPrefix(key, "validation.markets.") {
				continue // not a key of the configuration with a default of its own
			}
			checked++
			parts := strings.Split(key, ".")
			var y strings.Builder
			for i, p := range parts[:len(parts)-1] {
				y.WriteString(strings.Repeat("  ", i) + p + ":\n")
			}
			y.WriteString(strings.Repeat("  ", len(parts)-1) + parts[len(parts)-1] + ": " + proseValue(raw) + "\n")
			c, err := Parse(d.Name, []byte(y.String()), nil)
			if err != nil {
				t.Errorf("%s:%d: `%s` %s: not a value of the key: %v", d.Name, line, key, raw, err)
				continue
			}
			got, _ := c.Marshal()
			if string(got) != string(want) {
				t.Errorf("%s:%d: `%s` is said to be %s; the default is otherwise:\n%s", d.Name, line, key, raw, diffNamed("said", string(got), "Default", string(want)))
			}
		}
	}
	if checked < 25 {
		t.Errorf("only %d defaults found in the prose; the pattern broke", checked)
	}
}
