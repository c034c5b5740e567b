package limiter

import (
	"context"
	"strings"
	"testing"
)

// TestAccountLimits: with verification on, the built-in table counts its
// token limits per account: every token of one account draws on one
// bucket, the account's tier comes from the users file, then from the
// token's claim, and an account is never demoted by the spray guard.
func TestAccountLimits(t *testing.T) {
	cfg := mustLoad(t, `
identity: { verify: true, users_file: users.yaml, jwt: { tier_claim: tier } }
tiers: { vip: { list_markets: { rate: 400/1m } }, pro: { list_markets: { rate: 300/1m } } }
limiter: { token_spray: { max_tokens: 1 } }
`)
	for _, r := range cfg.Routes {
		for _, l := range r.Limits {
			if l.Key == "token" || l.Key == "account" && l.Name != "account" {
				t.Fatalf("built-in table with verification: route %s limit %+v", r.Name, l)
			}
		}
	}
	k, _ := NewKeyer(testSecret)
	rs := Compile(cfg, nil).WithUsers(map[string]string{"7": "vip"})
	markets := rs.Route("list_markets")
	a := addr("198.51.100.7")
	tests := []struct {
		name string
		reqs []Request // sent in turn, each until the bucket is empty
		want int
		tier string
	}{
		{"one account, two tokens: one bucket", []Request{
			{Token: "token-1", Account: k.AccountID("42"), User: "42", Addr: a},
			{Token: "token-2", Account: k.AccountID("42"), User: "42", Addr: a},
		}, 200, ""},
		{"users file tier", []Request{{Account: k.AccountID("7"), User: "7", Tier: "pro", Addr: a}}, 400, "vip"},
		{"claim tier", []Request{{Account: k.AccountID("8"), User: "8", Tier: "pro", Addr: a}}, 300, "pro"},
		{"unknown claim tier ignored", []Request{{Account: k.AccountID("9"), User: "9", Tier: "gold", Addr: a}}, 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newTestEnforcer(t, nil, newFakeClock())
			got := 0
			for _, r := range tt.reqs {
				got += count(e, markets, r, 450)
			}
			if got != tt.want {
				t.Fatalf("allowed %d, want %d", got, tt.want)
			}
			var d Decision
			e.Decide(context.Background(), markets, tt.reqs[0], &d)
			if d.Tier != tt.tier || d.Demoted || d.TokenID != "" || d.Identity() != tt.reqs[0].Account {
				t.Fatalf("decision %+v", d)
			}
		})
	}
	if k.AccountID("42") == k.ID("42") || len(k.AccountID("42")) != TokenIDLen {
		t.Fatal("an account key equals the token id of the same string")
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
