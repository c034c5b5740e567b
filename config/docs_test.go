package config

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
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
// it must load to exactly Default().
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
	// Every top-level section of the defaults appears in the block.
	for _, key := range []string{"listen:", "admin:", "server:", "upstream:", "client_ip:", "limiter:", "tiers:", "tokens_file:", "validation:", "idempotency:", "log:", "routes:"} {
		if !strings.Contains(block, "\n"+key) && !strings.HasPrefix(block, key) {
			t.Errorf("README defaults block lacks %s", key)
		}
	}
}

// diffLines lists the lines of a missing from b and of b missing from a.
func diffLines(a, b string) string {
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
			out = append(out, "README: "+l)
		}
	}
	for _, l := range strings.Split(b, "\n") {
		if !ma[l] {
			out = append(out, "Default: "+l)
		}
	}
	return strings.Join(out, "\n")
}
