package config

import (
	"strings"
	"testing"
)

func TestTooManyProblemsAreSummarised(t *testing.T) {
	_, err := Parse("test.yaml", []byte("routes:\n"+strings.Repeat("  - {name: X}\n", 120)), nil)
	got := errorStrings(t, err)
	if len(got) != maxErrors+1 || got[maxErrors] != "140 more problems not shown" {
		t.Errorf("got %d problems, last %q", len(got), got[len(got)-1])
	}
}

func TestFieldErrorFormat(t *testing.T) {
	tests := []struct {
		e    FieldError
		want string
	}{
		{FieldError{Path: "routes[1].match", Msg: `unknown method "GTE"`}, `routes[1].match: unknown method "GTE"`},
		{FieldError{Path: "routes[1].match", Line: 7, Msg: `unknown method "GTE"`}, `routes[1].match: unknown method "GTE" (line 7)`},
		{FieldError{Path: "upstream.url", Env: "EXGATE_UPSTREAM_URL", Msg: "x"}, `EXGATE_UPSTREAM_URL (upstream.url): x`},
		{FieldError{Msg: "f.yaml: invalid YAML: x", Line: 3}, `f.yaml: invalid YAML: x (line 3)`},
	}
	for _, tt := range tests {
		if got := tt.e.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
	es := Errors{&tests[0].e, &tests[1].e}
	if got := es.Error(); got != tests[0].want+"\n"+tests[1].want {
		t.Errorf("Errors.Error() = %q", got)
	}
}
