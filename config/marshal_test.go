package config

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestMarshalRoundTrip(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.yaml")
	sources := map[string]*Config{"Default()": Default()}
	for _, f := range files {
		if strings.HasPrefix(filepath.Base(f), "bad-") {
			continue
		}
		c, err := Load(f, nil)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		sources[f] = c
	}
	for name, c := range sources {
		t.Run(name, func(t *testing.T) {
			b, err := c.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			c2, err := Parse("marshalled", b, nil)
			if err != nil {
				t.Fatalf("Parse(Marshal()) = %v\n%s", err, b)
			}
			if !reflect.DeepEqual(c, c2) {
				t.Errorf("round trip differs:\n%s", b)
			}
		})
	}
	b, _ := Default().Marshal()
	for _, want := range []string{"listen: :8080\n", "rate: 5400/1h", "match: '*'", "trusted_proxies: []"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("Marshal(Default()) lacks %q:\n%s", want, b)
		}
	}
}
