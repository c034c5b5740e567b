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
	seen := map[string]bool{}
	for _, k := range asked {
		k = routes.ReplaceAllString(k, "EXGATE_ROUTES_<i>_")
		k = limits.ReplaceAllString(k, "_LIMITS_<j>_")
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
