package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzParse checks that Parse never panics, that every problem it reports
// says something, and that whatever it accepts is valid and survives a
// Marshal/Parse round trip unchanged.
func FuzzParse(f *testing.F) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		"listen: ~\n",
		"routes: &r [*r]\n",
		"a: &a [*a, *a]\nb: &b [*a, *a]\n",
		"server: {<<: {read_timeout: 1s}}\n",
		"tiers: {vip: {place_order: {rate: 1/1d}}}\n",
		"upstream: {url: 'http://[::1]:80/x%20y'}\n",
		"client_ip: {trusted_proxies: ['::ffff:10.0.0.1', '10.1.2.3/8']}\n",
		"cors: {allowed_origins: ['https://bücher.example:0443', 'http://[0::1%25x]:80']}\n",
		"routes: [{name: a, match: '/a/{r...}'}, {name: b, match: 'GET /A/{x}/'}, {name: c, match: /}]\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz.yaml", data, nil)
		if err != nil {
			if c != nil {
				t.Fatalf("Parse returned a config with errors")
			}
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error is %T %v, want a non-empty Errors", err, err)
			}
			for _, e := range es {
				if e == nil || (e.Path == "" && e.Msg == "") {
					t.Fatalf("empty problem in %q", err)
				}
				_ = e.Error()
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted config fails Validate: %v", err)
		}
		b, err := c.Marshal()
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		c2, err := Parse("marshalled", b, nil)
		if err != nil {
			t.Fatalf("Parse(Marshal()) = %v\n%s", err, b)
		}
		if !reflect.DeepEqual(c, c2) {
			t.Fatalf("round trip differs:\n%s", b)
		}
	})
}
