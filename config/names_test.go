package config

import "testing"

func TestNames(t *testing.T) {
	tests := []struct {
		s         string
		name, env bool
	}{
		{"place_order", true, false},
		{"vip2", true, false},
		{"", false, false},
		{"Place", false, false},
		{"a-b", false, false},
		{"EXGATE_KEY_SECRET", false, true},
		{"_X1", false, true},
		{"1X", false, false},
		{"lower", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.s, func(t *testing.T) {
			if got := isName(tt.s); got != tt.name {
				t.Errorf("isName(%q) = %v, want %v", tt.s, got, tt.name)
			}
			if got := isEnvName(tt.s); got != tt.env {
				t.Errorf("isEnvName(%q) = %v, want %v", tt.s, got, tt.env)
			}
		})
	}
}

func TestSuggest(t *testing.T) {
	candidates := []string{"read_timeout", "write_timeout", "place_order", "cancel_order", "ietf"}
	tests := []struct {
		s, want string
	}{
		{"read_timeuot", "read_timeout"}, // swapped neighbours count once
		{"READ_TIMEOUT", "read_timeout"}, // case is ignored
		{"write_timout", "write_timeout"},
		{"place_ordr", "place_order"},
		{"ietd", "ietf"},
		{"legacy", ""},                       // nothing close
		{"ie", ""},                           // too far for a short candidate
		{"x" + string(make([]byte, 80)), ""}, // long input is not compared
	}
	for _, tt := range tests {
		t.Run(tt.s, func(t *testing.T) {
			if got := suggest(tt.s, candidates); got != tt.want {
				t.Errorf("suggest(%q) = %q, want %q", tt.s, got, tt.want)
			}
		})
	}
	if got := didYouMean("place_ordr", candidates); got != `; did you mean "place_order"?` {
		t.Errorf("didYouMean = %q", got)
	}
	if got := didYouMean("zzz", candidates); got != "" {
		t.Errorf("didYouMean(no match) = %q, want \"\"", got)
	}
}
