package config

import (
	"errors"
	"slices"
	"testing"
)

// parseCase is a row of a table of configuration documents: one that
// parses, and check (if any) holds of what it gives, or one refused with
// a problem at each of paths and nowhere else.
type parseCase struct {
	name   string
	yaml   string
	getenv func(string) (string, bool) // nil means an empty environment
	paths  []string                    // YAML paths of the problems; nil means valid
	check  func(t *testing.T, c *Config)
}

// runParseCases parses each case's document in a subtest of its name.
func runParseCases(t *testing.T, cases []parseCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("test.yaml", []byte(tt.yaml), tt.getenv)
			if tt.paths == nil {
				if err != nil {
					t.Fatal(err)
				}
				if tt.check != nil {
					tt.check(t, c)
				}
				return
			}
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("err = %v, want Errors", err)
			}
			got := make([]string, 0, len(errs))
			for _, e := range errs {
				got = append(got, e.Path)
			}
			slices.Sort(got)
			if want := slices.Sorted(slices.Values(tt.paths)); !slices.Equal(got, want) {
				t.Errorf("problems at %q, want exactly %q (%v)", got, want, err)
			}
		})
	}
}
