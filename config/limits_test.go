package config

import (
	"slices"
	"testing"
)

// TestDefaultLimitNames checks the names docs/configuration.md promises
// for limits written without one.
func TestDefaultLimitNames(t *testing.T) {
	tests := []struct {
		limits string
		want   []string
	}{
		{"[{key: address, rate: 1/1s}]", []string{"address"}},
		{"[{key: address, when: anonymous, rate: 1/1s}, {key: token, when: token, rate: 1/1s}]", []string{"address", "token"}},
		{"[{key: address, when: anonymous, rate: 1/1s}, {key: address, rate: 1/1m}]", []string{"address_anonymous", "address_always"}},
		{"[{key: address, rate: 1/1s}, {key: address, rate: 1/1m}, {key: address, when: token, rate: 1/1h}]", []string{"address_always_0", "address_always_1", "address_token"}},
	}
	for _, tt := range tests {
		t.Run(tt.limits, func(t *testing.T) {
			c, err := Parse("t.yaml", []byte("routes:\n  - {name: a, match: /a/, auth: optional, limits: "+tt.limits+"}\n"), env(nil))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, l := range c.Routes[0].Limits {
				got = append(got, l.Name)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("names %q, want %q", got, tt.want)
			}
		})
	}
}
