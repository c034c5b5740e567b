package limiter

import (
	"fmt"
	"strings"
	"testing"
)

func TestParseTokens(t *testing.T) {
	k, _ := NewKeyer(testSecret)
	id1, id2 := k.ID("a"), k.ID("b")
	tiers := []string{"gold", "vip"}
	ok := []struct{ name, doc string }{
		{"empty", ""},
		{"comments only", "# nothing yet\n"},
		{"null tokens", "tokens:\n"},
		{"two", fmt.Sprintf("tokens:\n  %s: vip\n  %s: gold\n", id1, strings.ToUpper(id2))},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseTokens("tokens.yaml", []byte(tc.doc), tiers); err != nil {
				t.Fatal(err)
			}
		})
	}
	m, _ := ParseTokens("tokens.yaml", []byte(ok[3].doc), tiers)
	if m[id1] != "vip" || m[id2] != "gold" {
		t.Errorf("parsed %v", m)
	}
	bad := []struct{ name, doc, want string }{
		{"unknown tier", fmt.Sprintf("tokens:\n  %s: platinum\n", id1), `tokens.yaml:2: tokens.` + id1 + `: unknown tier "platinum"`},
		{"raw token", "tokens:\n  eyJhbGciOiJIUzI1NiJ9.secret: vip\n", `tokens.yaml:2: tokens: "eyJhbGciOiJIUzI1NiJ9.secret" is not a token id`},
		{"unknown key", "token:\n  x: y\n", `tokens.yaml:1: unknown key "token"`},
		{"not a mapping", "- a\n", `tokens.yaml:1: want a mapping`},
		{"duplicate", fmt.Sprintf("tokens:\n  %s: vip\n  %s: gold\n", id1, strings.ToUpper(id1)), "listed twice"},
		{"syntax", "tokens: [\n", "tokens.yaml: yaml:"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTokens("tokens.yaml", []byte(tc.doc), tiers)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestParseUsers(t *testing.T) {
	tiers := []string{"pro", "vip"}
	got, err := ParseUsers("users.yaml", []byte("users:\n  \"42\": vip\n  alice: pro\n"), tiers)
	if err != nil || len(got) != 2 || got["42"] != "vip" || got["alice"] != "pro" {
		t.Fatalf("%v %v", got, err)
	}
	_, err = ParseUsers("users.yaml", []byte("users:\n  \"7\": gold\n  \"42\": vip\n  \"42\": pro\ntokens: {}\n"), tiers)
	for _, want := range []string{`users.yaml:2: users.7: unknown tier "gold"`, "users.yaml:4: users.42: listed twice", `users.yaml:5: unknown key "tokens"; want "users"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}
